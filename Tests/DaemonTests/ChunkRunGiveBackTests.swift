import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A chunk run that stops before a target it took (the fleet disagreeing on the app's
/// environment, APNs down) gives that target back to the chunk only when it was never sent.
@Suite(.serialized) struct ChunkRunGiveBackTests {
    @Test func aRetryOfTheLastTargetTakenStaysTheRunsAndAFreshOneIsGivenBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            _ = try CampaignLaneTests.campaign(connection, count: 3)
            let chunk = try #require(try CampaignStore().leaseChunk(connection, owner: "test", apps: ["shop"], leaseSeconds: 30))
            let sender = try #require(try harness.pipeline().context.senders["shop"])
            let run = ChunkRun(chunk: chunk, sender: sender, generation: 1, rate: nil)
            // Fresh: taken, never sent. Given back, the chunk is released at it.
            let fresh = try #require(run.takeNextTarget(now: 0))
            #expect(run.giveBackUnsent(fresh))
            #expect(run.next == fresh)
            // Taken, sent, and its retry come due: the last target taken, yet not fresh. Given
            // back, its attempt and first send were forgotten and the chunk sent it again as new.
            let sent = try #require(run.takeNextTarget(now: 0))
            run.sent(sent, to: run.environments[sent], authorization: nil)
            run.retries.append(ChunkRun.Retry(at: 0, target: sent))
            let retry = try #require(run.takeNextTarget(now: 1))
            #expect(retry == sent && retry == run.next - 1)
            #expect(!run.giveBackUnsent(retry), "a retry of the last target taken was given back to the chunk as never sent")
            #expect(run.next == sent + 1 && run.attempts[retry] == 1)
        }
    }
}
