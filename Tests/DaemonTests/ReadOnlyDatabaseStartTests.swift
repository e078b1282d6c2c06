import Foundation
import Glibc
import PushdTestSupport
import Testing
@testable import pushd

/// `pushd run` against a database that takes no writes: it can register, claim and record
/// nothing there, so it says so (log and `/readyz`) and waits, and starts once writes are taken.
@Suite(.serialized) struct ReadOnlyDatabaseStartTests {
    @Test func runWaitsForAReadOnlyDatabaseToTakeWritesAndSaysSo() throws {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            defer { admin.close() }
            try admin.query("ALTER DATABASE \(database.name) SET default_transaction_read_only = on")
            var restored = false
            defer { if !restored { _ = try? admin.query("ALTER DATABASE \(database.name) RESET default_transaction_read_only") } }

            let harness = try DaemonHarness(database: database)
            let config = try harness.writeConfigFile()
            let log = harness.directory + "/run.log"
            let process = Process()
            process.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
            process.arguments = ["run", "--config", config, "--migrate"]
            process.environment = SecretRedactionTests.environment(databaseURL: database.url)
            _ = FileManager.default.createFile(atPath: log, contents: nil)
            let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
            process.standardOutput = handle
            process.standardError = handle
            try process.run()
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            func logText() -> String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

            #expect(DaemonHarness.wait(seconds: 20) { logText().contains(#""event":"database_read_only""#) }, "\(logText())")
            #expect(logText().contains("the database is read-only (transaction_read_only is on: default_transaction_read_only set for the server, "
                                       + "the database or the role): pushd can record nothing there (no migration, heartbeat, claim or outcome), "
                                       + "so it does not start sending until the database takes writes"), "\(logText())")
            #expect(!logText().contains("database unreachable"), "\(logText())")
            let port = try #require(logText().firstMatch(of: /"metrics":"127\.0\.0\.1:(\d+)"/)?.1, "\(logText())")
            let readyz = try SecretRedactionTests.http(String(port), "/readyz")
            #expect(readyz.contains("503") && readyz.contains("not ready: the database is read-only"), "\(readyz)")

            try admin.query("ALTER DATABASE \(database.name) RESET default_transaction_read_only")
            restored = true
            #expect(DaemonHarness.wait(seconds: 20) { logText().contains("pushd is running") }, "\(logText())")
            kill(process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(process, seconds: 15))
        }
    }
}
