import APNs
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Retry windows count from a job's first send, not from its insert: the real `pushd run`
/// with scheduled jobs.
@Suite(.serialized) struct RetryWindowTests {
    @Test func aScheduledDeliverOnceJobAnswered503OnceIsRetriedAndDelivered() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 200, maxMilliseconds: 1000,
                                                       extra: "  outage_limit_s: 40\n")
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            // Queued 45 s before it is due, "deliver now or never" (apns-expiration 0): its 30 s
            // window starts when it is first sent, not when it was queued.
            let onceToken = DaemonHarness.token(45)
            // Queued an hour ahead with an outage budget of 40 s.
            let laterToken = DaemonHarness.token(3600)
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, expiration, created_at, run_at)
                VALUES ('shop', $1, '{"aps":{"alert":"now or never"}}', 'epoch', now() - interval '45 seconds', now() + interval '1 second'),
                       ('shop', $2, '{"aps":{"alert":"later"}}', NULL, now() - interval '1 hour', now() + interval '1 second')
                """, [onceToken, laterToken])
            #expect(DaemonHarness.wait(seconds: 15) { harness.mock.stats.rejected("ServiceUnavailable") >= 2 })
            // Both wait with their first send recorded.
            #expect(try DaemonHarness.wait(seconds: 5) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE first_attempt_at > now() - interval '20 seconds'") == 2
            })
            try harness.mock.setFaults(.none)
            #expect(DaemonHarness.wait(seconds: 15) { harness.mock.stats.accepted == 2 })
            #expect(try DaemonHarness.wait(seconds: 5) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            let dead = try connection.query("SELECT reason FROM pushd.dead_jobs")
            let reasons = try dead.rows.map { try $0.require(0) as String }
            #expect(reasons.isEmpty, "\(reasons)")
            #expect(Set(harness.mock.acceptedLog.map(\.token)) == [onceToken, laterToken])
        }
    }

    /// A capped campaign sends its chunk over size ÷ rate seconds in one lease: each target's
    /// outage budget counts from its own first send, not from the lease. 16 targets at 2 per
    /// second in one chunk, an outage budget of 4 s: the later targets are first sent 5.5 to 8 s
    /// after the lease, and past the budget since the lease the next one is answered 503 until
    /// the test thread ends the outage (up to 4 s later on a loaded machine, within its budget).
    @Test func aCappedCampaignTargetFirstSentAfterItsBudgetSinceTheLeaseIsRetriedOn503AndDelivered() throws {
        try Self.cappedCampaignThrough503s(outageLimit: 4, acceptedFirst: 11, fiveOhThreeFor: 0)
    }

    /// The chunk's last target (first sent 7 to 8 s after the lease), answered 503, is parked
    /// for its retry: it takes its own first send into `pushd.campaign_retries`, so a 503 to
    /// the parked send, within 1.5 s of the first, is retried too (its budget of 5 s since its
    /// first send leaves the test thread room; since the lease, it is spent).
    @Test func aCappedCampaignTargetParkedForItsRetryKeepsItsOwnFirstSend() throws {
        try Self.cappedCampaignThrough503s(outageLimit: 5, acceptedFirst: 15, fiveOhThreeFor: 1.5, rejectedAtLeast: 2)
    }

    /// 16 targets at 2 per second in one chunk under an outage budget of `outageLimit` s; once
    /// `acceptedFirst` are accepted, every send is answered 503 from then until `fiveOhThreeFor`
    /// seconds after the first 503. Every target must be delivered, none failed.
    static func cappedCampaignThrough503s(outageLimit: Int, acceptedFirst: Int, fiveOhThreeFor seconds: Double,
                                          rejectedAtLeast: Int = 1) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 100, maxMilliseconds: 500,
                                                       extra: "  outage_limit_s: \(outageLimit)\n")
            let count = 16
            let id = try CampaignLaneTests.campaign(connection, count: count, rate: 2)
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= acceptedFirst })
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            #expect(DaemonHarness.wait(seconds: 5) { harness.mock.stats.rejected("ServiceUnavailable") >= 1 })
            if seconds > 0 {
                Thread.sleep(forTimeInterval: seconds)
                // On a loaded machine the retry may come later: 503 until it has, within the budget.
                _ = DaemonHarness.wait(seconds: Double(outageLimit) - seconds - 0.5) {
                    harness.mock.stats.rejected("ServiceUnavailable") >= rejectedAtLeast
                }
            }
            try harness.mock.setFaults(.none)

            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 20) { try store.campaign(connection, id: id)?.status == .done })
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(harness.mock.stats.rejected("ServiceUnavailable") >= rejectedAtLeast)
            #expect(campaign.failedByReason.isEmpty, "\(campaign.failedByReason)")
            #expect(campaign.sent == count)
            #expect(Set(harness.mock.acceptedLog.map(\.token)).count == count)
        }
    }
}
