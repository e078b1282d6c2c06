import APNs
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A campaign capped at 1/s whose apns-expiration passes while a target waits for its moment
/// under the cap: that target is not sent (it was, up to a second late in a chunk and up to the
/// parked batch's time late from the parked table), and every target it leaves fails `Expired`.
@Suite(.serialized) struct CappedExpirationTests {
    @Test func aChunksTargetReservedBeforeTheExpirationIsNotSentAfterIt() throws {
        try Self.check(parked: false)
    }

    @Test func aParkedTargetThatWaitedForTheCapPastTheExpirationIsNotSent() throws {
        try Self.check(parked: true)
    }

    /// Expiration E is a whole second 4 to 5 s ahead, and the pipeline starts 2.4 s before it:
    /// at 1/s the sends go at about E − 2.3, E − 1.3 and E − 0.3, and the next is due at about
    /// E + 0.7, after the expiration (later if the start was slow). Watches the mock for 3 s
    /// past E and requires no answer seen later than E + 0.6 s: a send made just before E may
    /// be seen that late on a loaded machine, one made at its moment after E is not seen sooner.
    static func check(parked: Bool) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let count = 10
            let id = try CampaignLaneTests.campaign(connection, count: count, rate: 1)
            if parked { try ParkedBatchTests.parkEverything(connection, campaign: id) }
            let expiration = Int((Timestamp().timeIntervalSince1970 + 5).rounded(.down))
            try connection.query("UPDATE pushd.campaigns SET expiration = to_timestamp($1::bigint) WHERE id = $2", [expiration, id])
            PosixThread.sleep(seconds: Double(expiration) - 2.4 - Timestamp().timeIntervalSince1970)
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            var seen = 0
            var late: [Double] = []
            var previousLook = Timestamp().timeIntervalSince1970
            while Timestamp().timeIntervalSince1970 < Double(expiration) + 3 {
                let accepted = harness.mock.stats.accepted
                let now = Timestamp().timeIntervalSince1970
                let past = now - Double(expiration)
                if accepted > seen {
                    // Judged only when this thread looked a moment before: after it was held up,
                    // an answer it sees late may have come at any time since.
                    if past > 0.6 && now - previousLook < 0.1 { late.append(past) }
                    seen = accepted
                }
                previousLook = now
                PosixThread.sleep(seconds: 0.01)
            }
            #expect(late.isEmpty, "accepted \(late.map { String(format: "%.2f", $0) }) s after the apns-expiration")
            #expect(seen >= 1, "nothing was sent before the apns-expiration")
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 20) { try store.campaign(connection, id: id)?.status == .done })
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == harness.mock.stats.accepted)
            #expect(campaign.failed == count - campaign.sent && campaign.failedByReason == [OutcomePolicy.expiredLabel: count - campaign.sent],
                    "sent \(campaign.sent), failed \(campaign.failedByReason)")
        }
    }
}
