import Foundation
import Metrics
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The lease keeper meets a read-only database (a failover) while it holds chunks, and the
/// workers drop their chunks before writes are taken again. The keeper then had nothing to
/// renew and skipped its rounds: the spell it told of never ended, no `database_takes_writes`
/// line was written, and the next spell, hours later, was told as "still refuses writes, for
/// 10800 s now".
@Suite(.serialized) struct LeaseKeeperRefusedWritesTests {
    @Test func aSpellOfRefusedWritesEndsWhenWritesReturnAfterTheKeeperHasDroppedItsChunks() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            // This session turns the setting back: the reload must not make it read-only too.
            _ = try connection.execute(script: "SET default_transaction_read_only = off")
            let sink = MemoryLogSink()
            // Notice level: the end of a spell is a notice.
            let pipeline = try Pipeline(config: harness.config(), metrics: try PushdMetrics(version: "test"),
                                        logger: Logger(level: .info, sink: sink), instance: "test")
            _ = try CampaignLaneTests.campaign(connection, count: 10)
            let chunk = try #require(try CampaignStore().leaseChunk(connection, owner: "test/campaign-0", apps: ["shop"], leaseSeconds: 30))
            let keeper = LeaseKeeper(context: pipeline.context, leaseSeconds: 3, interval: 0.2)
            keeper.start()
            defer { keeper.stop() }
            keeper.hold(chunk, worker: 0)
            func keeperLines(_ event: String) -> [String] {
                sink.lines.filter { $0.contains(LeaseKeeper.refusedWritesName) && $0.contains("\"event\":\"\(event)\"") }
            }

            defer { try? CampaignReadOnlyDatabaseTests.setReadOnly(false, connection: connection, database: database) }
            try CampaignReadOnlyDatabaseTests.setReadOnly(true, connection: connection, database: database)
            #expect(DaemonHarness.wait(seconds: 10) { !keeperLines("database_refuses_writes").isEmpty },
                    "the keeper never met the refusal: \(sink.lines)")
            // The worker is done with its chunk (released, given up) while the database is read-only.
            keeper.drop(chunk)
            Thread.sleep(forTimeInterval: 1)
            try CampaignReadOnlyDatabaseTests.setReadOnly(false, connection: connection, database: database)
            #expect(DaemonHarness.wait(seconds: 10) { keeperLines("database_takes_writes").count == 1 },
                    "the keeper's spell of refused writes did not end: \(sink.lines)")
            #expect(keeperLines("database_refuses_writes").count == 1, "\(sink.lines)")
        }
    }
}
