import APNsMock
import Foundation
import Glibc
import Metrics
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A client retrying its request with the same `dedupe_key`, against the real `pushd` binary and
/// apns-mock: the key stays taken after the first push was sent, and the retry never waits for the
/// claim batch that is sending the first one.
@Suite(.serialized) struct DedupeKeyDaemonTests {
    static let insert = """
        INSERT INTO pushd.jobs (app, device_token, payload, dedupe_key)
        VALUES ('shop', $1, '{"aps":{"alert":"Your order shipped"}}', 'order-1042-shipped')
        ON CONFLICT DO NOTHING
        """

    @Test func aRetriedInsertAfterTheFirstWasSentInsertsNothing() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            let token = DaemonHarness.token(1)
            #expect(try connection.query(Self.insert, [token]).affectedRows == 1)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted == 1 })
            #expect(try DaemonHarness.wait(seconds: 5) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })

            let again = try connection.query(Self.insert, [token])
            #expect(again.affectedRows == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0)
            Thread.sleep(forTimeInterval: 1)
            #expect(harness.mock.stats.accepted == 1)
        }
    }

    @Test func aRetriedInsertDuringTheOpenBatchReturnsAtOnce() throws {
        try IsolatedDatabase.with { database in
            var faults = FaultConfiguration.none
            faults.delayMilliseconds = 6_000
            let harness = try DaemonHarness(database: database, faults: faults)
            let connection = try database.connect()
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            let token = DaemonHarness.token(2)
            #expect(try connection.query(Self.insert, [token]).affectedRows == 1)
            // Claimed: the batch's open transaction has deleted the row (xmax set, not committed).
            #expect(try DaemonHarness.wait(seconds: 20) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE xmax <> '0'::xid") == 1
            })

            let started = Timestamp()
            let again = try connection.query(Self.insert, [token])
            let seconds = Timestamp().timeIntervalSince(started)
            // Not held up by the batch, whose answers take 6 s: it returned while the batch
            // still held the row (its deletion not yet committed).
            let stillHeld = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE xmax <> '0'::xid")
            #expect(stillHeld == 1, "the retried INSERT returned after the batch had ended (\(seconds) s)")
            #expect(seconds < 4, "the retried INSERT took \(seconds) s")
            #expect(again.affectedRows == 0)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted == 1 })
            #expect(try DaemonHarness.wait(seconds: 5) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            Thread.sleep(forTimeInterval: 1)
            #expect(harness.mock.stats.accepted == 1)
        }
    }

    @Test func notifyUserWithTheSameKeyAfterDeliveryAddsNoJob() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let tokens = TokenStore()
            try tokens.register(connection, app: "shop", token: DaemonHarness.token(3), userID: "u1", environment: "sandbox")
            try tokens.register(connection, app: "shop", token: DaemonHarness.token(4), userID: "u1", environment: "sandbox")
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            let notify = "SELECT pushd.notify_user('shop', 'u1', '{\"aps\":{\"alert\":\"Welcome!\"}}', p_dedupe_key => 'welcome')"
            #expect(try connection.query(notify).require(Int.self, row: 0, column: 0) == 2)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted == 2 })
            #expect(try DaemonHarness.wait(seconds: 5) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })

            #expect(try connection.query(notify).require(Int.self, row: 0, column: 0) == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0)
            Thread.sleep(forTimeInterval: 1)
            #expect(harness.mock.stats.accepted == 2)
        }
    }

    @Test func theHeartbeatSweepsKeysPastTheRetentionAndKeepsTheOthers() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try connection.query("""
                INSERT INTO pushd.job_dedupe_keys (app, dedupe_key, device_token, job_id, created_at)
                VALUES ('shop', 'old', $1, -1, now() - interval '2 hours'), ('shop', 'new', $1, -2, now())
                """, [DaemonHarness.token(5)])
            let registration = InstanceRegistration(host: "test", pid: 1, version: "test", libcurlVersion: "8",
                                                    apps: ["shop"], startedAt: Timestamp())
            let heartbeat = InstanceHeartbeat(registration: registration, databaseURL: database.url,
                                              metrics: try PushdMetrics(version: "test"),
                                              logger: Logger(level: .warning, sink: FileLogSink(path: nil)),
                                              interval: 0.1, dedupeRetentionSeconds: 3600,
                                              pausedApps: { [:] }, onDatabaseError: { _ in })
            heartbeat.start()
            defer { heartbeat.stop() }
            let keys = "SELECT count(*) FROM pushd.job_dedupe_keys"
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, keys) == 1 })
            let left = try connection.query("SELECT dedupe_key FROM pushd.job_dedupe_keys").require(String.self, row: 0, column: 0)
            #expect(left == "new")
        }
    }
}
