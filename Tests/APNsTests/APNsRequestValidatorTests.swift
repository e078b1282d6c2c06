import APNs
import Testing

@Suite struct APNsRequestValidatorTests {
    static let path = "/3/device/" + TestSupport.token64
    static let body = Array(#"{"aps":{"alert":"Hello"}}"#.utf8)
    static let validator = APNsRequestValidator(allowedBundleIDs: ["com.example.app"])

    static func headers(_ pairs: [(String, String)]) -> [HeaderField] {
        pairs.map { HeaderField(name: $0.0, value: $0.1) }
    }

    static let base: [(String, String)] = [("apns-topic", "com.example.app"), ("apns-push-type", "alert")]

    @Test func acceptsAWellFormedRequestWithDefaults() {
        let verdict = Self.validator.validate(method: "POST", path: Self.path, headers: Self.headers(Self.base + [("authorization", "bearer x")]), body: Self.body)
        guard case .accepted(let request) = verdict else { Issue.record("\(verdict)"); return }
        #expect(request.token.hex == TestSupport.token64)
        #expect(request.priority == .immediate)
        #expect(request.apnsID == nil)
        #expect(request.authorization == "bearer x")
        #expect(request.payloadSize == Self.body.count)
    }

    @Test func acceptsTheHeadersNotificationRenders() {
        let n = APNsNotification(token: TestSupport.token(), topic: "com.example.app.voip", pushType: .voip, priority: .immediate,
                                 expiration: 1_800_000_000, collapseID: "k", apnsID: .init(), payload: Self.body)
        let verdict = Self.validator.validate(method: "POST", path: n.path, headers: n.headerFields(authorization: "bearer t"), body: n.payload)
        guard case .accepted(let request) = verdict else { Issue.record("\(verdict)"); return }
        #expect(request.apnsID == n.apnsIDString)
        #expect(request.expiration == 1_800_000_000)
        #expect(request.pushType == .voip)
    }

    static let rejections: [(String, String, [(String, String)], [UInt8], Int, APNsReason)] = [
        ("GET", path, base, body, 405, .methodNotAllowed),
        ("POST", "/3/devices/abc", base, body, 404, .badPath),
        ("POST", "/3/device/" + TestSupport.token64 + "/x", base, body, 404, .badPath),
        ("POST", "/3/device/", base, body, 400, .missingDeviceToken),
        ("POST", "/3/device/xyz", base, body, 400, .badDeviceToken),
        ("POST", path, base + [("apns-topic", "com.example.app")], body, 400, .duplicateHeaders),
        ("POST", path, base + [("APNS-PRIORITY", "10"), ("apns-priority", "10")], body, 400, .duplicateHeaders),
        ("POST", path, [("apns-push-type", "alert")], body, 400, .missingTopic),
        ("POST", path, [("apns-topic", ""), ("apns-push-type", "alert")], body, 400, .missingTopic),
        ("POST", path, [("apns-topic", "com.example.app"), ("apns-push-type", "banner")], body, 400, .invalidPushType),
        ("POST", path, [("apns-topic", "com.example.app"), ("apns-push-type", "voip")], body, 400, .badTopic),
        ("POST", path, [("apns-topic", "com.example.app.voip"), ("apns-push-type", "alert")], body, 400, .badTopic),
        ("POST", path, [("apns-topic", "com example"), ("apns-push-type", "alert")], body, 400, .badTopic),
        ("POST", path, [("apns-topic", "com.other.app"), ("apns-push-type", "alert")], body, 400, .topicDisallowed),
        ("POST", path, base + [("apns-id", "not-a-uuid")], body, 400, .badMessageId),
        ("POST", path, base + [("apns-id", "eabeae54-14a8-11e5-b60b-1697f925ec7")], body, 400, .badMessageId),
        ("POST", path, base + [("apns-priority", "7")], body, 400, .badPriority),
        ("POST", path, [("apns-topic", "com.example.app"), ("apns-push-type", "background"), ("apns-priority", "10")], body, 400, .badPriority),
        ("POST", path, [("apns-topic", "com.example.app"), ("apns-push-type", "background")], body, 400, .badPriority),
        ("POST", path, [("apns-topic", "com.example.app"), ("apns-push-type", "background"), ("apns-priority", "1")], body, 400, .badPriority),
        ("POST", path, base + [("apns-id", "EABEAE54-14A8-11E5-B60B-1697F925EC7B")], body, 400, .badMessageId),
        ("POST", path, base + [("apns-id", "eabeae54-14a8-11e5-b60b-1697F925ec7b")], body, 400, .badMessageId),
        ("POST", path, base + [("apns-expiration", "-1")], body, 400, .badExpirationDate),
        ("POST", path, base + [("apns-expiration", "soon")], body, 400, .badExpirationDate),
        ("POST", path, base + [("apns-collapse-id", String(repeating: "c", count: 65))], body, 400, .badCollapseId),
        ("POST", path, base + [("apns-collapse-id", "a\u{0}b")], body, 400, .badCollapseId),
        ("POST", path, base, [], 400, .payloadEmpty),
        ("POST", path, base, Array(repeating: 0x20, count: 4097), 413, .payloadTooLarge),
        ("POST", path, base, Array("[1]".utf8), 400, .payloadEmpty),
        ("POST", path, base, Array(#"{"aps":"#.utf8), 400, .payloadEmpty),
    ]

    @Test(arguments: 0..<APNsRequestValidatorTests.rejections.count)
    func rejectsLikeAPNs(row: Int) {
        let (method, path, headers, body, status, reason) = Self.rejections[row]
        let verdict = Self.validator.validate(method: method, path: path, headers: Self.headers(headers), body: body)
        #expect(verdict == .rejected(status: status, reason: reason), "row \(row)")
    }

    @Test func voipAllowsTheLargerPayload() {
        var payload = Array(#"{"x":""#.utf8) + Array(repeating: UInt8(ascii: "a"), count: 5000)
        payload += Array(#""}"#.utf8)
        let verdict = Self.validator.validate(method: "POST", path: Self.path,
                                              headers: Self.headers([("apns-topic", "com.example.app.voip"), ("apns-push-type", "voip")]), body: payload)
        guard case .accepted = verdict else { Issue.record("\(verdict)"); return }
    }

    @Test func certificateConnectionsMayOmitTheTopic() {
        let validator = APNsRequestValidator(defaultTopic: "com.example.app")
        guard case .accepted(let r) = validator.validate(method: "POST", path: Self.path, headers: [], body: Self.body) else {
            Issue.record("rejected"); return
        }
        #expect(r.topic == "com.example.app")
        #expect(r.pushType == .alert)
    }
}
