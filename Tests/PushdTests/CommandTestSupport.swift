import Foundation
import PushdTestSupport
import QueueStore
import Locking
import Testing
@testable import pushd

/// Lines a command printed, on standard output and standard error, in order.
final class CapturedOutput: Sendable {
    private let lines = Lock<[(error: Bool, text: String)]>([])

    var output: [String] { lines.withLock { $0.filter { !$0.error }.map(\.text) } }
    var errors: [String] { lines.withLock { $0.filter(\.error).map(\.text) } }
    var text: String { output.joined(separator: "\n") }
    var errorText: String { errors.joined(separator: "\n") }

    func context(environment: [String: String] = [:]) -> CommandContext {
        var context = CommandContext()
        context.environment = environment
        context.output = { text in self.lines.withLock { $0.append((false, text)) } }
        context.errorOutput = { text in self.lines.withLock { $0.append((true, text)) } }
        return context
    }
}

/// Runs one command line through the parser and the command's `run`, as main.swift does.
struct CommandRun {
    var exitCode: Int32
    var output: CapturedOutput

    init(_ arguments: [String], environment: [String: String] = [:],
         _ run: (ParsedCommand, CommandContext) throws -> Int32) throws {
        let parsed = try ArgumentParser.parse(arguments, root: Commands.root)
        output = CapturedOutput()
        let context = output.context(environment: environment)
        do {
            exitCode = try run(parsed, context)
        } catch {
            context.errorOutput("pushd: \(error)")
            exitCode = 1
        }
    }
}

/// A temporary folder for configuration files, keys and certificates made with the
/// `openssl` command, removed when the test ends.
final class FileFixture {
    let directory: String

    init() throws {
        var template = Array((FileManager.default.temporaryDirectory.path + "/pushd-cli-XXXXXX").utf8CString)
        guard let made = mkdtemp(&template) else { throw FixtureError("mkdtemp failed") }
        directory = String(cString: made)
    }

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    struct FixtureError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    func path(_ name: String) -> String { directory + "/" + name }

    @discardableResult
    func write(_ name: String, _ text: String, mode: Int = 0o600) throws -> String {
        let file = path(name)
        try Data(text.utf8).write(to: URL(fileURLWithPath: file))
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: file)
        return file
    }

    func chmod(_ name: String, _ mode: Int) throws {
        try FileManager.default.setAttributes([.posixPermissions: mode], ofItemAtPath: path(name))
    }

    func openssl(_ arguments: [String]) throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = arguments
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        let errors = Pipe()
        process.standardError = errors
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        let message = errors.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw FixtureError("openssl \(arguments.joined(separator: " ")) failed: \(String(decoding: message, as: UTF8.self))")
        }
    }

    /// A PKCS#8 PEM private key like Apple's `.p8` files (on another curve, or RSA, on request).
    @discardableResult
    func signingKey(_ name: String, curve: String? = "P-256") throws -> String {
        if let curve {
            try openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:\(curve)", "-out", name])
        } else {
            try openssl(["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", name])
        }
        try chmod(name, 0o600)
        return path(name)
    }

    /// A self-signed certificate valid for `days` from now, and its key: `<name>.crt`, `<name>.key`.
    func certificate(_ name: String, days: Int = 365) throws {
        try openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-keyout", "\(name).key", "-out", "\(name).crt", "-subj", "/UID=com.example.\(name)/CN=\(name)",
                     "-days", String(days)])
        try chmod("\(name).key", 0o600)
    }

    /// A certificate valid between two fixed times (YYYYMMDDHHMMSSZ), made with `openssl ca`
    /// since `req -x509` only counts days forward from now.
    func certificate(_ name: String, from start: String, until end: String) throws {
        try write("\(name).cnf", """
            [ca]
            default_ca = d
            [d]
            database = \(name).index
            new_certs_dir = .
            serial = \(name).serial
            default_md = sha256
            policy = p
            [p]
            commonName = supplied
            """)
        try write("\(name).index", "")
        try write("\(name).serial", "01\n")
        try openssl(["req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                     "-keyout", "\(name).key", "-out", "\(name).csr", "-subj", "/CN=\(name)"])
        try openssl(["ca", "-batch", "-config", "\(name).cnf", "-selfsign", "-keyfile", "\(name).key", "-in", "\(name).csr",
                     "-startdate", start, "-enddate", end, "-notext", "-out", "\(name).crt"])
        try chmod("\(name).key", 0o600)
    }

    /// `<name>.p12` from `<name>.crt` and `<name>.key`.
    func pkcs12(_ name: String, password: String) throws {
        try openssl(["pkcs12", "-export", "-inkey", "\(name).key", "-in", "\(name).crt",
                     "-passout", "pass:\(password)", "-out", "\(name).p12"])
        try chmod("\(name).p12", 0o600)
    }
}

/// The built `pushd` binary, for tests of exit codes and real standard streams.
enum PushdBinary {
    static var path: String {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return root.appendingPathComponent(".build/debug/pushd").path
    }

    struct Result {
        var status: Int32
        var output: String
        var errors: String
    }

    static func run(_ arguments: [String], environment: [String: String] = [:], input: String? = nil) throws -> Result {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        var merged = ProcessInfo.processInfo.environment
        merged.removeValue(forKey: "PUSHD_DATABASE_URL")
        merged.merge(environment) { _, new in new }
        process.environment = merged
        // Files rather than pipes: a child writing a lot cannot stall on a full pipe.
        let folder = try FileFixture()
        _ = FileManager.default.createFile(atPath: folder.path("out"), contents: nil)
        _ = FileManager.default.createFile(atPath: folder.path("err"), contents: nil)
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: folder.path("out")))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: folder.path("err")))
        let stdin = Pipe()
        process.standardInput = stdin
        try process.run()
        if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
        try stdin.fileHandleForWriting.close()
        process.waitUntilExit()
        let outputData = FileManager.default.contents(atPath: folder.path("out")) ?? Data()
        let errorData = FileManager.default.contents(atPath: folder.path("err")) ?? Data()
        return Result(status: process.terminationStatus, output: String(decoding: outputData, as: UTF8.self),
                      errors: String(decoding: errorData, as: UTF8.self))
    }
}
