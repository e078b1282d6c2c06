import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// A parked batch whose claiming session ended is taken back by place on a new session: only
/// the targets still parked as claimed and held by no other claimer, and the outcomes recorded
/// for them are theirs alone.
@Suite struct ParkedRetakeTests {
    let campaigns = CampaignStore()

    @Test func aParkedBatchIsTakenBackExceptWhatAnotherClaimerHoldsOrSettledAndCountedPerTarget() throws {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            defer { admin.close() }
            let id = try ParkedSettleLockTests().parkedCampaign(admin)
            let doomed = try database.connect()
            let batch = try #require(try campaigns.claimParked(doomed, limit: 10, apps: ["shop"]))
            #expect(batch.targets.count == 6)
            #expect(try admin.query("SELECT pg_terminate_backend($1)", [doomed.backendPID]).require(Bool.self, row: 0, column: 0))
            var ended = false
            for _ in 0..<50 where !ended {
                ended = (try? doomed.checkSession()) == nil
                usleep(20_000)
            }
            #expect(ended)
            let places = batch.targets.map(\.place)
            // Another claimer settled the first target (parked it again, later) and holds the second.
            try admin.query("UPDATE pushd.campaign_retries SET due_at = now() + interval '1 minute' WHERE campaign_id = $1 AND chunk = $2 AND position = $3",
                            [id, places[0].chunk, places[0].position])
            let other = try database.connect()
            try other.execute(script: "BEGIN")
            try other.query("SELECT 1 FROM pushd.campaign_retries WHERE campaign_id = $1 AND chunk = $2 AND position = $3 FOR UPDATE",
                            [id, places[1].chunk, places[1].position])

            let fresh = try database.connect()
            let taken = try campaigns.retakeParked(fresh, batch)
            #expect(Set(taken.targets.map(\.place)) == Set(places[2...]))
            #expect(try campaigns.parkedHeldElsewhere(fresh, batch, taken: taken) == [places[1]])

            // Every target was answered: the first four accepted, the fifth failed, the sixth to be retried.
            var outcomes = ParkedOutcomes()
            for target in batch.targets[0..<4] { outcomes.sent(target) }
            outcomes.failed(batch.targets[4], reason: "BadDeviceToken")
            var retry = batch.targets[5]
            retry.dueAt = Timestamp().addingTimeInterval(60)
            outcomes.retries = [retry]
            let mine = outcomes.restricted(to: Set(taken.targets.map(\.place)))
            #expect(mine.sent == 2 && mine.failedByReason == ["BadDeviceToken": 1] && mine.retries.map(\.place) == [places[5]])
            try campaigns.settleParked(fresh, taken, mine)
            try other.execute(script: "ROLLBACK")
            let campaign = try #require(try campaigns.campaign(admin, id: id))
            #expect(campaign.sent == 2 && campaign.failed == 1)
            let left = try admin.query("SELECT position FROM pushd.campaign_retries WHERE campaign_id = $1 ORDER BY position", [id])
                .rows.map { try $0.require(0) as Int }
            #expect(left == [places[0].position, places[1].position, places[5].position])
        }
    }
}
