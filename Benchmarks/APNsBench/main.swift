// Measures the per-send costs of the APNs module: validating a notification before it is sent,
// judging a request the way the mock server does, and minting/verifying ES256 provider tokens.
// References measured in the same run: Foundation's JSONSerialization on the same payloads
// (what validation would cost with the platform parser), and `openssl speed ecdsap256`
// (OpenSSL's own P-256 signing rate, the floor for JWT minting).
import APNs
import Foundation

let secondsPerMeasurement = 1.0

/// Rates are per second of user CPU time, as `openssl speed` reports them: on a machine
/// shared with other work, wall-clock rates measure the neighbours as much as the code.
struct Measurement {
    var operations: Int
    var seconds: Double
    var perSecond: Double { Double(operations) / seconds }
    var microseconds: Double { seconds * 1e6 / Double(operations) }
}

func userCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) * 1e-6
}

/// Runs `body` in batches until the time is up; `body` returns a value folded into a sink so
/// the optimiser cannot drop the work.
func measure(_ body: () -> Int) -> Measurement {
    var sink = 0
    for _ in 0..<100 { sink &+= body() }
    let start = userCPUSeconds()
    var operations = 0
    var elapsed = 0.0
    while elapsed < secondsPerMeasurement {
        for _ in 0..<200 { sink &+= body() }
        operations += 200
        elapsed = userCPUSeconds() - start
    }
    if sink == 42 { print("") }
    return Measurement(operations: operations, seconds: elapsed)
}

func format(_ value: Double) -> String { String(format: "%12.0f", value) }

func report(_ name: String, _ m: Measurement, reference: Measurement? = nil, referenceName: String = "") {
    var line = "\(name.padding(toLength: 52, withPad: " ", startingAt: 0))\(format(m.perSecond)) /s  \(String(format: "%8.2f", m.microseconds)) µs"
    if let reference {
        line += String(format: "   ×%.2f vs %@", m.perSecond / reference.perSecond, referenceName)
    }
    print(line)
}

func run(_ args: [String]) -> String? {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: args[0])
    process.arguments = Array(args.dropFirst())
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = FileHandle.nullDevice
    do { try process.run() } catch { return nil }
    let data = pipe.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return process.terminationStatus == 0 ? String(decoding: data, as: UTF8.self) : nil
}

OpenSSLRuntime.initialize()
let token = try DeviceToken("00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0")

let small = APNsNotification(
    token: token, topic: "com.example.app", pushType: .alert, priority: .immediate,
    payload: Payload(aps: APS(alert: .fields(Alert(title: "Game Request", subtitle: "Five Card Draw", body: "Bob wants to play poker")),
                              sound: .default, category: "GAME_INVITATION")).with("gameID", "12345678"))
var bigPayload = Payload(aps: APS(alert: .fields(Alert(title: "Weekly digest", body: "Your 20 most read stories")), badge: 20, threadID: "digest"))
bigPayload.set("stories", .array((0..<20).map { i in
    ["id": .int(100_000 + i), "title": .string("Story number \(i) with a reasonably long headline, 推送"), "score": .double(Double(i) / 20), "tags": ["news", "tech"]]
}))
let big = APNsNotification(token: token, topic: "com.example.app", pushType: .alert, priority: .immediate, payload: bigPayload)
let live = APNsNotification(
    token: token, topic: "com.example.app.push-type.liveactivity", pushType: .liveactivity, priority: .immediate,
    payload: Payload(aps: APS(timestamp: 1_700_000_000, event: .update, contentState: JSONObject(["eta": 5, "driver": "Anne", "stops": [1, 2, 3]]))))

print("APNsBench — \(ProcessInfo.processInfo.processorCount) cores, \(OpenSSLRuntime.version); rates per second of user CPU time")
print("payload sizes: small \(small.payload.count) B, large \(big.payload.count) B, live activity \(live.payload.count) B")
precondition(NotificationValidator.issues(in: small).isEmpty && NotificationValidator.issues(in: big).isEmpty && NotificationValidator.issues(in: live).isEmpty)
print("")
print("— notification validation (runs on every send)")
let smallFoundation = measure { (try? JSONSerialization.jsonObject(with: Data(small.payload))) == nil ? 0 : 1 }
let bigFoundation = measure { (try? JSONSerialization.jsonObject(with: Data(big.payload))) == nil ? 0 : 1 }
let smallValidation = measure { NotificationValidator.issues(in: small).count }
let bigValidation = measure { NotificationValidator.issues(in: big).count }
let liveValidation = measure { NotificationValidator.issues(in: live).count }
report("NotificationValidator, small payload", smallValidation, reference: smallFoundation, referenceName: "JSONSerialization parse only")
report("NotificationValidator, large payload", bigValidation, reference: bigFoundation, referenceName: "JSONSerialization parse only")
report("NotificationValidator, live activity payload", liveValidation)
report("reference: JSONSerialization parse, small payload", smallFoundation)
report("reference: JSONSerialization parse, large payload", bigFoundation)


