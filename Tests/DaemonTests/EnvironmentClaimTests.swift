import APNsMock
import Posix
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A certificate reaches one environment's host. An instance without a certificate for an
/// environment leaves that environment's work to a live instance that has one, and only when
/// none has is the work dead-lettered, with an error line naming the setting to add.
@Suite(.serialized) struct EnvironmentClaimTests {
    /// App `shop` with a production certificate and, when asked, a sandbox one: the harness's
    /// mock stands for the production host, `fleet`'s certificate mock for the sandbox one.
    static func config(_ fleet: TwoInstanceFleet, sandboxCertificate: Bool) -> PushdConfig {
        var config = fleet.harness.config()
        let certificates = fleet.harness.certificates
        let certificate = PushdConfig.Credentials.certificate(certificateFile: certificates.clientCertificate,
                                                             keyFile: certificates.clientKey, pkcs12File: nil, password: nil)
        config.apps[0].environment = .production
        config.apps[0].credentials = certificate
        if sandboxCertificate { config.apps[0].otherCertificates[.sandbox] = certificate }
        config.apns.sandboxHostOverride = "127.0.0.1:\(fleet.certificatePorts[0])"
        return config
    }

    static let payload = #"{"aps":{"alert":"hi"}}"#

    /// An instance of the fleet: its pipeline and its heartbeat, started; `stop` stops both.
    struct Instance {
        let pipeline: Pipeline
        let heartbeat: InstanceHeartbeat
        func stop() {
            heartbeat.stop()
            pipeline.stop(deadline: Timestamp().addingTimeInterval(5))
        }
    }

    static func startInstance(_ name: String, _ fleet: TwoInstanceFleet, sandboxCertificate: Bool,
                              log: MemoryLogSink = MemoryLogSink()) throws -> Instance {
        let pipeline = try fleet.harness.pipeline(config(fleet, sandboxCertificate: sandboxCertificate), instance: name, log: log)
        let heartbeat = InstanceHeartbeat(pipeline: pipeline, host: "host-\(name)", pid: 1)
        heartbeat.start()
        pipeline.start()
        return Instance(pipeline: pipeline, heartbeat: heartbeat)
    }

