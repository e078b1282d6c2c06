import APNs
import Foundation
import Glibc
import Locking
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A claimed batch of parked campaign targets holds its transaction open while it is sent and
/// answered: whatever holds it up, the outcomes of what APNs took must not be lost, or every
/// target of it is claimed and sent again.
@Suite(.serialized) struct ParkedBatchTests {
    /// Parks every target of campaign `id` (its chunks finished), due now.
    static func parkEverything(_ connection: PGConnection, campaign id: Int64) throws {
        let store = CampaignStore()
        while let chunk = try store.leaseChunk(connection, owner: "tests", apps: ["shop"], leaseSeconds: 30) {
            let parked = chunk.targets.map { target in
                ParkedTarget(campaignID: id, chunk: chunk.chunk, position: target.index, token: target.token, payload: nil,
                             dueAt: Timestamp().addingTimeInterval(-1), attempts: 1, firstAttemptAt: Timestamp(),
                             lastError: "HTTP 500 InternalServerError")
            }
            try store.finish(connection, chunk, ChunkProgress(position: chunk.size), parking: parked)
        }
    }

    /// PostgreSQL's `idle_in_transaction_session_timeout`, made short: ends every campaign
    /// worker's session that stays idle in its transaction longer than `limit` seconds, as the
    /// server ends it, and counts them.
    final class IdleTransactionLimit: @unchecked Sendable {
        private let state = Lock((stop: false, ended: 0))
        private let done = DispatchSemaphore(value: 0)

        init(_ database: IsolatedDatabase, limit: Double) {
            Thread.detachNewThread { [state, done] in
                defer { done.signal() }
                guard let watcher = try? database.connect("pushd-tests-idle-limit") else {
                    state.withLock { $0.ended = -1 }
                    return
                }
                defer { watcher.close() }
                while !state.withLock({ $0.stop }) {
                    let ended = (try? watcher.query("""
                        SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
                        WHERE datname = current_database() AND application_name LIKE 'pushd-campaign-%'
                          AND state = 'idle in transaction'
                          AND now() - state_change > make_interval(secs => $1)
                        """, [limit]).require(Int.self, row: 0, column: 0)) ?? 0
                    state.withLock { $0.ended += ended }
                    usleep(100_000)
                }
            }
        }

        /// Stops watching; returns how many sessions it ended (-1: it could not connect).
        func stop() -> Int {
            state.withLock { $0.stop = true }
            done.wait()
            return state.withLock { $0.ended }
        }
    }

    /// Eight workers claim parked batches of one campaign whose cap they share (`RateLimiter`):
    /// each batch gets an eighth of the cap. A batch that sent what the cap sends in its
    /// budget took eight budgets, outlived the session's idle limit, lost its outcomes and was
    /// sent again, over and over. The budget here is 2 s and the idle limit 10 s (five budgets,
    /// room for a loaded machine; such a batch takes eight).
    @Test func parkedBatchesOfACapSharedByManyWorkersEndInsideTheIdleLimitAndSendNoTargetTwice() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let count = 1_600
            let rate = 10
            let id = try CampaignLaneTests.campaign(connection, count: count)
            try Self.parkEverything(connection, campaign: id)
            try connection.query("UPDATE pushd.campaigns SET rate_limit = $1 WHERE id = $2", [rate, id])
            var config = harness.config()
            config.campaignWorkers = 8
            config.parkedBatchSeconds = 2
            let idleLimit = IdleTransactionLimit(database, limit: 10)
            let pipeline = try harness.pipeline(config)
            let started = Timestamp()
            pipeline.start()
            Thread.sleep(forTimeInterval: 14)
            pipeline.stop(deadline: Timestamp().addingTimeInterval(5))
            let seconds = Timestamp().timeIntervalSince(started)
            let ended = idleLimit.stop()

            #expect(ended == 0, "\(ended) parked batches outlived the idle limit and were rolled back")
            let accepted = harness.mock.acceptedLog.map(\.token)
            #expect(accepted.count == Set(accepted).count, "\(accepted.count - Set(accepted).count) targets were accepted twice")
            // The cap is kept, and used: the batches take turns at its pace.
            #expect(Double(Set(accepted).count) >= Double(rate) * (seconds - 4) / 2, "\(Set(accepted).count) targets accepted in \(Int(seconds)) s at \(rate)/s")
            #expect(Double(accepted.count) <= Double(rate) * seconds + 10, "\(accepted.count) sends in \(Int(seconds)) s at \(rate)/s")
            let store = CampaignStore()
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == Set(accepted).count, "the campaign counts \(campaign.sent) of \(Set(accepted).count) accepted")
            let parked = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(id)")
            #expect(parked == count - Set(accepted).count)

            // The rest, uncapped: a batch whose outcomes were lost is sent again here.
            try connection.query("UPDATE pushd.campaigns SET rate_limit = NULL WHERE id = $1", [id])
            let rest = try harness.pipeline(config)
            rest.start()
            defer { rest.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(try DaemonHarness.wait(seconds: 20) { try store.campaign(connection, id: id)?.status == .done })
            let all = harness.mock.acceptedLog.map(\.token)
            #expect(Set(all).count == count)
            #expect(all.count == count, "\(all.count - Set(all).count) targets were accepted twice")
        }
    }

    /// The settle of a parked batch waits `lock_timeout` (10 s) for its campaign's row, which
    /// another session holds: the targets APNs took are not claimed again (their rows were
    /// rolled back with the batch, and each was sent once more per lock timeout), and the
    /// campaign counts them once the row is free.
    @Test func aParkedBatchWhoseCampaignRowIsLockedIsNotSentAgainAndIsCountedOnceTheRowIsFree() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let count = 20
            let id = try CampaignLaneTests.campaign(connection, count: count)
            try Self.parkEverything(connection, campaign: id)
            let holder = try database.connect("pushd-tests-holder")
            try holder.execute(script: "BEGIN")
            try holder.query("SELECT 1 FROM pushd.campaigns WHERE id = $1 FOR UPDATE", [id])
            var config = harness.config()
            config.campaignWorkers = 1
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            #expect(DaemonHarness.wait(seconds: 10) { harness.mock.acceptedLog.count >= count })
            let locked = #"pushd_database_errors_total{reason="55"}"#
            #expect(DaemonHarness.wait(seconds: 20) { pipeline.context.metrics.registry.expositionText().contains(locked) },
                    "the settle never waited for the campaign's row")
            // Another lock timeout's worth: a batch rolled back is claimed and sent again meanwhile.
            Thread.sleep(forTimeInterval: 3)
            try holder.execute(script: "COMMIT")

            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 20) { try store.campaign(connection, id: id)?.status == .done })
            let accepted = harness.mock.acceptedLog.map(\.token)
            #expect(Set(accepted).count == count)
            #expect(accepted.count == count, "\(accepted.count - Set(accepted).count) targets were accepted twice")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == count && campaign.remaining == 0, "sent \(campaign.sent), remaining \(campaign.remaining)")
        }
    }
}
