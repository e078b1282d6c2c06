import APNs
import Locking
import Metrics
import QueueStore
import Testing
@testable import pushd

/// What an instance advertises and leaves for the kind of credentials of its apps: a token key
/// is advertised as "app/token", a certificate app lacks it, and that app's token work is left
/// to another live instance that advertises it, else dead-lettered with one line a minute.
@Suite struct TokenCoverageDecisionTests {
    static let certificate = PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .production,
                                             credentials: .certificate(certificateFile: "/c.pem", keyFile: "/c.key", pkcs12File: nil, password: nil),
                                             campaignRate: nil)
    static let token = PushdConfig.App(name: "blog", bundleID: "com.example.blog", environment: .sandbox,
                                       credentials: .token(teamID: "TEAM123456", keyID: "KEY1234567", keyFile: "/k.p8"), campaignRate: nil)

    @Test func aTokenAppAdvertisesTokenAndACertificateAppLacksIt() throws {
        let coverage = EnvironmentCoverage(apps: [Self.certificate, Self.token], logger: Logger(level: .info, sink: MemoryLogSink()))
        #expect(coverage.advertised == ["blog/production", "blog/sandbox", "blog/token", "shop/production"])
        #expect(coverage.missing == ["shop/sandbox", "shop/token"])
        #expect(PushType.tokenOnly.map(\.rawValue).sorted() == ["liveactivity", "location"])
    }

    /// With a heartbeat, "no other instance is known to send it" becomes a dead letter only on
    /// a read of the fleet made long enough after the heartbeat began that every instance
    /// started with this one has registered, and recent enough to still be true.
    @Test func withAHeartbeatWorkIsDeadLetteredOnlyOnAFleetReadThatIsSettledAndFresh() {
        let now = Lock(100.0)
        let sink = MemoryLogSink()
        let coverage = EnvironmentCoverage(apps: [Self.certificate], logger: Logger(level: .info, sink: sink),
                                           clock: { now.withLock { $0 } })
        let left = EnvironmentCoverage.Decision.leave(retryAfterSeconds: EnvironmentCoverage.leaveRetrySeconds)
        coverage.heartbeatStarts()
        #expect(coverage.decide(app: "shop", environment: .sandbox, lane: .transactional) == left)
        // The heartbeat's first read, before a peer started beside this one has registered.
        now.withLock { $0 += 0.1 }
        coverage.update(sentElsewhere: [])
        #expect(coverage.decide(app: "shop", environment: .sandbox, lane: .transactional) == left)
        #expect(coverage.decideTokenWork(app: "shop", lane: "broadcast") == left)
        #expect(sink.lines.contains { $0.contains("environment_coverage_unknown") && $0.contains("shop/sandbox") }, "\(sink.lines)")
        // A settled read.
        now.withLock { $0 += EnvironmentCoverage.settleSeconds }
        coverage.update(sentElsewhere: [])
        #expect(coverage.decide(app: "shop", environment: .sandbox, lane: .transactional) == .deadLetter)
        // No read since (the database is out of reach): not trusted any more.
        now.withLock { $0 += EnvironmentCoverage.staleSeconds + 1 }
        #expect(coverage.decide(app: "shop", environment: .sandbox, lane: .campaign) == left)
        coverage.update(sentElsewhere: [])
        #expect(coverage.decide(app: "shop", environment: .sandbox, lane: .campaign) == .deadLetter)
    }

    @Test func tokenWorkIsLeftWhileAnotherInstanceAdvertisesTheKeyElseDeadLetteredWithOneLine() throws {
        let metrics = try PushdMetrics(version: "test")
        let sink = MemoryLogSink()
        let coverage = EnvironmentCoverage(apps: [Self.certificate, Self.token], logger: Logger(level: .info, sink: sink), metrics: metrics)
        let gauge = #"pushd_work_left_to_other_instances{app="shop",reason="TokenAuthenticationRequired"}"#
        #expect(metrics.registry.expositionText().contains(gauge + " 0\n"))
        // Before any heartbeat nothing is known to be sent elsewhere: dead-lettered, as before.
        #expect(coverage.leaving().isEmpty)
        #expect(coverage.decideTokenWork(app: "shop", lane: "transactional") == .deadLetter)

        coverage.update(sentElsewhere: ["shop/token"])
        #expect(metrics.registry.expositionText().contains(gauge + " 1\n"))
        let leaving = coverage.leaving()
        #expect(leaving.tokenOnly == ["shop"] && leaving.environments.isEmpty && leaving.tokenOnlyPushTypes.sorted() == ["liveactivity", "location"])
        #expect(coverage.leavesTokenWork(of: "shop") && !coverage.leavesTokenWork(of: "blog"))
        #expect(coverage.decideTokenWork(app: "shop", lane: "broadcast") == .leave(retryAfterSeconds: EnvironmentCoverage.leaveRetrySeconds))
        #expect(coverage.unserved() == ["shop/sandbox"])

        coverage.update(sentElsewhere: [])
        #expect(metrics.registry.expositionText().contains(gauge + " 0\n"))
        #expect(coverage.unserved() == ["shop/sandbox", "shop/token"])
        for _ in 0..<5 { #expect(coverage.decideTokenWork(app: "shop", lane: "campaign") == .deadLetter) }
        let lines = sink.lines.filter { $0.contains("no_token_key_in_fleet") }
        // The first dead letter, before the heartbeat, logged; the next ones within the minute are counted.
        #expect(lines.count == 1, "\(lines)")
        #expect(lines.first.map { $0.contains("no live instance of the fleet has a token key for app shop") && $0.contains("apps[shop].token") } == true,
                "\(lines)")
    }

    /// A channel management request no instance has credentials for is failed (in
    /// `pushd.channel_operations`), not dead-lettered: the line says so; a notification's says
    /// dead-lettered.
    @Test func theNoCredentialsLineSaysFailedForChannelRequestsAndDeadLetteredForNotifications() {
        for (lane, said, unsaid) in [(BroadcastWorker.channelsLane, "channel management request(s) on the channels lane failed", "dead-lettered"),
                                     (Lane.transactional.rawValue, "notification(s) on the transactional lane dead-lettered", "failed")] {
            let sink = MemoryLogSink()
            let coverage = EnvironmentCoverage(apps: [Self.certificate], logger: Logger(level: .info, sink: sink))
            #expect(coverage.decide(app: "shop", environment: .sandbox, lane: lane) == .deadLetter)
            let lines = sink.lines.filter { $0.contains("no_credentials_for_environment") }
            #expect(lines.count == 1 && lines[0].contains(said), "\(lines)")
            #expect(lines.first?.contains(unsaid) == false, "\(lines)")
        }
    }
}
