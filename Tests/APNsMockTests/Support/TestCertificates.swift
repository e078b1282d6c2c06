import APNsMock
import Posix
import Foundation

/// One CA, server and client certificate for the whole test process.
enum TestCertificates {
    static let directory = NSTemporaryDirectory() + "apns-mock-tests-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"

    private static let generated: Result<GeneratedCertificates, MockServerError> = {
        // Keys and certificates live only as long as the test process.
        atexit { try? FileManager.default.removeItem(atPath: TestCertificates.directory) }
        do throws(MockServerError) {
            return .success(try CertificateGenerator.generate(into: directory))
        } catch {
            return .failure(error)
        }
    }()

    static func files() throws -> GeneratedCertificates { try generated.get() }
}

/// Starts a mock on a free port for one test and stops it afterwards.
func withMockServer<T>(
    _ configure: (inout MockConfiguration) throws -> Void = { _ in },
    _ body: (APNsMockServer, UInt16) throws -> T
) throws -> T {
    let files = try TestCertificates.files()
    var configuration = MockConfiguration(certificateChainFile: files.serverCertificate, privateKeyFile: files.serverKey)
    configuration.logsAccepted = true
    configuration.countsPerToken = true
    try configure(&configuration)
    let server = try APNsMockServer(configuration: configuration)
    let port = try server.start()
    defer { server.stop() }
    return try body(server, port)
}

/// 64 hex characters built from a seed, distinct per seed.
func deviceToken(_ seed: Int) -> String {
    let hex = String(seed, radix: 16)
    return String(repeating: "0", count: 64 - hex.count) + hex
}

let examplePayload = Array(#"{"aps":{"alert":{"title":"Order shipped","body":"Your parcel is on its way"},"badge":1,"sound":"default"},"orderID":"A-1042"}"#.utf8)

/// Polls `condition` until it holds or `seconds` pass; for state the server updates after the
/// client has already seen its answer (connection close, for example).
func eventually(within seconds: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Timestamp().addingTimeInterval(seconds)
    while Timestamp() < deadline {
        if condition() { return true }
        Thread.sleep(forTimeInterval: 0.01)
    }
    return condition()
}
