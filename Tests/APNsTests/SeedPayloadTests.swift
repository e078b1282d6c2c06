import APNs
import Posix
import Foundation
import Testing

/// Every payload the seed documents in the project brief show, built with `Payload` and
/// accepted by both validators.
@Suite struct SeedPayloadTests {
    static let topic = "com.example.app"

    static func expectSendable(_ payload: Payload, pushType: PushType = .alert, priority: Priority? = .immediate,
                               topic: String = topic, sourceLocation: SourceLocation = #_sourceLocation) {
        let n = APNsNotification(token: TestSupport.token(), topic: topic, pushType: pushType, priority: priority, payload: payload)
        #expect(NotificationValidator.issues(in: n) == [], sourceLocation: sourceLocation)
        let verdict = APNsRequestValidator(allowedBundleIDs: [Self.topic])
            .validate(method: "POST", path: n.path, headers: n.headerFields(authorization: nil), body: n.payload)
        if case .rejected(let status, let reason) = verdict {
            Issue.record("server-side validation rejected with \(status) \(reason)", sourceLocation: sourceLocation)
        }
    }

    /// Seed 002 (iOS 8 categories): `{"aps":{"alert":"example","sound":"default","badge":1,"category":"identifier"}}`.
    @Test func seed002CategoryPayload() throws {
        let payload = Payload(aps: APS(alert: "example", badge: 1, sound: .default, category: "identifier"))
        #expect(payload.bytes == Array(#"{"aps":{"alert":"example","badge":1,"sound":"default","category":"identifier"}}"#.utf8))
        let seed = Array(#"{ "aps" :{ "alert" : "example" , "sound" : "default" , "badge" : 1 , "category" : "identifier" }}"#.utf8)
        #expect(try Self.sameJSON(payload.bytes, seed))
        Self.expectSendable(payload)
    }

    /// Seed 003 (HTTP/2 provider API): the request with `{"aps":{"alert":"Hello"}}`.
    @Test func seed003HelloRequest() throws {
        let payload = Payload(aps: APS(alert: "Hello"))
        #expect(payload.bytes == Array(#"{"aps":{"alert":"Hello"}}"#.utf8))
        let n = APNsNotification(token: TestSupport.token(), topic: Self.topic, pushType: .alert, priority: .immediate, expiration: 0,
                                 apnsID: APNsID("eabeae54-14a8-11e5-b60b-1697f925ec7b"), payload: payload)
        #expect(n.path == "/3/device/00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")
        #expect(n.headerFields(authorization: nil).first == HeaderField(name: "apns-id", value: "eabeae54-14a8-11e5-b60b-1697f925ec7b"))
        Self.expectSendable(payload)
    }

    /// Seed 003 (creating a notification): title/subtitle/body alert, a category, and the
    /// custom key `gameID` beside `aps`.
    @Test func seed003GameInvitation() throws {
        let payload = Payload(aps: APS(
            alert: .fields(Alert(title: "Game Request", subtitle: "Five Card Draw", body: "Bob wants to play poker")),
            category: "GAME_INVITATION")).with("gameID", "12345678")
        #expect(payload.bytes == Array(#"{"aps":{"alert":{"title":"Game Request","subtitle":"Five Card Draw","body":"Bob wants to play poker"},"category":"GAME_INVITATION"},"gameID":"12345678"}"#.utf8))
        Self.expectSendable(payload)
    }

    /// Seed 001 (silent pushes): no alert or sound, `content-available: 1`, custom data for the app.
    @Test func seed001SilentPush() throws {
        let payload = Payload.background().with("data", ["key": "value"])
        #expect(payload.bytes == Array(#"{"aps":{"content-available":1},"data":{"key":"value"}}"#.utf8))
        Self.expectSendable(payload, pushType: .background, priority: .conservePower)
    }

    /// Seed 001 and 000: alert, sound and badge together, as requested at registration, with
    /// text in Chinese (raw UTF-8).
    @Test func seed001AlertSoundBadge() throws {
        let payload = Payload(aps: APS(alert: .fields(Alert(title: "订单", body: "您的订单已发货")), badge: 1, sound: .default))
        #expect(String(decoding: payload.bytes, as: UTF8.self) == #"{"aps":{"alert":{"title":"订单","body":"您的订单已发货"},"badge":1,"sound":"default"}}"#)
        Self.expectSendable(payload)
    }

    /// Seed 000 (iOS 12): a critical alert that plays even in Do Not Disturb, and a category
    /// registered with a "show detail" action.
    @Test func seed000CriticalAlertWithCategory() throws {
        let payload = Payload(aps: APS(
            alert: .fields(Alert(title: "Alarm", body: "Water leak detected")),
            sound: .critical(CriticalSound(critical: true, name: "default", volume: 1.0)),
            category: "kTCTCategoryDefault",
            interruptionLevel: .critical))
        #expect(String(decoding: payload.bytes, as: UTF8.self) == #"{"aps":{"alert":{"title":"Alarm","body":"Water leak detected"},"sound":{"critical":1,"name":"default","volume":1},"category":"kTCTCategoryDefault","interruption-level":"critical"}}"#)
        Self.expectSendable(payload)
    }

    /// Seed 000 (iOS 12): provisional authorization delivers quietly; a passive interruption
    /// level and a thread id for grouping express the same on the sending side.
    @Test func seed000ProvisionalQuietNotification() throws {
        let payload = Payload(aps: APS(alert: .fields(Alert(body: "Weekly summary")), threadID: "summary",
                                       category: "kTCTCategoryReply", interruptionLevel: .passive, relevanceScore: 0.2))
        Self.expectSendable(payload, priority: .conservePower)
    }

    /// Seed 000: the reply category's notification, localised on the device.
    @Test func seed000LocalizedReplyNotification() throws {
        let payload = Payload(aps: APS(alert: .fields(Alert(titleLocKey: "NEW_MESSAGE_TITLE", locKey: "NEW_MESSAGE_BODY", locArgs: ["Bob", "3"])),
                                       category: "kTCTCategoryReply", mutableContent: true))
        Self.expectSendable(payload)
    }

    static func sameJSON(_ a: [UInt8], _ b: [UInt8]) throws -> Bool {
        try normalized(JSONValue.parse(a)) == normalized(JSONValue.parse(b))
    }

    /// Object members sorted by key, so comparison ignores member order.
    static func normalized(_ value: JSONValue) -> JSONValue {
        switch value {
        case .object(let o):
            return .object(JSONObject(o.members.sorted { $0.key < $1.key }.map { JSONMember(key: $0.key, value: normalized($0.value)) }))
        case .array(let a):
            return .array(a.map(normalized))
        default:
            return value
        }
    }
}
