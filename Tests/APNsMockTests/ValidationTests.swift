import APNs
import APNsMock
import Posix
import Testing

/// Every rule the mock enforces, answered with APNs's status and reason over real HTTP/2.
@Suite("apns-mock validation")
struct ValidationTests {
    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var method = "POST"
        var path = "/3/device/" + deviceToken(42)
        var headers: [String] = ["apns-topic: com.example.app"]
        var body: [UInt8]? = examplePayload
        var status: Int
        var reason: String?
        var testDescription: String { name }
    }

    static let cases: [Case] = [
        Case(name: "valid alert", status: 200),
        Case(name: "GET", method: "GET", body: nil, status: 405, reason: "MethodNotAllowed"),
        Case(name: "wrong path", path: "/3/devices/abc", status: 404, reason: "BadPath"),
        Case(name: "no token", path: "/3/device/", status: 400, reason: "MissingDeviceToken"),
        Case(name: "short token", path: "/3/device/abcd", status: 400, reason: "BadDeviceToken"),
        Case(name: "non-hex token", path: "/3/device/" + String(repeating: "z", count: 64), status: 400, reason: "BadDeviceToken"),
        Case(name: "no topic", headers: [], status: 400, reason: "MissingTopic"),
        Case(name: "topic not allowed", headers: ["apns-topic: com.other.app"], status: 400, reason: "TopicDisallowed"),
        Case(name: "voip topic without suffix", headers: ["apns-topic: com.example.app", "apns-push-type: voip"], status: 400, reason: "BadTopic"),
        Case(name: "voip topic with suffix", headers: ["apns-topic: com.example.app.voip", "apns-push-type: voip"], status: 200),
        Case(name: "topic with a character no bundle id has", headers: ["apns-topic: com.example.my_app"], status: 400, reason: "BadTopic"),
        Case(name: "unknown push type", headers: ["apns-topic: com.example.app", "apns-push-type: banner"], status: 400, reason: "InvalidPushType"),
        Case(name: "bad priority", headers: ["apns-topic: com.example.app", "apns-priority: 7"], status: 400, reason: "BadPriority"),
        Case(name: "background at priority 10", headers: ["apns-topic: com.example.app", "apns-push-type: background", "apns-priority: 10"],
             body: Array(#"{"aps":{"content-available":1}}"#.utf8), status: 400, reason: "BadPriority"),
        // Apple: a missing apns-priority means 10, and background pushes must use 5.
        Case(name: "background without apns-priority", headers: ["apns-topic: com.example.app", "apns-push-type: background"],
             body: Array(#"{"aps":{"content-available":1}}"#.utf8), status: 400, reason: "BadPriority"),
        Case(name: "background at priority 1", headers: ["apns-topic: com.example.app", "apns-push-type: background", "apns-priority: 1"],
             body: Array(#"{"aps":{"content-available":1}}"#.utf8), status: 400, reason: "BadPriority"),
        Case(name: "background at priority 5", headers: ["apns-topic: com.example.app", "apns-push-type: background", "apns-priority: 5"],
             body: Array(#"{"aps":{"content-available":1}}"#.utf8), status: 200),
        // Apple: "32 lowercase hexadecimal digits … in the form 8-4-4-4-12".
        Case(name: "uppercase apns-id", headers: ["apns-topic: com.example.app", "apns-id: 0A1B2C3D-4E5F-4A6B-8C7D-9E0F1A2B3C4D"],
             status: 400, reason: "BadMessageId"),
        Case(name: "mixed-case apns-id", headers: ["apns-topic: com.example.app", "apns-id: 0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3C4d"],
             status: 400, reason: "BadMessageId"),
        Case(name: "lowercase apns-id", headers: ["apns-topic: com.example.app", "apns-id: 0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"],
             status: 200),
        Case(name: "bad expiration", headers: ["apns-topic: com.example.app", "apns-expiration: soon"], status: 400, reason: "BadExpirationDate"),
        Case(name: "collapse id over 64 bytes", headers: ["apns-topic: com.example.app", "apns-collapse-id: " + String(repeating: "c", count: 65)],
             status: 400, reason: "BadCollapseId"),
        Case(name: "malformed apns-id", headers: ["apns-topic: com.example.app", "apns-id: 1234"], status: 400, reason: "BadMessageId"),
        Case(name: "duplicate topic", headers: ["apns-topic: com.example.app", "apns-topic: com.example.app"], status: 400, reason: "DuplicateHeaders"),
        Case(name: "empty payload", body: [], status: 400, reason: "PayloadEmpty"),
        Case(name: "payload not JSON", body: Array("hello".utf8), status: 400, reason: "PayloadEmpty"),
        Case(name: "payload over 4096 bytes", body: Array(("{\"aps\":{},\"x\":\"" + String(repeating: "a", count: 4100) + "\"}").utf8),
             status: 413, reason: "PayloadTooLarge"),
        Case(name: "payload far over any limit", body: Array(repeating: UInt8(ascii: "a"), count: 40_000), status: 413, reason: "PayloadTooLarge"),
    ]

    @Test(arguments: cases)
    func answersLikeAPNs(_ testCase: Case) throws {
        try withMockServer({ $0.allowedBundleIDs = ["com.example.app"] }) { server, port in
            let request = TestRequest(method: testCase.method, path: testCase.path, headers: testCase.headers, body: testCase.body)
            let response = try H2Client.send(request, port: port)
            #expect(response.status == testCase.status)
            #expect(response.reason == testCase.reason)
            #expect(response.apnsID != nil, "every answer carries apns-id")
            if let reason = testCase.reason {
                #expect(response.headers["content-type"] == "application/json")
                #expect(server.stats.rejected(reason) == 1)
                #expect(server.stats.accepted == 0)
            } else {
                #expect(server.stats.accepted == 1)
            }
        }
    }

    @Test(arguments: PushType.allCases)
    func everyPushTypeIsAcceptedOnItsOwnTopicAndRefusedOnTheBareBundleID(_ pushType: PushType) throws {
        try withMockServer { server, port in
            let topic = pushType.topic(forBundleID: "com.example.app") ?? "com.apple.mgmt.External.1b2c3d4e"
            var headers = ["apns-push-type: \(pushType.rawValue)"]
            if pushType == .background { headers.append("apns-priority: 5") }
            // PushToTalk pushes take only expiration 0 (Apple's PushToTalk framework).
            if pushType == .pushtotalk { headers.append("apns-expiration: 0") }
            let body = Array(#"{"aps":{"content-available":1}}"#.utf8)
            let good = try H2Client.send(.push(token: deviceToken(1), topic: topic, headers: headers, body: body), port: port)
            #expect(good.status == 200, "\(pushType) on \(topic): \(good.body)")
            if let suffix = pushType.topicSuffix, !suffix.isEmpty {
                let bare = try H2Client.send(.push(token: deviceToken(1), topic: "com.example.app", headers: headers, body: body), port: port)
                #expect(bare.status == 400)
                #expect(bare.reason == "BadTopic")
            }
            #expect(server.stats.accepted == 1)
        }
    }

    @Test func voipPayloadsMayReach5120Bytes() throws {
        try withMockServer { _, port in
            let body = Array(("{\"aps\":{},\"x\":\"" + String(repeating: "v", count: 5000) + "\"}").utf8)
            let voip = try H2Client.send(.push(token: deviceToken(1), topic: "com.example.app.voip", headers: ["apns-push-type: voip"], body: body), port: port)
            #expect(voip.status == 200)
            let alert = try H2Client.send(.push(token: deviceToken(1), body: body), port: port)
            #expect(alert.status == 413)
        }
    }

    @Test func certificateConnectionsCannotSendLocationOrLiveActivityPushes() throws {
        let files = try TestCertificates.files()
        try withMockServer({ $0.authentication = .certificate(clientCAFile: files.caCertificate) }) { _, port in
            var options = H2Client.Options()
            options.clientCertificate = (files.clientCertificate, files.clientKey)
            for pushType in [PushType.location, .liveactivity] {
                let topic = try #require(pushType.topic(forBundleID: "com.example.app"))
                let response = try H2Client.send(
                    .push(token: deviceToken(1), topic: topic, headers: ["apns-push-type: \(pushType.rawValue)"]), port: port, options: options)
                #expect(response.status == 400)
                #expect(response.reason == "InvalidPushType")
            }
        }
    }

    @Test func developmentServerAnswersWithAnApnsUniqueID() throws {
        try withMockServer({ $0.development = true }) { _, port in
            let first = try H2Client.send(.push(token: deviceToken(1)), port: port)
            let second = try H2Client.send(.push(token: deviceToken(1), body: []), port: port)
            #expect(first.status == 200)
            let firstID = try #require(first.headers["apns-unique-id"])
            let secondID = try #require(second.headers["apns-unique-id"])
            #expect(APNsID.isCanonical(firstID) && APNsID.isCanonical(secondID))
            #expect(firstID != secondID)
        }
    }

    @Test func productionServerAnswersWithoutApnsUniqueID() throws {
        try withMockServer { _, port in
            let response = try H2Client.send(.push(token: deviceToken(1)), port: port)
            #expect(response.status == 200)
            #expect(response.headers["apns-unique-id"] == nil)
        }
    }

    @Test func errorAnswersEchoTheRequestsApnsID() throws {
        try withMockServer { _, port in
            let id = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
            let response = try H2Client.send(.push(token: deviceToken(1), headers: ["apns-id: \(id)"], body: []), port: port)
            #expect(response.status == 400)
            #expect(response.apnsID == id)
            #expect(response.body == #"{"reason":"PayloadEmpty"}"#)
        }
    }
}