print("")
print("— request building (per send)")
let smallPayload = Payload(aps: APS(alert: .fields(Alert(title: "Game Request", subtitle: "Five Card Draw", body: "Bob wants to play poker")),
                                    sound: .default, category: "GAME_INVITATION")).with("gameID", "12345678")
report("Payload render, small payload", measure { smallPayload.bytes.count })
report("Notification path + headerFields", measure { small.path.utf8.count &+ small.headerFields(authorization: "bearer x").count })

print("")
print("— server-side request validation (apns-mock, per request)")
let headers = small.headerFields(authorization: "bearer x")
let validator = APNsRequestValidator(allowedBundleIDs: ["com.example.app"])
report("APNsRequestValidator, small payload", measure {
    if case .accepted = validator.validate(method: "POST", path: small.path, headers: headers, body: small.payload) { return 1 }
    return 0
})
let failure = Array(#"{"reason":"Unregistered","timestamp":1700000000000}"#.utf8)
report("APNsResponse parse + classify (410 body)", measure {
    APNsResponse(status: 410, body: failure).action.retries ? 1 : 0
})

print("")
print("— provider tokens (ES256)")
let directory = FileManager.default.temporaryDirectory.appendingPathComponent("apnsbench-\(UUID().uuidString)")
try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
defer { try? FileManager.default.removeItem(at: directory) }
let keyPath = directory.appendingPathComponent("AuthKey.p8").path
guard run(["/usr/bin/openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyPath]) != nil else {
    print("openssl genpkey failed; cannot measure signing")
    exit(1)
}
let key = try SigningKey(contentsOfFile: keyPath, keyID: "ABC123DEFG", teamID: "DEF123GHIJ")
let signer = ProviderTokenSigner(key: key)
var iat: Int64 = 1_700_000_000
let publicKey = try key.publicKey
let sample = try DecodedProviderToken(jwt: signer.makeToken(issuedAt: 1_700_000_000).jwt)

// OpenSSL's own rate: "256 bits ecdsa (nistp256) <sign s> <verify s> <sign/s> <verify/s>".
func opensslSpeed() -> (sign: Measurement, verify: Measurement)? {
    guard let output = run(["/usr/bin/openssl", "speed", "-seconds", "1", "ecdsap256"]),
          let line = output.split(separator: "\n").last(where: { $0.contains("nistp256") }) else { return nil }
    let numbers = line.split(separator: " ").compactMap { Double($0.trimmingCharacters(in: CharacterSet(charactersIn: "s"))) }
    guard numbers.count >= 5 else { return nil }
    return (Measurement(operations: Int(numbers[numbers.count - 2]), seconds: 1),
            Measurement(operations: Int(numbers[numbers.count - 1]), seconds: 1))
}

func best(_ a: Measurement?, _ b: Measurement) -> Measurement {
    guard let a else { return b }
    return a.perSecond >= b.perSecond ? a : b
}

// Alternating rounds, best of each: even CPU time stretches when other processes thrash the
// caches, and the best round is the closest to the undisturbed rate.
var signing = Measurement(operations: 0, seconds: 1)
var verifying = Measurement(operations: 0, seconds: 1)
var opensslSign: Measurement?
var opensslVerify: Measurement?
for _ in 0..<2 {
    if let reference = opensslSpeed() {
        opensslSign = best(opensslSign, reference.sign)
        opensslVerify = best(opensslVerify, reference.verify)
    }
    signing = best(signing, measure {
        iat += 1
        return (try? signer.makeToken(issuedAt: iat))?.jwt.utf8.count ?? 0
    })
    verifying = best(verifying, measure { publicKey.verify(signature: sample.signature, message: sample.signingInput) ? 1 : 0 })
}
let cache = ProviderTokenCache(key: key)
let cached = measure { (try? cache.token(now: 1_700_000_000))?.jwt.utf8.count ?? 0 }
report("JWT mint (header, claims, ES256, base64url)", signing, reference: opensslSign, referenceName: "openssl speed ecdsap256 sign")
report("ES256 verify (r‖s → DER, EVP_DigestVerify)", verifying, reference: opensslVerify, referenceName: "openssl speed ecdsap256 verify")
report("ProviderTokenCache hit (mutex)", cached)
if let opensslSign, let opensslVerify {
    report("reference: openssl speed ecdsap256 sign", opensslSign)
    report("reference: openssl speed ecdsap256 verify", opensslVerify)
} else {
    print("reference: openssl speed unavailable")
}
