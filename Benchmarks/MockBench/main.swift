import APNs
import APNsMock
import Foundation

// Measures apns-mock with h2load sending realistic APNs POSTs (JWT bearer, apns-* headers,
// a ~150-byte payload; every request validated and its token checked against the cached
// verdict) and, in the same run, h2load against nghttpd serving a static file. Prints both
// rates and the ratio; the mock should reach at least half of nghttpd.
//
// Usage: MockBench [requests] [clients] [streams per client] [server threads]

struct Run {
    var requestsPerSecond: Double
    var succeeded: Int
    var failed: Int
    var summary: String
}

func run(_ executable: String, _ arguments: [String]) throws -> String {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return String(decoding: data, as: UTF8.self)
}

func h2load(_ arguments: [String]) throws -> Run {
    let text = try run("/usr/bin/h2load", arguments)
    var rate = 0.0
    var succeeded = 0
    var failed = 0
    var summary: [String] = []
    for line in text.split(separator: "\n") {
        if line.hasPrefix("finished in") {
            summary.append(String(line))
            if let field = line.split(separator: ",").dropFirst().first {
                rate = Double(field.trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "") ?? 0
            }
        }
        if line.hasPrefix("requests:") {
            summary.append(String(line))
            let words = line.split(separator: " ")
            for (index, word) in words.enumerated() where index > 0 {
                if word.hasPrefix("succeeded") { succeeded = Int(words[index - 1]) ?? 0 }
                if word.hasPrefix("failed") { failed = Int(words[index - 1]) ?? 0 }
            }
        }
        if line.hasPrefix("status codes:") { summary.append(String(line)) }
    }
    if rate == 0 { throw CocoaError(.featureUnsupported, userInfo: [NSLocalizedDescriptionKey: "h2load produced no rate:\n\(text)"]) }
    return Run(requestsPerSecond: rate, succeeded: succeeded, failed: failed, summary: summary.joined(separator: "\n  "))
}

/// CPU seconds this process has used (the mock's loop threads; h2load is a child and not counted).
func ownCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// CPU seconds used by another process, from /proc.
func processCPUSeconds(_ pid: Int32) -> Double {
    guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
          let close = text.lastIndex(of: ")") else { return 0 }
    let fields = text[text.index(after: close)...].split(separator: " ")
    guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
    return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
}

func freePort() throws -> UInt16 {
    let probe = try APNsMockServer(configuration: MockConfiguration(
        certificateChainFile: certificates.serverCertificate, privateKeyFile: certificates.serverKey))
    let port = try probe.start()
    probe.stop()
    return port
}

let arguments = CommandLine.arguments.dropFirst().compactMap { Int($0) }
let requests = arguments.count > 0 ? arguments[0] : 200_000
let clients = arguments.count > 1 ? arguments[1] : 4
let streams = arguments.count > 2 ? arguments[2] : 100
let threads = arguments.count > 3 ? arguments[3] : 1

let workDirectory = NSTemporaryDirectory() + "mockbench-\(getpid())"
let certificates = try CertificateGenerator.generate(into: workDirectory)
defer { try? FileManager.default.removeItem(atPath: workDirectory) }

