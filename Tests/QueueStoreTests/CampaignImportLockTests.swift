import Foundation
import Glibc
import Locking
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// An import into a campaign that is sending reads its audience for as long as its file or
/// pipe takes: the workers' writes of the campaign's row must not wait for it.
@Suite struct CampaignImportLockTests {
    let campaigns = CampaignStore()

    /// A running campaign of 20 targets in chunks of 10, and an import into it reading a pipe
    /// that holds 30 more targets and stays open until `close` is called.
    struct OpenImport {
        let id: Int64
        /// The pipe's end this side writes, -1 once closed.
        let writeEnd: Lock<Int32>
        let finished = DispatchSemaphore(value: 0)
        let outcome = Lock<Result<TargetImportResult, any Error>?>(nil)

        /// Ends the import's audience; closes the descriptor once however often called.
        func close() {
            writeEnd.withLock { end in
                if end >= 0 { Glibc.close(end) }
                end = -1
            }
        }
    }

    func openImport(_ database: IsolatedDatabase, _ connection: PGConnection, rateLimit: Int? = nil) throws -> OpenImport {
        let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "winter sale", payload: Fixtures.payload,
                                                              rateLimit: rateLimit))
        try campaigns.importTargets(connection, campaignID: id, targets: (1...20).map { (Fixtures.token($0), nil) }, chunkSize: 10)
        try campaigns.start(connection, id: id)
        var ends: [Int32] = [0, 0]
        try #require(pipe(&ends) == 0)
        let lines = (21...50).map { Fixtures.token($0) + "\n" }.joined()
        try #require(lines.withCString { write(ends[1], $0, strlen($0)) } == lines.utf8.count)
        let open = OpenImport(id: id, writeEnd: Lock(ends[1]))
        let readEnd = ends[0]
        Thread.detachNewThread { [campaigns] in
            let result = Result {
                let importer = try database.connect("pushd-tests-import")
                defer { importer.close() }
                return try campaigns.importTargets(importer, campaignID: id, fromDescriptor: readEnd, sourceName: "pipe", chunkSize: 10)
            }
            Glibc.close(readEnd)
            open.outcome.withLock { $0 = result }
            open.finished.signal()
        }
        // The import has read the lines and waits in its COPY for the rest of the pipe.
        let deadline = Timestamp().addingTimeInterval(10)
        while Timestamp() < deadline, try connection.query("""
            SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = 'pushd-tests-import' AND query LIKE 'COPY%'
            """).require(Int.self, row: 0, column: 0) == 0 {
            usleep(20_000)
        }
        return open
    }

    @Test func aChunksCheckpointAndFinishDoNotWaitForAnImportStillReadingItsAudience() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let worker = try database.connect("pushd-tests-worker")
            // Far below the import's pipe: a write that waited for the import would fail with 55P03.
            try worker.execute(script: "SET lock_timeout = '2s'")
            let open = try openImport(database, connection)
            defer { open.close() }

            let chunk = try #require(try campaigns.leaseChunk(worker, owner: "w", apps: ["shop"], leaseSeconds: 30))
            #expect(try campaigns.checkpoint(worker, chunk, ChunkProgress(position: 4, sent: 4), leaseSeconds: 30) == .proceed)
            try campaigns.finish(worker, chunk, ChunkProgress(position: chunk.size, sent: 6))
            #expect(try campaigns.campaign(connection, id: open.id)?.sent == 10)
            #expect(open.outcome.withLock { $0 == nil }, "the import ended before its pipe was closed")

            open.close()
            #expect(open.finished.wait(timeout: .now() + 30) == .success)
            #expect(try open.outcome.withLock { $0 }?.get().imported == 30)
            let campaign = try #require(try campaigns.campaign(connection, id: open.id))
            #expect(campaign.targets == 50 && campaign.chunksTotal == 5 && campaign.chunksDone == 1 && campaign.status == .running)
        }
    }

    @Test func aCappedCampaignsLeaseDoesNotWaitForAnImportStillReadingItsAudience() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let worker = try database.connect("pushd-tests-worker")
            try worker.execute(script: "SET lock_timeout = '2s'")
            let open = try openImport(database, connection, rateLimit: 1000)
            defer { open.close() }

            // The lease writes the capped campaign's pace into its row.
            let chunk = try #require(try campaigns.leaseChunk(worker, owner: "w", apps: ["shop"], leaseSeconds: 30))
            #expect(chunk.campaignID == open.id && chunk.chunk == 0)
            open.close()
            #expect(open.finished.wait(timeout: .now() + 30) == .success)
            #expect(try open.outcome.withLock { $0 }?.get().imported == 30)
        }
    }

    /// The lease moves on when a campaign's row is locked for longer (an operator's open
    /// transaction): the other campaigns are sent meanwhile.
    @Test func aLeaseSkipsACappedCampaignWhoseRowAnotherSessionHolds() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let worker = try database.connect("pushd-tests-worker")
            try worker.execute(script: "SET lock_timeout = '2s'")
            var ids = [Int64]()
            for name in ["first", "second"] {
                let id = try campaigns.create(connection, NewCampaign(app: "shop", name: name, payload: Fixtures.payload, rateLimit: 1000))
                try campaigns.importTargets(connection, campaignID: id, targets: (1...10).map { (Fixtures.token($0), nil) })
                try campaigns.start(connection, id: id)
                ids.append(id)
            }
            let holder = try database.connect("pushd-tests-holder")
            try holder.execute(script: "BEGIN")
            try holder.query("SELECT 1 FROM pushd.campaigns WHERE id = $1 FOR UPDATE", [ids[0]])
            let chunk = try #require(try campaigns.leaseChunk(worker, owner: "w", apps: ["shop"], leaseSeconds: 30))
            #expect(chunk.campaignID == ids[1])
            try holder.execute(script: "ROLLBACK")
            #expect(try campaigns.leaseChunk(worker, owner: "w", apps: ["shop"], leaseSeconds: 30)?.campaignID == ids[0])
        }
    }

    /// A campaign cancelled while an import reads its audience gets none of it: its chunks
    /// would never be leased.
    @Test func anImportIntoACampaignCancelledMeanwhileAddsNothingAndSaysSo() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let open = try openImport(database, connection)
            defer { open.close() }
            #expect(try campaigns.cancel(connection, id: open.id) == .cancelled)
            open.close()
            #expect(open.finished.wait(timeout: .now() + 30) == .success)
            let failure = open.outcome.withLock { result -> String in
                guard case .failure(let error)? = result else { return "no failure: \(String(describing: result))" }
                return "\(error)"
            }
            #expect(failure.contains("campaign \(open.id) became cancelled while its targets were being read"), "\(failure)")
            let campaign = try #require(try campaigns.campaign(connection, id: open.id))
            #expect(campaign.targets == 20 && campaign.chunksTotal == 2)
            #expect(try connection.query("SELECT count(*) FROM pushd.campaign_chunks WHERE campaign_id = $1", [open.id])
                .require(Int.self, row: 0, column: 0) == 2)
        }
    }
}
