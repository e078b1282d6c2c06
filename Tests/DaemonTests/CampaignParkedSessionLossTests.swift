import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A batch of parked campaign targets is claimed by locking their rows in a transaction that
/// stays open while they are sent. When that session is cut after APNs has taken the batch, the
/// locks go with it and the rows are due as they were claimed: pushd knows what APNs answered
/// and records it on a new session, instead of sending every target of the batch a second time.
@Suite(.serialized) struct CampaignParkedSessionLossTests {
    /// A running campaign whose chunks are all sent and whose `count` targets are parked, due now.
    static func parkedCampaign(_ connection: PGConnection, count: Int) throws -> Int64 {
        let id = try CampaignLaneTests.campaign(connection, count: count)
        try connection.query("""
            UPDATE pushd.campaign_chunks SET checkpoint = size, finished_at = now(), lease_owner = NULL, lease_until = NULL
            WHERE campaign_id = $1
            """, [id])
        try connection.query("UPDATE pushd.campaigns SET chunks_done = chunks_total WHERE id = $1", [id])
        try connection.query("""
            INSERT INTO pushd.campaign_retries (campaign_id, chunk, position, token, due_at, attempts, first_attempt_at, last_error)
            SELECT $1, 0, g - 1, t, now(), 1, now(), 'InternalServerError'
            FROM unnest($2::text[]) WITH ORDINALITY AS u(t, g)
            """, [id, (1...count).map { DaemonHarness.token($0) }])
        return id
    }

    @Test func aParkedBatchWhoseSessionIsCutWhileInFlightIsRecordedAgainAndNotSentTwice() throws {
        try IsolatedDatabase.with { database in
            // Answers take 4 s: the batch is at APNs, unanswered, when the session is cut (the
            // test's poll and the cut itself fit in that on a loaded machine).
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 4000))
            let connection = try database.connect()
            defer { connection.close() }
            let count = 100
            let id = try Self.parkedCampaign(connection, count: count)
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(log: log)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.requestsReceived >= count })
            let cut = try connection.query("""
                SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity
                WHERE datname = current_database() AND application_name LIKE 'pushd-campaign%') t
                """).require(Int.self, row: 0, column: 0)
            #expect(cut >= 1)
            #expect(harness.mock.stats.accepted < count, "the batch was answered before its session was cut")

            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            // Time for a batch sent again to be answered.
            Thread.sleep(forTimeInterval: 5)
            let perToken = harness.mock.stats.perToken
            #expect(perToken.count == count)
            let twice = perToken.filter { $0.value.accepted != 1 }
            #expect(twice.isEmpty, "\(twice.count) of \(count) targets accepted other than once")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == count, "sent \(campaign.sent) of \(count)")

            // Each batch's count and line follow the COMMIT that recorded it on a new session.
            func recordedAgain() -> Int {
                Int(pipeline.context.metrics.registry.expositionText().split(separator: "\n")
                    .filter { $0.hasPrefix("pushd_unrecorded_outcomes_total{") && $0.contains(#"lane="campaign""#)
                        && $0.contains(#"result="recorded_again""#) }
                    .compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +))
            }
            #expect(DaemonHarness.wait(seconds: 10) { recordedAgain() >= count && log.lines.contains { $0.contains("batch_recorded_again") } })
            Thread.sleep(forTimeInterval: 0.2)
            let recorded = log.lines.filter { $0.contains("batch_recorded_again") }
            #expect(!recorded.isEmpty, "no batch_recorded_again line")
            #expect(recorded.allSatisfy { $0.contains(#""lane":"campaign""#) && $0.contains("0 will be sent again") }, "\(recorded)")
            let metrics = pipeline.context.metrics.registry.expositionText().split(separator: "\n")
            let again = metrics.filter { $0.hasPrefix("pushd_unrecorded_outcomes_total{") && $0.contains(#"lane="campaign""#)
                && $0.contains(#"result="recorded_again""#) }
            let total = again.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
            #expect(Int(total) == count, "\(again)")
        }
    }
}
