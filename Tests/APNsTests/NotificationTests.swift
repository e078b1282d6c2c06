import APNs
import Foundation
import Testing

@Suite struct NotificationTests {
    /// The request shown in the HTTP/2 provider API seed document.
    @Test func rendersTheSeedRequestHeaders() throws {
        let n = APNsNotification(
            token: TestSupport.token(),
            topic: "com.example.app",
            pushType: .alert,
            priority: .immediate,
            expiration: 0,
            apnsID: UUID(uuidString: "EABEAE54-14A8-11E5-B60B-1697F925EC7B"),
            payload: Array(#"{"aps":{"alert":"Hello"}}"#.utf8))
        #expect(n.path == "/3/device/00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")
        #expect(APNsNotification.method == "POST")
        #expect(n.headerFields(authorization: nil).map(\.line) == [
            "apns-id: eabeae54-14a8-11e5-b60b-1697f925ec7b",
            "apns-push-type: alert",
            "apns-expiration: 0",
            "apns-priority: 10",
            "apns-topic: com.example.app",
        ])
        #expect(APNsEnvironment.sandbox.host == "api.sandbox.push.apple.com")
    }

    @Test func lowercasedUUIDStringMatchesFoundationsFormLowercased() {
        var ids = [UUID(uuid: (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)),
                   UUID(uuid: (255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255))]
        ids += (0..<1000).map { _ in UUID() }
        for id in ids {
            #expect(id.lowercasedString == id.uuidString.lowercased())
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
