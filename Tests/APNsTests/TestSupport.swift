import APNs
import Foundation
import PushdTestSupport

/// Keys and tools the tests make at run time, never checked in.
enum TestSupport {
    static let token64 = "00fc13adff785122b4ad28809a3420982341241421348097878e577c991de8f0"

    static func token(_ hex: String = token64) -> DeviceToken {
        // Only called with literals known to be valid.
        (try? DeviceToken(hex)) ?? { preconditionFailure("test token literal is invalid: \(hex)") }()
    }

    struct CommandError: Error, CustomStringConvertible {
        var description: String
    }

    /// Runs a program and returns its standard output; throws with its standard error on failure.
    @discardableResult
    static func run(_ executable: String, _ arguments: [String], stdin: [UInt8]? = nil) throws -> [UInt8] {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        let out = Pipe()
        let err = Pipe()
        let input = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin)) }
        try input.fileHandleForWriting.close()
        let output = out.fileHandleForReading.readDataToEndOfFile()
        let errors = err.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw CommandError(description: "\(executable) \(arguments.joined(separator: " ")) exited \(process.terminationStatus): \(String(decoding: errors, as: UTF8.self))")
        }
        return [UInt8](output)
    }

    static let openssl = "/usr/bin/openssl"

    /// One folder per test process, removed when the process exits, so that keys and
    /// certificates made for the tests never pile up in the temporary directory.
    static let processDirectory: URL = {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("apns-tests-\(getpid())-\(UUID().uuidString)")
        try? FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        atexit { try? FileManager.default.removeItem(at: TestSupport.processDirectory) }
        return url
    }()

    /// A fresh directory inside the process's temporary folder.
    static func temporaryDirectory() throws -> URL {
        let url = processDirectory.appendingPathComponent(UUID().uuidString)
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    struct GeneratedKey {
        var directory: URL
        var privateKeyPath: String
        var publicKeyPath: String
        var privatePEM: String
        var publicPEM: String
    }

    /// A PKCS#8 PEM key like Apple's .p8 files, made with the openssl command.
    static func generateKey(algorithm: [String] = ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"]) throws -> GeneratedKey {
        let dir = try temporaryDirectory()
        let privatePath = dir.appendingPathComponent("AuthKey.p8").path
        let publicPath = dir.appendingPathComponent("public.pem").path
        try run(openssl, ["genpkey"] + algorithm + ["-out", privatePath])
        try run(openssl, ["pkey", "-in", privatePath, "-pubout", "-out", publicPath])
        return GeneratedKey(
            directory: dir, privateKeyPath: privatePath, publicKeyPath: publicPath,
            privatePEM: try String(contentsOfFile: privatePath, encoding: .utf8),
            publicPEM: try String(contentsOfFile: publicPath, encoding: .utf8))
    }
}

/// A deterministic generator for tests (SplitMix64).
struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
