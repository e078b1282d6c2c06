import Foundation
import PushdTestSupport
import Posix
import Glibc
import Testing
@testable import pushd

/// `pushd run` and `pushd check-config` share one validation: whatever check-config calls an
/// error stops `run` at once with exit 1 and the same lines, and its warnings are logged by
/// `run` too. Only the database is waited for, not refused.
@Suite struct RunRefusesWhatCheckConfigRefusesTests {
    /// The real binary's `run`, stopped with SIGTERM if it is still running after `seconds`.
    struct BriefRun {
        var exited: Bool
        var status: Int32
        var errors: String
    }

    static func runBriefly(_ config: String, seconds: Double, until marker: String? = nil) throws -> BriefRun {
        let files = try FileFixture()
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: PushdBinary.path)
        process.arguments = ["run", "--config", config]
        process.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
        _ = FileManager.default.createFile(atPath: files.path("err"), contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: files.path("err")))
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        let deadline = Timestamp().addingTimeInterval(seconds)
        func errors() -> String { String(decoding: FileManager.default.contents(atPath: files.path("err")) ?? Data(), as: UTF8.self) }
        while process.isRunning, Timestamp() < deadline {
            if let marker, errors().contains(marker) { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let exited = !process.isRunning
        if !exited {
            kill(process.processIdentifier, SIGTERM)
            process.waitUntilExit()
        }
        return BriefRun(exited: exited, status: exited ? process.terminationStatus : -1, errors: errors())
    }

    /// check-config's error lines for `config`, without the database.
    static func checkConfigErrors(_ config: String) throws -> [String] {
        let run = try CheckConfigCommandTests.check(config)
        #expect(run.exitCode == 1, "\(run.output.text)")
        return run.output.output.filter { $0.hasPrefix("error: ") }
    }

    static func assertRunRefuses(_ config: String, mentioning expected: String) throws {
        let errors = try checkConfigErrors(config)
        #expect(errors.contains { $0.contains(expected) }, "\(errors)")
        let run = try runBriefly(config, seconds: 15)
        #expect(run.exited, "pushd run kept running with: \(errors)")
        #expect(run.status == 1)
        let lines = run.errors.split(separator: "\n").map(String.init)
        for error in errors {
            #expect(lines.contains(error), "run did not print \(error):\n\(run.errors)")
        }
    }

    static let quiet = "metrics:\n  listen: 127.0.0.1:0"

    @Test func aGarbageCAFileStopsRun() throws {
        let files = try FileFixture()
        try files.write("ca.crt", "not a certificate\n")
        let config = try CheckConfigCommandTests.writeConfig(files, extra: Self.quiet + "\napns:\n  ca_file: \(files.path("ca.crt"))")
        try Self.assertRunRefuses(config, mentioning: "apns.ca_file")
    }

    @Test(arguments: [Optional("wrong"), nil])
    func aPKCS12PasswordThatDoesNotOpenTheBundleStopsRun(password: String?) throws {
        let files = try FileFixture()
        try files.certificate("bundle")
        try files.pkcs12("bundle", password: "secret")
        let lines = "p12_file: \(files.path("bundle.p12"))" + (password.map { "\np12_password: \($0)" } ?? "")
        let config = try CheckConfigCommandTests.writeConfig(files, apps: CheckConfigCommandTests.certificateApp("bundle", lines),
                                                             extra: Self.quiet)
        try Self.assertRunRefuses(config, mentioning: "apps[0].certificate.p12_password")
    }

    @Test func aLogFileInAMissingFolderStopsRun() throws {
        let files = try FileFixture()
        let config = try CheckConfigCommandTests.writeConfig(
            files, extra: Self.quiet + "\nlog:\n  file: \(files.path("no/such/folder/pushd.log"))")
        try Self.assertRunRefuses(config, mentioning: "log.file")
    }

    @Test func aMetricsAddressInUseIsAnErrorForBothCommands() throws {
        let files = try FileFixture()
        let taken = try TakenPort()
        let config = try CheckConfigCommandTests.writeConfig(files, extra: "metrics:\n  listen: 127.0.0.1:\(taken.port)")
        try Self.assertRunRefuses(config, mentioning: "error: metrics.listen: 127.0.0.1:\(taken.port): the address is already in use")
    }

    @Test func runWarnsAboutAKeyFileOthersCanRead() throws {
        let files = try FileFixture()
        let config = try CheckConfigCommandTests.writeConfig(files, extra: Self.quiet)
        try files.chmod("shop.p8", 0o644)
        let marker = "holds a private key and is accessible by group or others (mode 644)"
        let run = try Self.runBriefly(config, seconds: 15, until: marker)
        // The database of this configuration is unreachable: run waits for it rather than exiting.
        #expect(!run.exited, "\(run.errors)")
        #expect(run.errors.contains(marker), "\(run.errors)")
        #expect(run.errors.contains("apps[0].token.key_file"))
    }

    @Test func aConfigurationFileHoldingAPasswordReadableByOthersIsAWarningForBothCommands() throws {
        let files = try FileFixture()
        let config = try CheckConfigCommandTests.writeConfig(files, database: "postgresql://pushd:hunter2@127.0.0.1:1/none",
                                                             extra: Self.quiet)
        try files.chmod("pushd.yml", 0o644)
        let check = try CheckConfigCommandTests.check(config)
        #expect(check.exitCode == 0, "\(check.output.text)")
        let expected = "warning: file: \(config) holds a password (database.url) and is readable by others (mode 644)"
        #expect(check.output.output.contains { $0.hasPrefix(expected) }, "\(check.output.text)")

        let run = try Self.runBriefly(config, seconds: 15, until: "holds a password (database.url)")
        #expect(!run.exited, "\(run.errors)")
        #expect(run.errors.contains("holds a password (database.url) and is readable by others"), "\(run.errors)")
        #expect(!run.errors.contains("hunter2 ") && !run.errors.contains("holds a password (database.url): hunter2"))
    }

    @Test func aConfigurationFileOnlyItsOwnerReadsIsNotFlagged() throws {
        let files = try FileFixture()
        let config = try CheckConfigCommandTests.writeConfig(files, database: "host=127.0.0.1 port=1 password=hunter2")
        let check = try CheckConfigCommandTests.check(config)
        #expect(!check.output.output.contains { $0.contains("holds a password") }, "\(check.output.text)")
    }

    @Test(arguments: [
        ("postgresql://pushd:secret@db/pushd", true),
        ("postgres://pushd@db/pushd?sslmode=require&password=secret", true),
        ("host=db user=pushd password=secret", true),
        ("postgresql://pushd@db/pushd", false),
        ("postgresql://db/pushd?sslmode=require", false),
        ("host=db user=pushd passfile=/etc/pushd/pgpass", false),
    ])
    func aPasswordInTheDatabaseURLIsRecognisedInEveryForm(url: String, holds: Bool) {
        #expect(ConfigCheck.databaseURLHoldsPassword(url) == holds)
    }
}

/// A loopback TCP port held by a listening socket for as long as the value lives.
final class TakenPort {
    let descriptor: Int32
    let port: UInt16

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, Glibc.listen(descriptor, 1) == 0 else {
            close(descriptor)
            throw FileFixture.FixtureError("cannot hold a port: \(errno)")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        self.port = UInt16(bigEndian: address.sin_port)
    }

    deinit { close(descriptor) }
}
