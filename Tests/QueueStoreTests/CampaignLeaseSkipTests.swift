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
}
