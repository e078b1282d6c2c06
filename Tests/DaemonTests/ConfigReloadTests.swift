import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `systemctl reload pushd`: the real binary, its key file replaced under it, then SIGHUP.
@Suite(.serialized) struct ConfigReloadTests {
    static func log(_ harness: DaemonHarness) -> String {
        (try? String(contentsOfFile: harness.directory + "/pushd.log", encoding: .utf8)) ?? ""
    }

    static func insertJobs(_ connection: PGConnection, from first: Int, count: Int) throws {
        try connection.query("""
            INSERT INTO pushd.jobs (app, device_token, payload)
            SELECT 'shop', lpad(to_hex(n), 16, '0') || lpad(to_hex(n), 16, '0') || lpad(to_hex(n), 16, '0') || lpad(to_hex(n), 16, '0'),
                   '{"aps":{"alert":"hi"}}'
            FROM generate_series($1::int, $2::int) AS n
            """, [String(first), String(first + count - 1)])
    }

    /// The real pushd started with key.p8 while the mock trusts other.p8: the wrong key for the
    /// key id. Its metrics listen on `port`.
    static func startWithTheWrongKey(_ database: IsolatedDatabase, faults: FaultConfiguration = .none) throws
        -> (harness: DaemonHarness, connection: PGConnection, port: UInt16, config: String, process: ChildProcess) {
        let harness = try DaemonHarness(database: database, faults: faults, trustsPushdKey: false)
        let connection = try database.connect()
        let port = try MixedFleetTests.freePort()
        let config = try MixedFleetTests.writeConfig(harness, name: "pushd", metricsPort: port, withSecond: false)
        let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
        return (harness, connection, port, config, process)
    }

    /// The operator's fix: the key the mock trusts in place of pushd's key file.
    static func putTheRightKeyInPlace(_ harness: DaemonHarness) throws {
        try FileSystem.write(try FileSystem.read(harness.directory + "/other.p8"), to: harness.keyFile, permissions: 0o600)
    }

    /// The runbook for InvalidProviderToken: the app pauses on the wrong `.p8`; the operator puts
    /// the right one in its place and reloads; every job goes out from the same process.
    @Test func aFixedKeyFileAndSIGHUPDeliverThePausedAppsJobsWithoutARestart() throws {
        try IsolatedDatabase.with { database in
            let (harness, connection, port, config, process) = try Self.startWithTheWrongKey(database)
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            try Self.insertJobs(connection, from: 1, count: 5)
            #expect(DaemonHarness.wait(seconds: 30) { Self.log(harness).contains("sending for app shop is paused") }, "\(Self.log(harness))")
            #expect(harness.mock.stats.accepted == 0)

            try Self.putTheRightKeyInPlace(harness)
            // The pause put the jobs back for 30 s (`JobWorker`); by now they are settled.
            #expect(try DaemonHarness.wait(seconds: 10) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE xmax = '0'::xid") == 5
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE starts_with(last_error, 'app paused: ')") > 0
            })
            kill(process.processIdentifier, SIGHUP)

