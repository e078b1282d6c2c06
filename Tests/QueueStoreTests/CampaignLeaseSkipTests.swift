import PushdTestSupport
import Posix
import Foundation
import QueueStore
import Testing

/// The lease passes over the campaigns its caller names (the capped campaigns a process is
/// pacing), and the campaigns with a chunk to lease and none being sent are found.
@Suite struct CampaignLeaseSkipTests {
    let campaigns = CampaignStore()

    func makeCampaign(_ connection: PGConnection, name: String, first: Int, targets: Int, chunkSize: Int) throws -> Int64 {
        let id = try campaigns.create(connection, NewCampaign(app: "shop", name: name, payload: Fixtures.payload))
        try campaigns.importTargets(connection, campaignID: id, targets: (first..<first + targets).map { (Fixtures.token($0), nil) },
                                    chunkSize: chunkSize)
        try campaigns.start(connection, id: id)
        return id
    }

    @Test func theLeasePassesOverTheCampaignsItIsToldToSkip() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let older = try makeCampaign(connection, name: "older", first: 1, targets: 20, chunkSize: 10)
            let newer = try makeCampaign(connection, name: "newer", first: 100, targets: 20, chunkSize: 10)
            let skipped = try #require(try campaigns.leaseChunk(connection, owner: "w1", apps: ["shop"], leaseSeconds: 30, skipping: [older]))
            #expect(skipped.campaignID == newer)
            let oldestFirst = try #require(try campaigns.leaseChunk(connection, owner: "w2", apps: ["shop"], leaseSeconds: 30))
            #expect(oldestFirst.campaignID == older)
            #expect(try campaigns.leaseChunk(connection, owner: "w3", apps: ["shop"], leaseSeconds: 30, skipping: [older, newer]) == nil)
        }
    }

    @Test func aCampaignWithAChunkToLeaseAndNoneBeingSentWaitsForAWorker() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let older = try makeCampaign(connection, name: "older", first: 1, targets: 20, chunkSize: 10)
            let newer = try makeCampaign(connection, name: "newer", first: 100, targets: 20, chunkSize: 10)
            #expect(try campaigns.campaignsWaitingForWorker(connection, apps: ["shop"]).map(\.id) == [older, newer])
            #expect(try campaigns.campaignsWaitingForWorker(connection, apps: ["news"]).isEmpty)
            // One chunk of the older one is being sent: only the newer one waits.
            _ = try #require(try campaigns.leaseChunk(connection, owner: "w1", apps: ["shop"], leaseSeconds: 30))
            #expect(try campaigns.campaignsWaitingForWorker(connection, apps: ["shop"]) == [WaitingCampaign(id: newer, app: "shop")])
            _ = try #require(try campaigns.leaseChunk(connection, owner: "w2", apps: ["shop"], leaseSeconds: 30, skipping: [older]))
            #expect(try campaigns.campaignsWaitingForWorker(connection, apps: ["shop"]).isEmpty)
        }
    }

    /// A campaign waiting for APNs is told as the lease is told it: passed over whole it waits
    /// on purpose; passed over for one environment's chunks, it still waits for a worker while
    /// it has a free chunk of the other environment, or one that records none.
    @Test func aCampaignWaitingForOneEnvironmentStillWaitsForAWorkerForItsOtherChunks() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, name: "both", first: 1, targets: 20, chunkSize: 10)
            try connection.query("UPDATE pushd.campaign_chunks SET environment = CASE WHEN chunk = 0 THEN 'sandbox' ELSE 'production' END WHERE campaign_id = $1", [id])
            let waiting = { (whole: [Int64], chunksTo: [String: [Int64]]) in
                try self.campaigns.campaignsWaitingForWorker(connection, apps: ["shop"], passingOver: whole, passingOverChunksTo: chunksTo).map(\.id)
            }
            #expect(try waiting([], [:]) == [id])
            #expect(try waiting([id], [:]).isEmpty)
            #expect(try waiting([], ["sandbox": [id]]) == [id], "its production chunk is free and no worker took it")
            #expect(try waiting([], ["production": [id]]) == [id], "its sandbox chunk is free and no worker took it")
            #expect(try waiting([], ["sandbox": [id], "production": [id]]).isEmpty)
            #expect(try waiting([], ["sandbox": [id + 1]]) == [id])
            // A chunk that records no environment is never passed over by environment.
            try connection.query("UPDATE pushd.campaign_chunks SET environment = NULL WHERE campaign_id = $1 AND chunk = 1", [id])
            #expect(try waiting([], ["sandbox": [id], "production": [id]]) == [id])
            #expect(throws: QueueError.self) { try waiting([], ["staging": [id]]) }
        }
    }
}
