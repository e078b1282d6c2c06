import APNs
import Posix
import Foundation
import Testing

@Suite struct NotificationTests {
    /// The request shown in the HTTP/2 provider API seed document, but for its
    /// `apns-priority: 10`, which APNs assumes when the header is absent.
    @Test func rendersTheSeedRequestHeaders() throws {
        let n = APNsNotification(
            token: TestSupport.token(),
            topic: "com.example.app",
            pushType: .alert,
            priority: .immediate,
            expiration: 0,
            apnsID: APNsID("EABEAE54-14A8-11E5-B60B-1697F925EC7B"),
            payload: Array(#"{"aps":{"alert":"Hello"}}"#.utf8))
        #expect(n.path == "/3/device/00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")
        #expect(APNsNotification.method == "POST")
        #expect(n.headerFields(authorization: nil).map(\.line) == [
            "apns-id: eabeae54-14a8-11e5-b60b-1697f925ec7b",
            "apns-push-type: alert",
            "apns-expiration: 0",
            "apns-topic: com.example.app",
        ])
        #expect(APNsEnvironment.sandbox.host == "api.sandbox.push.apple.com")
    }

    /// Apple: "If you omit this header, APNs sets the notification priority to 10." So 10 is
    /// not sent; 5 and 1 are, and so is 10 on a background push, which APNs refuses.
    @Test func leavesOutPriorityTenWhichAPNsAssumesWhenTheHeaderIsAbsent() {
        func priorityLines(_ pushType: PushType, _ priority: Priority?) -> [String] {
            APNsNotification(token: TestSupport.token(), topic: "com.example.app", pushType: pushType, priority: priority,
                             payload: Array("{}".utf8))
                .headerFields(authorization: "bearer x").map(\.line).filter { $0.hasPrefix("apns-priority") }
        }
        #expect(priorityLines(.alert, .immediate) == [])
        #expect(priorityLines(.voip, .immediate) == [])
        #expect(priorityLines(.alert, nil) == [])
        #expect(priorityLines(.alert, .conservePower) == ["apns-priority: 5"])
        #expect(priorityLines(.alert, .prioritizePower) == ["apns-priority: 1"])
        #expect(priorityLines(.background, .conservePower) == ["apns-priority: 5"])
        #expect(priorityLines(.background, .immediate) == ["apns-priority: 10"])
    }

    @Test func apnsIDPrintsAndParsesFoundationsCanonicalForm() {
        var ids = [UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
                   UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255)),
                   UUID(uuid: (0x12, 0x3e, 0x45, 0x67, 0xe8, 0x9b, 0x12, 0xd3, 0xa4, 0x56, 0x42, 0x66, 0x14, 0x17, 0x40, 0x00))]
        ids += (0..<1000).map { _ in UUID() }
        for id in ids {
            let parsed = APNsID(id.uuidString)
            #expect(parsed?.lowercasedString == id.uuidString.lowercased())
            #expect(APNsID(id.uuidString.lowercased()) == parsed)
        }
        #expect(APNsID("123e4567-e89b-12d3-a456-426614174000")?.high == 0x123e_4567_e89b_12d3)
    }

    @Test func apnsIDRejectsAnythingButThe8_4_4_4_12Form() {
        for text in ["", "123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400", "123e4567-e89b-12d3-a456-4266141740000",
                     "123e4567-e89b-12d3-a456_426614174000", "123e4567-e89b-12d3-a456-42661417400g", " 23e4567-e89b-12d3-a456-426614174000"] {
            #expect(APNsID(text) == nil, "\(text)")
            #expect(!APNsID.isCanonical(text), "\(text)")
        }
    }

    /// Apple: canonical UUIDs are "32 lowercase hexadecimal digits"; parsing stays lenient.
    @Test func apnsIDIsCanonicalOnlyInLowercase() {
        #expect(APNsID.isCanonical("123e4567-e89b-12d3-a456-426614174000"))
        #expect(!APNsID.isCanonical("123E4567-E89B-12D3-A456-426614174000"))
        #expect(!APNsID.isCanonical("123e4567-e89b-12d3-a456-42661417400A"))
        #expect(APNsID("123E4567-E89B-12D3-A456-426614174000") != nil)
    }

    @Test func newAPNsIDsAreRandomVersion4IDsFoundationReads() {
        let ids = (0..<1000).map { _ in APNsID() }
        #expect(Set(ids).count == ids.count)
        for id in ids {
            let text = id.lowercasedString
            #expect(UUID(uuidString: text)?.uuidString.lowercased() == text)
            #expect(Array(text)[14] == "4")
            #expect("89ab".contains(Array(text)[19]))
        }
    }

    @Test func optionalHeadersAreOmittedAndAuthorizationComesFirst() {
        let n = APNsNotification(token: TestSupport.token(), topic: "com.example.app.voip", pushType: .voip, collapseID: "c1", payload: [])
        #expect(n.headerFields(authorization: "bearer abc").map(\.line) == [
            "authorization: bearer abc",
            "apns-push-type: voip",
            "apns-topic: com.example.app.voip",
            "apns-collapse-id: c1",
        ])
    }

    @Test(arguments: PushType.allCases)
    func everyPushTypeRendersItsHeaderValue(type: PushType) {
        let n = APNsNotification(token: TestSupport.token(), topic: "t", pushType: type, payload: [])
        #expect(n.headerFields(authorization: nil).contains(HeaderField(name: "apns-push-type", value: type.rawValue)))
    }

    @Test func environmentsAndPorts() {
        #expect(APNsEnvironment.production.host == "api.push.apple.com")
        #expect(APNsEnvironment.production.baseURL() == "https://api.push.apple.com")
        #expect(APNsEnvironment.sandbox.baseURL(port: APNsEnvironment.alternativePort) == "https://api.sandbox.push.apple.com:2197")
        #expect(APNsEnvironment(name: "development") == .sandbox)
        #expect(APNsEnvironment(name: "staging") == nil)
    }

    @Test func priorityHeaderValuesParseExactly() {
        #expect(Priority.allCases.map(\.rawValue) == [10, 5, 1])
        #expect(Priority(headerValue: "5") == .conservePower)
        #expect(Priority(headerValue: "05") == nil)
        #expect(Priority(headerValue: "7") == nil)
    }
}
