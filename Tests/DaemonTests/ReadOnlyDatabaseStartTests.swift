import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd run` against a database that takes no writes: it can register, claim and record
/// nothing there, so it says so (log and `/readyz`) and waits, and starts once writes are taken;
/// a SIGHUP meanwhile reloads the configuration once it has started.
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
            let process = ChildProcess()
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

            // A SIGHUP while it waits (its line says it reloads) reloads once it has started.
            kill(process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 10) { logText().contains("SIGHUP: reopened the log") }, "\(logText())")

            try admin.query("ALTER DATABASE \(database.name) RESET default_transaction_read_only")
            restored = true
            #expect(DaemonHarness.wait(seconds: 20) { logText().contains("pushd is running") }, "\(logText())")
            #expect(DaemonHarness.wait(seconds: 10) { logText().contains(#""event":"config_reloaded""#) },
                    "the SIGHUP sent while pushd waited for the database was not acted on: \(logText().suffix(2000))")
            kill(process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(process, seconds: 15))
        }
    }

    /// The server turned read-only under a running instance (`ALTER SYSTEM` and a reload, as an
    /// operator or a failover tool does): the stuck lanes, the heartbeat's warning, `/readyz`
    /// and `pushd status` all say the database is read-only; sending resumes once it takes writes.
    @Test func aServerTurnedReadOnlyUnderARunningInstanceIsNamedEverywhere() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(),
                                                             log: harness.directory + "/pushd-read-only.log")
            #expect(DaemonHarness.wait(seconds: 30) { daemon.readyz().contains("database reachable") }, "\(daemon.readyz())\n\(daemon.text)")
            let admin = try database.connect()
            defer { admin.close() }
            // This session keeps taking writes whatever the server's default becomes, to restore it.
            try admin.query("SET default_transaction_read_only = off")
            try admin.query("ALTER SYSTEM SET default_transaction_read_only = on")
            var restored = false
            func restore() {
                _ = try? admin.query("ALTER SYSTEM RESET default_transaction_read_only")
                _ = try? admin.query("SELECT pg_reload_conf()")
                restored = true
            }
            defer { if !restored { restore() } }
            try admin.query("SELECT pg_reload_conf()")

            #expect(DaemonHarness.wait(seconds: 30) { daemon.readyz().contains("lane stuck") }, "\(daemon.readyz())\n\(daemon.text)")
            let readyz = daemon.readyz()
            #expect(readyz.contains("the database is read-only and refuses every write (SQLSTATE 25006"), "\(readyz)")
            let stuck = daemon.text.split(separator: "\n").first { $0.contains(#""event":"lane_stuck""#) } ?? ""
            #expect(stuck.contains("the database is read-only and refuses every write (SQLSTATE 25006, read_only_sql_transaction: "
                                   + "default_transaction_read_only is on, or the server is a standby in recovery)"), "\(daemon.text)")
            #expect(daemon.text.contains("cannot record this instance in pushd.instances (the database is read-only (default_transaction_read_only on, "
                                         + "or a standby in recovery), so pushd status will show it as gone after a minute)"), "\(daemon.text)")
            let status = try FleetStatusTests.status(database)
            #expect(status.exitCode == 1, "\(status.text)")
            #expect(status.json["database_writes"] as? String == "read_only", "\(status.text)")
            #expect(status.problems.first?.hasPrefix("the database is read-only (transaction_read_only is on: ") == true, "\(status.problems)")

            restore()
            #expect(DaemonHarness.wait(seconds: 30) { daemon.readyz().contains("database reachable") }, "\(daemon.readyz())\n\(daemon.text)")
            let healthy = try FleetStatusTests.status(database)
            #expect(healthy.json["database_writes"] as? String == "yes" && healthy.exitCode == 0, "\(healthy.text)")
        }
    }
}
