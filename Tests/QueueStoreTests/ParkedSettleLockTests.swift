import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// The settle of a parked batch writes its campaign's counts, and the campaign's row can be
/// held by another session (an operator's open transaction, a long statement): the outcomes of
/// the batch's targets must survive a settle that cannot count them.
@Suite struct ParkedSettleLockTests {
    let campaigns = CampaignStore()

    /// A running campaign of six targets, all parked and due since `dueSecondsAgo`.
    func parkedCampaign(_ connection: PGConnection, name: String = "parked", dueSecondsAgo: Double = 1) throws -> Int64 {
        let id = try campaigns.create(connection, NewCampaign(app: "shop", name: name, payload: Fixtures.payload))
        try campaigns.importTargets(connection, campaignID: id, targets: (1...6).map { (Fixtures.token($0), nil) })
        try campaigns.start(connection, id: id)
        let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))
        let parked = chunk.targets.map {
            ParkedTarget(campaignID: id, chunk: chunk.chunk, position: $0.index, token: $0.token, payload: nil,
                         dueAt: Timestamp().addingTimeInterval(-dueSecondsAgo), attempts: 1, firstAttemptAt: Timestamp(),
                         lastError: "ServiceUnavailable")
        }
        try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size), parking: parked)
        return id
    }

    /// `parkedCampaign`, claimed as one batch by `worker`.
    func claimedBatch(_ connection: PGConnection, _ worker: PGConnection) throws -> (id: Int64, batch: ParkedBatch) {
        let id = try parkedCampaign(connection)
        let batch = try #require(try campaigns.claimParked(worker, limit: 10, apps: ["shop"]))
        #expect(batch.targets.count == 6)
        return (id, batch)
    }

    /// `claimedBatch` on a worker session with a 300 ms `lock_timeout`, while `holder` keeps
    /// the campaign's row locked in an open transaction.
    func batchWithItsCampaignRowLocked(_ database: IsolatedDatabase) throws
        -> (connection: PGConnection, worker: PGConnection, holder: PGConnection, id: Int64, batch: ParkedBatch) {
        let connection = try database.connect()
        let worker = try database.connect("pushd-tests-worker")
        try worker.execute(script: "SET lock_timeout = '300ms'")
        let (id, batch) = try claimedBatch(connection, worker)
        let holder = try database.connect("pushd-tests-holder")
        try holder.execute(script: "BEGIN")
        try holder.query("SELECT 1 FROM pushd.campaigns WHERE id = $1 FOR UPDATE", [id])
        return (connection, worker, holder, id, batch)
    }

    /// Four targets were accepted and two wait for a retry; the count of the four waits
    /// `lock_timeout` for the campaign's row and fails. Rolled back whole, the batch put all
    /// six back, due: the four accepted were claimed and sent again.
    @Test func aSettleWhoseCampaignRowIsLockedKeepsTheOutcomesOfItsTargets() throws {
        try IsolatedDatabase.with { database in
            let (connection, worker, holder, id, batch) = try batchWithItsCampaignRowLocked(database)

            var outcomes = ParkedOutcomes()
            outcomes.sent = 4
            outcomes.retries = batch.targets.suffix(2).map { target in
                var target = target
                target.dueAt = Timestamp().addingTimeInterval(600)
                target.attempts += 1
                target.lastError = "HTTP 503 ServiceUnavailable"
                return target
            }
            let settled = Result { try campaigns.settleParked(worker, batch, outcomes) }
            #expect(!worker.isInTransaction)
            let left = try connection.query("""
                SELECT position, attempts, last_error, due_at > now() FROM pushd.campaign_retries WHERE campaign_id = $1 ORDER BY position
                """, [id]).rows.map { "\(try $0.require(0, as: Int.self)) \(try $0.require(1, as: Int.self)) \(try $0.require(2, as: String.self)) \(try $0.require(3, as: Bool.self))" }
            #expect(left == ["4 2 HTTP 503 ServiceUnavailable true", "5 2 HTTP 503 ServiceUnavailable true"],
                    "settle: \(settled)")
            let other = try database.connect()
            let again = try campaigns.claimParked(other, limit: 10, apps: ["shop"])
            #expect(again == nil, "claimed again: \(again?.targets.map(\.position) ?? [])")
            if again != nil { try other.execute(script: "ROLLBACK") }
            try holder.execute(script: "COMMIT")
        }
    }

    /// The settle that could not count says so with the counts, commits the rest, and leaves
    /// the campaign open; the counts written later (to a row a CHECK refuses: to its hold)
    /// close it.
    @Test func countsASettleCouldNotWriteAreWrittenLaterAndCloseTheCampaign() throws {
        try IsolatedDatabase.with { database in
            let (connection, worker, holder, id, batch) = try batchWithItsCampaignRowLocked(database)

            var outcomes = ParkedOutcomes()
            outcomes.sent = 5
            outcomes.failedByReason = ["BadDeviceToken": 1]
            do {
                try campaigns.settleParked(worker, batch, outcomes)
                Issue.record("the settle counted through a locked row")
            } catch let uncounted as ParkedCountsNotWritten {
                #expect(uncounted.campaignID == id)
                #expect(uncounted.error.code == .lockNotAvailable)
                #expect(uncounted.counts == outcomes)
            }
            #expect(!worker.isInTransaction)
            #expect(try connection.query("SELECT count(*) FROM pushd.campaign_retries").require(Int.self, row: 0, column: 0) == 0)
            // Still locked: the count fails again, and writes nothing.
            #expect(throws: PGError.self) { try campaigns.countParked(worker, campaignID: id, outcomes) }
            try holder.execute(script: "COMMIT")
            #expect(try campaigns.campaign(connection, id: id)?.status == .running)

            try campaigns.countParked(worker, campaignID: id, outcomes)
            #expect(try campaigns.closeFinishedCampaigns(worker) == [id])
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.status == .done && campaign.sent == 5 && campaign.failed == 1 && campaign.remaining == 0)
            #expect(campaign.failedByReason == ["BadDeviceToken": 1])
        }
    }

    /// While workers hold batches of every due target of the campaigns due first, another
    /// worker's claim takes the next campaign's due targets. It used to pick the campaign by its
    /// oldest due row, locked or not, find all its rows locked, and claim nothing: the other
    /// campaigns' retries waited for that batch to end, past their retry window if it was short.
    /// Both claims are checked: the plain one and the one of an instance that leaves some work.
    @Test func aClaimPassesOverACampaignWhoseDueTargetsAreAllInAnotherBatch() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let first = try parkedCampaign(connection, name: "first", dueSecondsAgo: 60)
            let second = try parkedCampaign(connection, name: "second", dueSecondsAgo: 30)
            let third = try parkedCampaign(connection, name: "third", dueSecondsAgo: 1)
            // Each claim's session stays open, holding its batch, until the end.
            let sessions = try (1...4).map { try database.connect("pushd-tests-\($0)") }
            defer { for session in sessions { session.close() } }
            let held = try #require(try campaigns.claimParked(sessions[0], limit: 10, apps: ["shop"]))
            #expect(held.campaignID == first && held.targets.count == 6)

            let next = try campaigns.claimParked(sessions[1], limit: 10, apps: ["shop"])
            #expect(next?.campaignID == second, "claimed \(next.map { "campaign \($0.campaignID)" } ?? "nothing") beside a batch of campaign \(first)")
            #expect(next?.targets.count == 6)
            let leaving = JobQueue.Leaving(environments: ["shop": "sandbox"], home: ["shop": "production"])
            let last = try campaigns.claimParked(sessions[2], limit: 10, apps: ["shop"], leaving: leaving)
            #expect(last?.campaignID == third, "an instance leaving sandbox claimed \(last.map { "campaign \($0.campaignID)" } ?? "nothing")")
            #expect(try campaigns.claimParked(sessions[3], limit: 10, apps: ["shop"]) == nil)
        }
    }
}
