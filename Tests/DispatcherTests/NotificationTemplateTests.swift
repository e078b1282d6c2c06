import APNs
@testable import Dispatcher
import Locking
import Testing

/// A campaign's requests built from one checked notification are the requests the client
/// builds one by one, and follow the provider token when it changes.
@Suite struct NotificationTemplateTests {
    final class Source: Sendable {
        let value = Lock("bearer first.jwt.value")
    }

    private func client(_ source: Source) throws -> APNsClient {
        // No request is sent: the engine starts but stays idle.
        try APNsClient(environment: .sandbox, authentication: .tokenSource({ source.value.withLock { $0 } }),
                       port: 1, hostOverride: "127.0.0.1")
    }

    private func notification(_ hex: String) throws -> APNs.Notification {
        APNs.Notification(token: try DeviceToken(hex), topic: "com.example.app", pushType: .alert, priority: .immediate,
                          expiration: 1_900_000_000, collapseID: "sale", payload: Array(#"{"aps":{"alert":"hi"}}"#.utf8))
    }

    @Test func aTemplateRequestIsTheRequestTheClientBuildsForThatToken() throws {
        let source = Source()
        let client = try client(source)
        defer { client.shutdown(drainTimeoutMilliseconds: 0) }
        let template = try NotificationTemplate(client: client, notification: try notification(String(repeating: "a", count: 64)))
        let other = String(repeating: "0123456789abcdef", count: 4)
        let fromTemplate = try template.request(for: try DeviceToken(other))
        let direct = try client.request(for: try notification(other))
        #expect(fromTemplate.path == "/3/device/" + other)
        #expect(fromTemplate.path == direct.path)
        #expect(fromTemplate.headerLines == direct.headerLines)
        #expect(fromTemplate.body == direct.body)
        #expect(fromTemplate.method == direct.method)
    }

    @Test func aRequestFromRawTokenBytesIsTheRequestForTheirHex() throws {
        let source = Source()
        let client = try client(source)
        defer { client.shutdown(drainTimeoutMilliseconds: 0) }
        let template = try NotificationTemplate(client: client, notification: try notification(String(repeating: "a", count: 64)))
        try template.refreshAuthorization()
        for length in [32, 33, 100] {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 5) }
            let token = try DeviceToken(bytes: bytes)
            let fromBytes = bytes.withUnsafeBytes { template.requestWithCurrentHeaders(forTokenBytes: $0) }
            let fromHex = try template.requestWithCurrentHeaders(for: token)
            #expect(fromBytes.path == "/3/device/" + token.hex)
            #expect(fromBytes.path == fromHex.path)
            #expect(fromBytes.headerLines == fromHex.headerLines)
            #expect(fromBytes.body == fromHex.body)
        }
    }

    @Test func aNewProviderTokenReachesTheNextRequest() throws {
        let source = Source()
        let client = try client(source)
        defer { client.shutdown(drainTimeoutMilliseconds: 0) }
        let template = try NotificationTemplate(client: client, notification: try notification(String(repeating: "a", count: 64)))
        let token = try DeviceToken(String(repeating: "b", count: 64))
        #expect(try template.request(for: token).headerLines.contains("authorization: bearer first.jwt.value"))
        source.value.withLock { $0 = "bearer second.jwt.value" }
        let after = try template.request(for: token).headerLines
        #expect(after.contains("authorization: bearer second.jwt.value"))
        #expect(!after.contains("authorization: bearer first.jwt.value"))
    }

    @Test func aBatchCarriesTheProviderTokenOfItsRefreshAndTheNextRefreshTakesTheNewOne() throws {
        let source = Source()
        let client = try client(source)
        defer { client.shutdown(drainTimeoutMilliseconds: 0) }
        let template = try NotificationTemplate(client: client, notification: try notification(String(repeating: "a", count: 64)))
        let token = try DeviceToken(String(repeating: "b", count: 64))
        try template.refreshAuthorization()
        source.value.withLock { $0 = "bearer second.jwt.value" }
        #expect(try template.requestWithCurrentHeaders(for: token).headerLines.contains("authorization: bearer first.jwt.value"))
        try template.refreshAuthorization()
        let after = try template.requestWithCurrentHeaders(for: token)
        #expect(after.headerLines.contains("authorization: bearer second.jwt.value"))
        #expect(after.path == "/3/device/" + String(repeating: "b", count: 64))
    }

    @Test func headerLinesAreCheckedOnceWhenTheBlockIsMade() {
        #expect(throws: DispatchRequestError.malformedHeaderLine(index: 1, line: "bad\r\nline: x")) {
            try DispatchRequest.HeaderBlock(lines: ["apns-topic: a", "bad\r\nline: x"])
        }
    }
}