            // The resume makes them due at once: they go out within seconds, not when their 30 s end.
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.stats.accepted == 5 },
                    "the resumed app's jobs were not sent within 10 s of SIGHUP: \(harness.mock.stats.accepted) accepted; \(Self.log(harness))")
            let delivered = try DaemonHarness.wait(seconds: 60) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
            }
            let log = Self.log(harness)
            #expect(delivered, "\(log)")
            #expect(harness.mock.stats.accepted == 5)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(process.isRunning)
            #expect(log.contains("signing_key_reloaded"))
            #expect(log.contains("of app shop put back while it was paused are due at once"), "\(log)")
            #expect(log.contains("configuration reloaded from \(config): signing keys reloaded for apps shop"))
            let metrics = MixedFleetTests.scrape(port: port)
            #expect(metrics.contains("pushd_config_reloads_total{result=\"success\"} 1"), "\(metrics)")
            #expect(metrics.contains("pushd_config_last_reload_successful 1"))
            #expect(metrics.contains("pushd_app_paused{app=\"shop\"} 0"))
        }
    }

    /// The key is replaced while requests signed with the old one are still out: APNs's
    /// InvalidProviderToken answers to them arrive after the reload. They judge the old key,
    /// not the new one: the app is not paused again, the new key's token is kept, and the jobs
    /// go out again at once with it. Before, each such answer paused the app for 5 minutes
    /// right after the operator had fixed it.
    @Test func invalidProviderTokenAnswersToRequestsSignedBeforeAKeySwapDoNotPauseTheFixedApp() throws {
        try IsolatedDatabase.with { database in
            // The mock answers after 1.5 s: the requests signed with key.p8 are still out at SIGHUP.
            let (harness, connection, port, _, process) = try Self.startWithTheWrongKey(database, faults: FaultConfiguration(delayMilliseconds: 1500))
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            try Self.insertJobs(connection, from: 1, count: 5)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.requestsReceived >= 1 }, "\(Self.log(harness))")

            try Self.putTheRightKeyInPlace(harness)
            kill(process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 10) { Self.log(harness).contains("signing_key_reloaded") }, "\(Self.log(harness))")

            // Every answer about the old key is back within 1.5 s of its request; the jobs sent
            // again with the new key are accepted 1.5 s later.
            #expect(try DaemonHarness.wait(seconds: 15) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "jobs left: \((try? DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs")) ?? -1); \(Self.log(harness))")
            let log = Self.log(harness)
            #expect(harness.mock.stats.accepted == 5)
            #expect(harness.mock.stats.rejected("InvalidProviderToken") >= 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            let pausesAfterReload = log.components(separatedBy: "signing_key_reloaded").last ?? ""
            #expect(!pausesAfterReload.contains("sending for app shop is paused"), "\(log)")
            #expect(log.contains("provider_token_of_replaced_key_refused"), "\(log)")
            // The new key's token was not taken for the old one's and removed from the shared table.
            #expect(!log.contains("provider_token_forgotten"), "\(log)")
            let metrics = MixedFleetTests.scrape(port: port)
            #expect(metrics.contains("pushd_app_paused{app=\"shop\"} 0"), "\(metrics)")
        }
    }

    /// A key file broken on reload (a half-copied file) leaves the app with the key it had: one
    /// error line naming the app and the file, the failure counted, and sending goes on.
    @Test func aBrokenKeyFileOnReloadKeepsTheWorkingKeyAndSaysSo() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let port = try MixedFleetTests.freePort()
            let config = try MixedFleetTests.writeConfig(harness, name: "pushd", metricsPort: port, withSecond: false)
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            try Self.insertJobs(connection, from: 1, count: 3)
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted == 3 }, "\(Self.log(harness))")

            try FileSystem.write(Array("-----BEGIN PRIVATE KEY-----\nnot a key\n".utf8), to: harness.keyFile, permissions: 0o600)
            kill(process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 10) { Self.log(harness).contains("credentials_reload_failed") }, "\(Self.log(harness))")

            try Self.insertJobs(connection, from: 100, count: 3)
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted == 6 }, "\(Self.log(harness))")
            let lines = Self.log(harness).split(separator: "\n").filter { $0.contains("credentials_reload_failed") }
            #expect(lines.count == 1)
            #expect(lines.first?.contains("app shop keeps the signing key it had") == true)
            #expect(lines.first?.contains(harness.keyFile) == true)
            #expect(process.isRunning)
            let metrics = MixedFleetTests.scrape(port: port)
            #expect(metrics.contains("pushd_config_reloads_total{result=\"failure\"} 1"), "\(metrics)")
            #expect(metrics.contains("pushd_config_last_reload_successful 0"))
        }
    }

    /// A changed setting that needs a restart is named, one warning each, and not applied.
    @Test func settingsThatNeedARestartAreNamedOneLineEach() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let port = try MixedFleetTests.freePort()
            let config = try MixedFleetTests.writeConfig(harness, name: "pushd", metricsPort: port, withSecond: false)
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            #expect(DaemonHarness.wait(seconds: 30) { Self.log(harness).contains("pushd is running") }, "\(Self.log(harness))")
            let text = try String(contentsOfFile: config, encoding: .utf8)
                .replacingOccurrences(of: "  threads: 1", with: "  threads: 2")
                .replacingOccurrences(of: "drain_timeout_s: 5", with: "drain_timeout_s: 6")
            try text.write(toFile: config, atomically: true, encoding: .utf8)
            kill(process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 10) { Self.log(harness).contains("config_reloaded") }, "\(Self.log(harness))")
            let warnings = Self.log(harness).split(separator: "\n").filter { $0.contains("config_needs_restart") }
            // apns.max_in_flight is unset and derived from the threads too ((8 + threads) × 500),
            // so it changes with them and is named as well.
            #expect(warnings.count == 3, "\(warnings)")
            #expect(warnings.contains { $0.contains("apns.threads changed") })
            #expect(warnings.contains { $0.contains("apns.max_in_flight changed") })
            #expect(warnings.contains { $0.contains("shutdown.drain_timeout_s changed") })
            #expect(process.isRunning)
        }
    }
}

