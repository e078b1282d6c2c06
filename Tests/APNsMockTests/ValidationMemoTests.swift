import APNs
@testable import APNsMock
import Testing

@Suite("apns-mock reuses a validation verdict only where the validator would give the same")
struct ValidationMemoTests {
    private static let validator = APNsRequestValidator(allowedBundleIDs: ["com.example.app"])

    private static func request(method: String = "POST", path: String, headers: [HeaderField], body: [UInt8]) -> IncomingRequest {
        var request = IncomingRequest(streamID: 1)
        request.method = method
        request.path = path
        request.headers = headers
        request.body = body
        return request
    }

    /// Paths that pass, and paths that fail, each of the validator's path checks.
    private static let paths = [
        "/3/device/" + deviceToken(1), "/3/device/" + deviceToken(2), "/3/device/" + deviceToken(3).uppercased(),
        "/3/device/" + String(repeating: "ab", count: 100), "/3/device/" + String(repeating: "ab", count: 101),
        "/3/device/", "/3/device/" + deviceToken(1) + "/x", "/3/device/" + deviceToken(1) + "?a=b",
        "/3/device/" + String(deviceToken(1).dropLast()), "/3/device/" + String(deviceToken(1).dropLast(2)) + "zz",
        "/4/device/" + deviceToken(1), "/3/devices/" + deviceToken(1), "/",
    ]

    private static let headerSets: [[HeaderField]] = [
        [HeaderField(name: "apns-topic", value: "com.example.app")],
        [HeaderField(name: "apns-topic", value: "com.example.app"), HeaderField(name: "apns-push-type", value: "alert"),
         HeaderField(name: "apns-priority", value: "10"), HeaderField(name: "authorization", value: "bearer a.b.c")],
        [HeaderField(name: "apns-topic", value: "com.example.app"),
         HeaderField(name: "apns-id", value: "7b0b3a5e-6d0c-4c9e-9c35-6a3b8f1d2e40")],
        [HeaderField(name: "apns-topic", value: "com.example.app"),
         HeaderField(name: "apns-id", value: "7B0B3A5E-6D0C-4C9E-9C35-6A3B8F1D2E41")],
        [HeaderField(name: "apns-topic", value: "com.example.other")],
        [HeaderField(name: "apns-topic", value: "com.example.app"), HeaderField(name: "apns-topic", value: "com.example.app")],
        [HeaderField(name: "apns-topic", value: "com.example.app"), HeaderField(name: "apns-push-type", value: "background"),
         HeaderField(name: "apns-priority", value: "10")],
        [HeaderField(name: "apns-topic", value: "com.example.app.voip"), HeaderField(name: "apns-push-type", value: "voip")],
        [HeaderField(name: "apns-push-type", value: "alert")],
        [HeaderField(name: "apns-topic", value: "com.example.app"), HeaderField(name: "apns-expiration", value: "soon")],
    ]

    private static let bodies: [[UInt8]] = [
        examplePayload, Array(#"{"aps":{"content-available":1}}"#.utf8), [], Array("[1,2]".utf8), Array(#"{"aps":"#.utf8),
        Array(repeating: UInt8(ascii: " "), count: 5000) + examplePayload,
    ]

    @Test func everyVerdictInALongMixedSequenceEqualsTheValidators() {
        var memo = ValidationMemo()
        var random = SplitMix64(seed: 42)
        var reused = 0
        var previous: IncomingRequest?
        for _ in 0..<5000 {
            // Mostly the previous request with another path, as a campaign sends; sometimes
            // anything else.
            var next: IncomingRequest
            if let previous, random.next() % 4 != 0 {
                next = previous
                next.path = Self.paths[Int(random.next() % UInt64(Self.paths.count))]
            } else {
                next = Self.request(
                    method: random.next() % 10 == 0 ? "GET" : "POST",
                    path: Self.paths[Int(random.next() % UInt64(Self.paths.count))],
                    headers: Self.headerSets[Int(random.next() % UInt64(Self.headerSets.count))],
                    body: Self.bodies[Int(random.next() % UInt64(Self.bodies.count))])
            }
            let expected = Self.validator.validate(method: next.method, path: next.path, headers: next.headers, body: next.body)
            let got = memo.validate(next, with: Self.validator)
            #expect(got == expected, "\(next.method) \(next.path) \(next.headers) \(next.body.count) bytes")
            if let previous, previous.method == next.method, previous.headers == next.headers, previous.body == next.body {
                reused += 1
            }
            previous = next
        }
        #expect(reused > 2000)
    }

    @Test func anAcceptedVerdictCarriesTheNewRequestsTokenInLowercase() {
        var memo = ValidationMemo()
        let headers = Self.headerSets[1]
        _ = memo.validate(Self.request(path: "/3/device/" + deviceToken(1), headers: headers, body: examplePayload), with: Self.validator)
        let verdict = memo.validate(
            Self.request(path: "/3/device/" + deviceToken(2).uppercased(), headers: headers, body: examplePayload), with: Self.validator)
        guard case .accepted(let accepted) = verdict else {
            Issue.record("expected an accepted verdict, got \(verdict)")
            return
        }
        #expect(accepted.token.hex == deviceToken(2))
    }
}
