import Foundation
import Glibc
import Spawn

/// Key material made once per test process with the openssl CLI: a server certificate for
/// 127.0.0.1 (trusted through `trustedCAFile`) and a client certificate as PEM and PKCS#12.
struct TestCertificates: Sendable {
    let directory: String
    var serverCertificate: String { directory + "/server.pem" }
    var serverKey: String { directory + "/server.key" }
    var clientCertificate: String { directory + "/client.pem" }
    var clientKey: String { directory + "/client.key" }
    var clientPKCS12: String { directory + "/client.p12" }
    static let pkcs12Password = "p12-secret"

    static let shared: Result<TestCertificates, TestServerError> = {
        do throws(TestServerError) { return .success(try make()) } catch { return .failure(error) }
    }()

    static func get() throws -> TestCertificates { try shared.get() }

    private static func make() throws(TestServerError) -> TestCertificates {
        let directory = NSTemporaryDirectory() + "pushd-dispatcher-tests-\(getpid())"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let certificates = TestCertificates(directory: directory)
        try run(executablePath("openssl"), ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                     "-keyout", certificates.serverKey, "-out", certificates.serverCertificate, "-days", "2",
                                     "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        try run(executablePath("openssl"), ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                                     "-keyout", certificates.clientKey, "-out", certificates.clientCertificate, "-days", "2",
                                     "-subj", "/CN=com.example.app"])
        try run(executablePath("openssl"), ["pkcs12", "-export", "-in", certificates.clientCertificate, "-inkey", certificates.clientKey,
                                     "-out", certificates.clientPKCS12, "-passout", "pass:\(pkcs12Password)"])
        return certificates
    }

    static func run(_ executable: String, _ arguments: [String]) throws(TestServerError) {
        var child: Subprocess
        do {
            child = try Subprocess.start([executable] + arguments, output: .discard, error: .discard)
        } catch {
            throw .launchFailed("\(error)")
        }
        // A failed wait is no success (`Termination.unknown`), as a zero status read after one was.
        let termination = child.waitForTermination()
        guard termination == .exited(0) else { throw .launchFailed("\(executable) \(arguments.joined(separator: " ")) \(termination)") }
    }
}

/// Starts a program with stdout to `stdoutPath` and stderr discarded (Foundation's Process
/// waits on a run loop that test threads do not run).
func spawn(_ executable: String, _ arguments: [String], stdoutPath: String) throws(TestServerError) -> pid_t {
    do {
        return try Subprocess.start([executable] + arguments, output: .append(stdoutPath), error: .discard).pid
    } catch {
        throw .launchFailed("\(error)")
    }
}

enum TestServerError: Error, CustomStringConvertible {
    case launchFailed(String)
    case notListening(Int)
    var description: String {
        switch self {
        case .launchFailed(let what): return "could not start \(what)"
        case .notListening(let port): return "server did not listen on 127.0.0.1:\(port) within 10 s"
        }
    }
}

/// Finds a tool on PATH or in the sbin directories Debian installs servers into.
func executablePath(_ name: String) throws(TestServerError) -> String {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    for directory in path.split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/local/sbin", "/usr/bin"] {
        let candidate = directory + "/" + name
        if access(candidate, X_OK) == 0 { return candidate }
    }
    throw .launchFailed("\(name): not found on PATH (install it; see scripts/install-deps.sh)")
}

/// A free TCP port on 127.0.0.1 at the time of asking.
func freeLoopbackPort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return Int(UInt16(bigEndian: address.sin_port))
}

func waitUntilListening(port: Int) throws(TestServerError) {
    for _ in 0..<500 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        close(fd)
        if connected == 0 { return }
        usleep(20_000)
    }
    throw .notListening(port)
}

/// `nghttpd` (nghttp2's HTTP/2 server) on 127.0.0.1 with TLS, serving a tiny `/ok`
/// document; stopped when the value is released.
final class NghttpdServer: @unchecked Sendable {
    let port: Int
    let certificates: TestCertificates
    let logFile: String
    private let pid: pid_t

    init(maxConcurrentStreams: Int? = nil, requireClientCertificate: Bool = false, verbose: Bool = false) throws {
        certificates = try TestCertificates.get()
        port = freeLoopbackPort()
        let htdocs = certificates.directory + "/htdocs"
        try? FileManager.default.createDirectory(atPath: htdocs, withIntermediateDirectories: true)
        // A non-empty document: with `content-length: 0` libcurl finishes the transfer before the
        // stream's END_STREAM arrives and resets every stream, which nghttpd punishes with GOAWAY.
        _ = FileManager.default.createFile(atPath: htdocs + "/ok", contents: Data("{}".utf8))
        logFile = certificates.directory + "/nghttpd-\(port).log"
        _ = FileManager.default.createFile(atPath: logFile, contents: Data())
        var arguments = ["--htdocs=" + htdocs]
        if let maxConcurrentStreams { arguments.append("--max-concurrent-streams=\(maxConcurrentStreams)") }
        if requireClientCertificate { arguments.append("--verify-client") }
        if verbose { arguments.append("-v") }
        arguments += [String(port), certificates.serverKey, certificates.serverCertificate]
        pid = try spawn(try executablePath("nghttpd"), arguments, stdoutPath: logFile)
        do {
            try waitUntilListening(port: port)
        } catch {
            kill(pid, SIGKILL)
            throw TestServerError.launchFailed("nghttpd \(arguments.joined(separator: " ")): \(error); log: \(log)")
        }
    }

    var log: String { (try? String(contentsOfFile: logFile, encoding: .utf8)) ?? "" }

    deinit {
        kill(pid, SIGKILL)
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0, errno == EINTR {}
    }
}