let keyFile = workDirectory + "/AuthKey.p8"
_ = try run("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyFile])
let publicKeyPEM = try run("/usr/bin/openssl", ["pkey", "-in", keyFile, "-pubout"])
let signingKey = try SigningKey(contentsOfFile: keyFile, keyID: "BENCHKEY01", teamID: "BENCHTEAM1")
let token = try ProviderTokenSigner(key: signingKey).makeToken(issuedAt: Int64(Date().timeIntervalSince1970))

let payload = #"{"aps":{"alert":{"title":"Your order has shipped","body":"Parcel 1042 is on its way and arrives tomorrow."},"badge":3,"sound":"default"},"order":"A-1042"}"#
let payloadFile = workDirectory + "/payload.json"
try payload.write(toFile: payloadFile, atomically: true, encoding: .utf8)
let staticDirectory = workDirectory + "/htdocs"
try FileManager.default.createDirectory(atPath: staticDirectory, withIntermediateDirectories: true)
try String(repeating: "x", count: 32).write(toFile: staticDirectory + "/ok.txt", atomically: true, encoding: .utf8)

var configuration = MockConfiguration(certificateChainFile: certificates.serverCertificate, privateKeyFile: certificates.serverKey)
configuration.authentication = .token(
    keys: [ProviderKey(keyID: signingKey.keyID, teamID: signingKey.teamID, publicKeyPEM: publicKeyPEM)],
    // h2load opens all its streams before reading SETTINGS; the one-stream start would refuse them.
    startAtOneStream: false)
configuration.allowedBundleIDs = ["com.example.shop"]
configuration.loopThreads = threads
let mock = try APNsMockServer(configuration: configuration)
let mockPort = try mock.start()

// -N bounds the run: a stalled server ends it after 10 s instead of hanging the benchmark.
let common = ["-n", String(requests), "-c", String(clients), "-m", String(streams), "-t", "1", "-N", "10s"]
let apnsHeaders = [
    "-d", payloadFile,
    "-H", "authorization: " + token.authorizationValue,
    "-H", "apns-topic: com.example.shop",
    "-H", "apns-push-type: alert",
    "-H", "apns-priority: 10",
    "-H", "apns-expiration: 0",
]
let devicePath = "/3/device/" + String(repeating: "5f3c9a0b", count: 8)
print("apns-mock benchmark: \(requests) requests, \(clients) clients × \(streams) streams, payload \(payload.utf8.count) bytes, \(threads) server thread(s) each")
print("  \(ProcessInfo.processInfo.activeProcessorCount) cores, OpenSSL \(OpenSSLRuntime.version), nghttp2 \(HTTP2Library.version)")

struct Measured {
    var run: Run
    var cpuSeconds: Double
    var cpuPerThousand: Double { cpuSeconds / Double(requests) * 1000 }
}

// Warm-up runs first: TLS session set-up and first-token verification are not what is measured.
_ = try h2load(["-n", "2000", "-c", "1", "-m", "10", "-N", "10s"] + apnsHeaders + ["https://127.0.0.1:\(mockPort)" + devicePath])
mock.resetStats()
let mockCPUBefore = ownCPUSeconds()
let mockRunResult = try h2load(common + apnsHeaders + ["https://127.0.0.1:\(mockPort)" + devicePath])
let mockMeasured = Measured(run: mockRunResult, cpuSeconds: ownCPUSeconds() - mockCPUBefore)
let stats = mock.stats
mock.stop()

let nghttpdPort = try freePort()
let nghttpd = Process()
nghttpd.executableURL = URL(fileURLWithPath: "/usr/sbin/nghttpd")
nghttpd.arguments = ["-a", "127.0.0.1", "-n", String(threads), "-d", staticDirectory, String(nghttpdPort), certificates.serverKey, certificates.serverCertificate]
nghttpd.standardOutput = FileHandle.nullDevice
nghttpd.standardError = FileHandle.nullDevice
try nghttpd.run()
Thread.sleep(forTimeInterval: 0.5)

func measureNghttpd(_ arguments: [String]) throws -> Measured {
    _ = try h2load(["-n", "2000", "-c", "1", "-m", "10", "-N", "10s"] + arguments)
    let before = processCPUSeconds(nghttpd.processIdentifier)
    let run = try h2load(common + arguments)
    return Measured(run: run, cpuSeconds: processCPUSeconds(nghttpd.processIdentifier) - before)
}

// Two references: the same APNs POSTs (same headers, JWT and body, so the client and HPACK
// work are identical) answered with the static file, and a bare GET of it.
let samePost: Measured
let bareGet: Measured
do {
    samePost = try measureNghttpd(apnsHeaders + ["https://127.0.0.1:\(nghttpdPort)/ok.txt"])
    bareGet = try measureNghttpd(["https://127.0.0.1:\(nghttpdPort)/ok.txt"])
} catch {
    nghttpd.terminate()
    throw error
}
nghttpd.terminate()
nghttpd.waitUntilExit()

func format(_ value: Double) -> String { String(format: "%.0f", value) }
func describe(_ label: String, _ measured: Measured) {
    print("\(label) \(format(measured.run.requestsPerSecond)) req/s, \(String(format: "%.4f", measured.cpuPerThousand)) server CPU s per 1,000")
    print("  \(measured.run.summary)")
}
describe("apns-mock, APNs POST (JWT, validated):   ", mockMeasured)
print("  accepted \(stats.accepted), rejected \(stats.rejected.values.reduce(0, +)), token signature checks \(stats.providerTokenVerifications)")
describe("nghttpd, same POST → static file:        ", samePost)
describe("nghttpd, GET static file:                ", bareGet)
func ratio(_ reference: Measured) -> String {
    String(format: "%.2f", mockMeasured.run.requestsPerSecond / reference.run.requestsPerSecond)
}
// Server CPU per request does not depend on how busy the machine is; req/s does.
func cpuRatio(_ reference: Measured) -> String {
    String(format: "%.2f", reference.cpuPerThousand / mockMeasured.cpuPerThousand)
}
print("ratio apns-mock / nghttpd (same POST): \(ratio(samePost)) req/s (target ≥ 0.50), \(cpuRatio(samePost)) by CPU per request")
print("ratio apns-mock / nghttpd (bare GET):  \(ratio(bareGet)) req/s, \(cpuRatio(bareGet)) by CPU per request")
if mockMeasured.run.failed > 0 || stats.accepted != mockMeasured.run.succeeded {
    print("warning: \(mockMeasured.run.failed) requests failed; accepted \(stats.accepted) of \(mockMeasured.run.succeeded) answered 2xx")
}