@Suite struct ConfigChangesTests {
    static func config() -> PushdConfig {
        PushdConfig(databaseURL: "postgresql:///pushd", apps: [
            PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .sandbox,
                            credentials: .token(teamID: "TEAM123456", keyID: "KEY1234567", keyFile: "/a.p8"), campaignRate: nil),
            PushdConfig.App(name: "news", bundleID: "com.example.news", environment: .production,
                            credentials: .certificate(certificateFile: "/c.pem", keyFile: "/k.pem", pkcs12File: nil, password: nil),
                            campaignRate: nil),
        ])
    }

    @Test func aKeyFileMovedNeedsNoRestart() {
        var loaded = Self.config()
        loaded.apps[0].credentials = .token(teamID: "TEAM123456", keyID: "KEY1234567", keyFile: "/b.p8")
        #expect(ConfigChanges.needingRestart(running: Self.config(), loaded: loaded).isEmpty)
    }

    @Test func everyOtherChangeIsNamed() {
        var loaded = Self.config()
        loaded.databaseURL = "postgresql:///other"
        loaded.apns.threads = 3
        loaded.apns.transactionalIdleCloseSeconds = 60
        loaded.apps[0].credentials = .token(teamID: "TEAM123456", keyID: "KEY7654321", keyFile: "/a.p8")
        loaded.apps[1].credentials = .certificate(certificateFile: "/c2.pem", keyFile: "/k.pem", pkcs12File: nil, password: nil)
        loaded.apps.append(PushdConfig.App(name: "mail", bundleID: "com.example.mail", environment: .sandbox,
                                           credentials: .token(teamID: "TEAM123456", keyID: "KEY1234567", keyFile: "/a.p8"),
                                           campaignRate: nil))
        #expect(ConfigChanges.needingRestart(running: Self.config(), loaded: loaded)
                == ["database.url", "apns.threads", "apns.transactional_idle_close_s", "apps[mail] (added)", "apps[shop].token.key_id", "apps[news].certificate.cert_file"])
        loaded = Self.config()
        loaded.apps.removeLast()
        #expect(ConfigChanges.needingRestart(running: Self.config(), loaded: loaded) == ["apps[news] (removed)"])
    }

    @Test func appIndexReadsTheCheckSettingName() {
        #expect(ConfigReloader.appIndex("apps[3].token.key_file") == 3)
        #expect(ConfigReloader.appIndex("apns.ca_file") == nil)
    }
}