    /// Ten sandbox jobs by their own environment and ten by their token's registration.
    static func insertSandboxJobs(_ connection: PGConnection) throws -> [String] {
        var tokens = [String]()
        for seed in 1...10 {
            let registered = DaemonHarness.token(100 + seed)
            try TokenStore().register(connection, app: "shop", token: registered, userID: "u\(seed)", environment: "sandbox")
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)", [registered, payload])
            let own = DaemonHarness.token(200 + seed)
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload, environment) VALUES ('shop', $1, $2, 'sandbox')",
                                 [own, payload])
            tokens += [registered, own]
        }
        return tokens.sorted()
    }

    @Test func sandboxJobsWaitForTheLiveInstanceWithASandboxCertificateAndNoneIsDeadLettered() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 1)
            defer { fleet.stop() }
            let sandbox = fleet.certificateHosts[0]
            // B (both certificates) is registered; A (production only) sends first, alone.
            let b = try fleet.harness.pipeline(Self.config(fleet, sandboxCertificate: true), instance: "b")
            let heartbeatB = InstanceHeartbeat(pipeline: b, host: "host-b", pid: 1)
            heartbeatB.start()
            defer { heartbeatB.stop() }
            let a = try fleet.harness.pipeline(Self.config(fleet, sandboxCertificate: false), instance: "a")
            let heartbeatA = InstanceHeartbeat(pipeline: a, host: "host-a", pid: 1)
            heartbeatA.start()
            defer { heartbeatA.stop() }
            #expect(try DaemonHarness.wait(seconds: 10) {
                try DaemonHarness.count(try database.connect(), "SELECT count(*) FROM pushd.instances") == 2
            })
            a.start()
            defer { a.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            let tokens = try Self.insertSandboxJobs(connection)
            PosixThread.sleep(seconds: 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 20)

            b.start()
            defer { b.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(sandbox.acceptedLog.map(\.token).sorted() == tokens)
            // No attempt was spent on them by A; its gauge shows the environment left to B, and
            // the token work, which no instance of these two has a key for, as dead-lettered.
            let text = a.context.metrics.registry.expositionText()
            let counted = text.split(separator: "\n").filter { $0.hasPrefix("pushd_retries_total") || $0.hasPrefix("pushd_dead_letters_total") }
            #expect(!counted.contains { $0.contains(#"reason="NoCredentialsForEnvironment""#) }, "\(counted)")
            #expect(text.contains(#"pushd_work_left_to_other_instances{app="shop",reason="NoCredentialsForEnvironment"} 1"#))
            #expect(text.contains(#"pushd_work_left_to_other_instances{app="shop",reason="TokenAuthenticationRequired"} 0"#))
        }
    }

    /// A fleet restarted with a backlog: A (production only) reads the fleet and starts sending
    /// before B (both certificates) has registered. A must not take "no other instance yet"
    /// for "none can": the sandbox jobs wait for B instead of being dead-lettered. Before,
    /// every one A claimed in that window was dead-lettered, its line saying no live instance
    /// had a sandbox certificate while B was starting beside it.
    @Test func anInstanceStartedBeforeItsPeerRegisteredLeavesThePeersWorkInsteadOfDeadLetteringIt() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 1)
            defer { fleet.stop() }
            let sandbox = fleet.certificateHosts[0]
            let connection = try database.connect()
            let tokens = try Self.insertSandboxJobs(connection)
            let log = MemoryLogSink()
            let a = try Self.startInstance("a", fleet, sandboxCertificate: false, log: log)
            defer { a.stop() }
            // A claims the backlog alone for a while before B registers.
            PosixThread.sleep(seconds: 1)
            let b = try Self.startInstance("b", fleet, sandboxCertificate: true)
            defer { b.stop() }

            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(sandbox.acceptedLog.map(\.token).sorted() == tokens)
            #expect(!log.lines.contains { $0.contains("no_credentials_for_environment") }, "\(log.lines)")
            #expect(log.lines.contains { $0.contains("environment_coverage_unknown") && $0.contains("shop/sandbox") }, "\(log.lines)")
        }
    }

    /// Two instances configured with different environments for one app send its notifications
    /// that name no environment to both hosts (measured: 202 and 198 of 400, `pushd status`
    /// HEALTHY, no line). Each advertises its app's environment; the heartbeat that sees the
    /// disagreement writes one error line and the gauge says how many apps disagree.
    @Test func instancesThatDisagreeOnAnAppsEnvironmentSaySoInAnErrorLineAndAGauge() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            var production = harness.config()
            production.apps[0].environment = .production
            let logA = MemoryLogSink(), logB = MemoryLogSink()
            let a = try harness.pipeline(harness.config(), instance: "a", log: logA)
            let heartbeatA = InstanceHeartbeat(pipeline: a, host: "host-a", pid: 1)
            heartbeatA.start()
            defer { heartbeatA.stop() }
            let b = try harness.pipeline(production, instance: "b", log: logB)
            let heartbeatB = InstanceHeartbeat(pipeline: b, host: "host-b", pid: 1)
            heartbeatB.start()
            defer { heartbeatB.stop() }

            func disagreement(_ log: MemoryLogSink) -> [String] { log.lines.filter { $0.contains("app_environment_disagreement") } }
            #expect(DaemonHarness.wait(seconds: 12) { disagreement(logA).count == 1 && disagreement(logB).count == 1 },
                    "a: \(logA.lines)\nb: \(logB.lines)")
            #expect(disagreement(logB).first?.contains("\"apps\":\"shop\"") == true, "\(disagreement(logB))")
            let text = b.context.metrics.registry.expositionText()
            #expect(text.contains("pushd_fleet_app_environment_disagreements 1\n"),
                    "\(text.split(separator: "\n").filter { $0.contains("disagreements") })")
        }
    }

    @Test func withNoLiveInstanceForTheEnvironmentItsJobsAreDeadLetteredWithOneErrorLineNamingTheSetting() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 1)
            defer { fleet.stop() }
            let sandbox = fleet.certificateHosts[0]
            let log = MemoryLogSink()
            let instance = try Self.startInstance("a", fleet, sandboxCertificate: false, log: log)
            defer { instance.stop() }
            let a = instance.pipeline
            let connection = try database.connect()
            _ = try Self.insertSandboxJobs(connection)

            // Dead-lettered once a read of the fleet settled after the heartbeat began shows no instance with a sandbox certificate.
            #expect(try DaemonHarness.wait(seconds: 40) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(try DaemonHarness.count(connection,
                                            "SELECT count(*) FROM pushd.dead_jobs WHERE reason LIKE 'NoCredentialsForEnvironment: app shop has no certificate for sandbox%'") == 20)
            #expect(sandbox.stats.accepted == 0)
            let lines = log.lines.filter { $0.contains("no_credentials_for_environment") }
            #expect(lines.count == 1, "\(log.lines)")
            #expect(lines.first.map { $0.contains("sandbox_certificate") && $0.contains("\"app\":\"shop\"") && $0.contains("\"environment\":\"sandbox\"") } == true,
                    "\(lines)")
            let text = a.context.metrics.registry.expositionText()
            #expect(text.contains(#"pushd_dead_letters_total{app="shop",lane="transactional",reason="NoCredentialsForEnvironment"} 20"#),
                    "\(text.split(separator: "\n").filter { $0.contains("dead_letters") })")
        }
    }

    @Test func campaignTargetsOfAnEnvironmentNoInstanceCanSendAreDeadLetteredWithTheSameErrorLine() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 1)
            defer { fleet.stop() }
            let sandbox = fleet.certificateHosts[0]
            let log = MemoryLogSink()
            let a = try fleet.harness.pipeline(Self.config(fleet, sandboxCertificate: false), instance: "a", log: log)
            a.start()
            defer { a.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "beta testers", pushType: "alert",
                                                              environment: "sandbox", payload: Self.payload))
            let tokens = (400..<410).map { DaemonHarness.token($0) }
            #expect(try store.importTargets(connection, campaignID: id, targets: tokens.map { (token: $0, payload: String?.none) }).imported == 10)
            #expect(try store.start(connection, id: id) == .running)

            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            #expect(sandbox.stats.accepted == 0)
            let lines = log.lines.filter { $0.contains("no_credentials_for_environment") }
            #expect(lines.count == 1, "\(log.lines)")
            #expect(lines.first.map { $0.contains("sandbox_certificate") && $0.contains("\"lane\":\"campaign\"") } == true, "\(lines)")
        }
    }
}
