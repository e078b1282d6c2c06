import PushdTestSupport
import Posix
import QueueStore
import Testing

/// A campaign stored before an upgrade added one of the campaign CHECKs NOT VALID may break
/// it: PostgreSQL refuses every write of its row. The campaign is held (`CampaignRefusal`):
/// its chunks' progress is written without the row, nothing more of it is leased, and
/// correcting the column ends the hold with the counts added to the row.
@Suite struct NotValidCampaignTests {
    let campaigns = CampaignStore()
    static let badPayload = #"{"aps":{"badge":"three"}}"#

    /// A running campaign of `targets` targets in chunks of `chunkSize` whose row then breaks
    /// `campaigns_payload_shape` as shipped (dropped, written, added again NOT VALID).
    func refusedCampaign(_ connection: PGConnection, targets: Int, chunkSize: Int, rateLimit: Int? = nil) throws -> Int64 {
        let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "old sale", payload: Fixtures.payload, rateLimit: rateLimit))
        try campaigns.importTargets(connection, campaignID: id, targets: (1...targets).map { (Fixtures.token($0), nil) }, chunkSize: chunkSize)
        #expect(try campaigns.start(connection, id: id) == .running)
        let definition = try connection.query("""
            SELECT pg_get_constraintdef(oid) FROM pg_constraint
            WHERE conname = 'campaigns_payload_shape' AND conrelid = 'pushd.campaigns'::regclass
            """).require(String.self, row: 0, column: 0)
        _ = try connection.execute(script: "ALTER TABLE pushd.campaigns DROP CONSTRAINT campaigns_payload_shape")
        try connection.query("UPDATE pushd.campaigns SET payload = $2 WHERE id = $1", [id, Self.badPayload])
        _ = try connection.execute(script: "ALTER TABLE pushd.campaigns ADD CONSTRAINT campaigns_payload_shape \(definition)")
        return id
    }

    @Test func aRefusedProgressWriteKeepsTheChunksProgressHoldsTheCampaignAndTheFixEndsTheHold() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let id = try refusedCampaign(connection, targets: 10, chunkSize: 5)
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))

            let directive = try campaigns.checkpoint(connection, chunk, ChunkProgress(position: 3, sent: 2, failedByReason: ["BadDeviceToken": 1]),
                                                     leaseSeconds: 30)
            guard case .refused(let held) = directive else {
                Issue.record("a refused checkpoint returned \(directive)")
                return
            }
            #expect(held.campaignID == id && held.app == "shop" && held.check == "campaigns_payload_shape" && held.column == "payload")
            #expect(held.message.contains("pushd.campaigns.payload"))
            #expect(try CampaignRows.checkpoint(connection, id, chunk: chunk.chunk) == 3, "the chunk's progress is written")
            #expect(try campaigns.release(connection, chunk, ChunkProgress(position: 5, sent: 2)) == .refused(held))
            #expect(try CampaignRows.checkpoint(connection, id, chunk: chunk.chunk) == 5)
            #expect(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30) == nil,
                    "a held campaign is not leased")
            #expect(try campaigns.closeFinishedCampaigns(connection) == [])
            // What was sent while held shows at once, not only when the hold ends.
            let whileHeld = try #require(try campaigns.campaign(connection, id: id))
            #expect(whileHeld.sent == 4 && whileHeld.failed == 1 && whileHeld.failedByReason == ["BadDeviceToken": 1],
                    "sent \(whileHeld.sent), failed \(whileHeld.failed) \(whileHeld.failedByReason)")
            #expect(try campaigns.campaigns(connection, app: "shop", limit: 5).first { $0.id == id }?.sent == 4)
            let stats = try QueueStats.read(connection)
            let progress = try #require(stats.campaigns.first { $0.id == id })
            #expect(progress.sent == 4 && progress.failed == 1 && progress.refusedBy == "campaigns_payload_shape")
            // Nothing leases or sends it while held: its 5 remaining targets are refused, not due
            // (before, they were the lane's depth, as if a worker would send them).
            let heldLane = try #require(stats.lanes.first { $0.lane == .campaign && $0.app == "shop" })
            #expect(heldLane.depth == 0, "10 targets, 5 of them sent or failed, none due while held: \(heldLane)")
            #expect(heldLane.refused == 5 && heldLane.oldestAge == 0, "\(heldLane)")
            let fleet = try #require(try FleetSnapshot.read(connection).campaigns.first { $0.progress.id == id })
            #expect(fleet.progress.sent == 4 && fleet.progress.failed == 1 && fleet.progress.refusedBy == "campaigns_payload_shape")

            for (action, change) in [("pause", { try campaigns.pause(connection, id: id) }),
                                     ("cancel", { try campaigns.cancel(connection, id: id) })] as [(String, () throws -> CampaignStatus)] {
                do {
                    _ = try change()
                    Issue.record("\(action) of a refused row succeeded")
                } catch {
                    let text = "\(error)"
                    #expect(text.contains("cannot \(action) campaign \(id): CHECK campaigns_payload_shape of pushd.campaigns")
                            && text.contains("UPDATE pushd.campaigns SET payload = … WHERE id = \(id)"), "\(text)")
                }
            }

            // The operator corrects the column: the hold ends, its counts go to the row.
            try connection.query("UPDATE pushd.campaigns SET payload = $2 WHERE id = $1", [id, Fixtures.payload])
            #expect(try campaigns.refusal(connection, campaignID: id) == nil)
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.sent == 4 && campaign.failed == 1 && campaign.failedByReason == ["BadDeviceToken": 1])
            let freed = try #require(try QueueStats.read(connection).lanes.first { $0.lane == .campaign && $0.app == "shop" })
            #expect(freed.depth == 5 && freed.refused == 0, "the hold ended: due again: \(freed)")
            let next = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))
            #expect(next.chunk == chunk.chunk && next.startIndex == 5 || next.chunk != chunk.chunk,
                    "the released chunk is not sent again from before its watermark")
            #expect(try campaigns.pause(connection, id: id) == .paused)
        }
    }

    /// A capped campaign's lease writes its row (its pace): refused, it failed the lease of
    /// every campaign. Now it is held and the next campaign is leased.
    @Test func aCappedCampaignWhoseRowIsRefusedIsHeldAndTheNextCampaignIsLeased() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let refused = try refusedCampaign(connection, targets: 4, chunkSize: 2, rateLimit: 100)
            let other = try campaigns.create(connection, NewCampaign(app: "shop", name: "new sale", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: other, targets: [(Fixtures.token(50), nil)])
            #expect(try campaigns.start(connection, id: other) == .running)

            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))
            #expect(chunk.campaignID == other)
            let held = try #require(try campaigns.refusal(connection, campaignID: refused))
            #expect(held.check == "campaigns_payload_shape")
            #expect(try campaigns.refusals(connection, apps: ["shop"]).map(\.campaignID) == [refused])
            #expect(try campaigns.refusals(connection, apps: ["news"]).isEmpty)
            #expect(try QueueStats.read(connection).campaigns.first { $0.id == refused }?.refusedBy == "campaigns_payload_shape")
        }
    }

    /// A parked batch's claim and its counts are one transaction: a refused count rolled the
    /// claim back, and every target of the batch, sent already, was claimed and sent again.
    @Test func aParkedBatchWhoseCountIsRefusedIsSettledOnceAndCountedWithTheHold() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let id = try refusedCampaign(connection, targets: 2, chunkSize: 2)
            try connection.query("""
                INSERT INTO pushd.campaign_retries (campaign_id, chunk, position, token, due_at, attempts, first_attempt_at, last_error)
                VALUES ($1, 0, 0, $2, now(), 1, now(), 'InternalServerError'), ($1, 0, 1, $3, now(), 1, now(), 'InternalServerError')
                """, [id, Fixtures.token(1), Fixtures.token(2)])
            let batch = try #require(try campaigns.claimParked(connection, limit: 10, apps: ["shop"]))
            #expect(batch.targets.count == 2)
            var outcomes = ParkedOutcomes()
            outcomes.sent = 2
            #expect(try campaigns.settleParked(connection, batch, outcomes) == [])
            #expect(!connection.isInTransaction)
            #expect(try connection.query("SELECT count(*) FROM pushd.campaign_retries").require(Int.self, row: 0, column: 0) == 0,
                    "the claim is committed: nothing of the batch is sent again")
            #expect(try connection.query("SELECT sent FROM pushd.campaign_refusals WHERE campaign_id = $1", [id])
                .require(Int.self, row: 0, column: 0) == 2)
            #expect(try campaigns.claimParked(connection, limit: 10, apps: ["shop"]) == nil)
        }
    }

    /// The idle sweep that closes finished campaigns is one UPDATE of them all: a refused row
    /// failed it on every turn. The refused campaign is held, the others closed.
    @Test func closingFinishedCampaignsHoldsARefusedOneAndClosesTheOthers() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let other = try campaigns.create(connection, NewCampaign(app: "shop", name: "new sale", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: other, targets: [(Fixtures.token(50), nil)])
            #expect(try campaigns.start(connection, id: other) == .running)
            let refused = try refusedCampaign(connection, targets: 2, chunkSize: 2)
            // Both look finished, as if their last chunks' finish had missed the close.
            _ = try connection.execute(script: """
                ALTER TABLE pushd.campaigns DROP CONSTRAINT campaigns_payload_shape;
                UPDATE pushd.campaigns SET chunks_done = chunks_total;
                """)
            _ = try connection.execute(script: """
                ALTER TABLE pushd.campaigns ADD CONSTRAINT campaigns_payload_shape CHECK (pushd.payload_shape_ok(payload, push_type)
                    OR pushd.check_payload_shape(payload, push_type, 'pushd.campaigns.payload', 'campaigns_payload_shape')) NOT VALID
                """)
            #expect(try campaigns.closeFinishedCampaigns(connection) == [other])
            #expect(try campaigns.refusal(connection, campaignID: refused)?.check == "campaigns_payload_shape")
            #expect(try campaigns.campaign(connection, id: refused)?.status == .running)
        }
    }
}

/// Reads what the tests check straight from the tables.
enum CampaignRows {
    static func checkpoint(_ connection: PGConnection, _ campaign: Int64, chunk: Int) throws -> Int {
        try connection.query("SELECT checkpoint FROM pushd.campaign_chunks WHERE campaign_id = $1 AND chunk = $2", [campaign, chunk])
            .require(Int.self, row: 0, column: 0)
    }
}
