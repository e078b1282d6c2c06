import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A sent batch whose session ends while its outcomes are written: its COMMIT went through with
/// only the reply lost, or it did not, and then another claimer took the rows, sent them again
/// and settled them before the batch was taken back. The two look alike from the new session
/// (the rows are settled, by someone); PostgreSQL tells them apart (`pg_xact_status` of the
/// batch's transaction). Every row settled meanwhile was counted `recorded_again`, by the lost
/// COMMIT, even when that COMMIT never happened and the notifications went out twice.
@Suite(.serialized) struct LostCommitTests {
    /// Ends `connection`'s session from `admin`, and returns the error the client meets on it,
    /// once the backend is gone: the client reads the end of its session before the backend has
    /// rolled its transaction back and let go of its rows, which a claim on another session may
    /// otherwise still find locked on a loaded machine.
    static func cut(_ connection: PGConnection, from admin: PGConnection) throws -> any Error {
        let pid = connection.backendPID
        #expect(try admin.query("SELECT pg_terminate_backend($1)", [pid]).require(Bool.self, row: 0, column: 0))
        var ended: (any Error)?
        for _ in 0..<500 where ended == nil {
            do { try connection.checkSession(); usleep(20_000) } catch { ended = error }
        }
        guard let ended else { throw QueueError("the session of backend \(pid) did not end within 10 s") }
        for _ in 0..<500 {
            let left: Int64 = try admin.query("SELECT count(*) FROM pg_stat_activity WHERE pid = $1", [pid]).require(row: 0, column: 0)
            if left == 0 { return ended }
            usleep(20_000)
        }
        throw QueueError("backend \(pid) was still there 10 s after its session ended")
    }

    /// What a batch's recording said: its `batch_recorded_again` line,
    /// `pushd_unrecorded_outcomes_total` of its lane by result, and how many times the recorder
    /// said a write committed (what it wrote besides, prunes, is counted then).
    struct Said {
        var line: String
        var counts: [String: Int]
        var committed: Int
    }

    /// Records with a `SentBatchRecorder` of `lane` a batch of `keys` (all accepted by APNs),
    /// claimed in transaction `transaction` on `doomed`. Its first write ends the session: after
    /// the COMMIT (`commits`: the reply is lost), or before it, when `elsewhere` has taken the
    /// rows on another session, sent them and settled them. `retake` and `write` are the lane's
    /// store calls.
    static func record<Key: Hashable>(_ lane: Lane, _ rows: String, keys: [Key], transaction: Int64?, doomed: PGConnection,
                                      database: IsolatedDatabase, commits: Bool,
                                      retake: @escaping (PGConnection) throws -> SentBatchRecorder<Key>.Retaken,
                                      write: @escaping (PGConnection, Set<Key>?) throws -> Void,
                                      elsewhere: @escaping () throws -> Void) throws -> Said {
        let harness = try DaemonHarness(database: database)
        let sink = MemoryLogSink()
        let pipeline = try harness.pipeline(log: sink)
        let admin = try database.connect()
        defer { admin.close() }
        let recorder = SentBatchRecorder<Key>(context: pipeline.context, lane: lane, worker: 0, rows: rows, backIn: "the queue")
        var claim = SentBatchClaim(held: keys, connection: doomed, transaction: transaction)
        var sessions = [PGConnection]()
        defer { sessions.forEach { $0.close() } }
        var committed = 0
        _ = try recorder.record(&claim, accepted: Set(keys), retake: { claim in
            var held = Set<Key>()
            try recorder.retake(&claim, connect: {
                let fresh = try database.connect()
                sessions.append(fresh)
                return fresh
            }, take: { fresh in
                let found = try retake(fresh)
                held = found.heldElsewhere
                return (found.taken, found.transaction)
            }, heldElsewhere: { _ in held })
        }, write: { connection, takenBack in
            guard takenBack == nil else { return try write(connection, takenBack) }
            if commits {
                try write(connection, nil)
                throw try cut(connection, from: admin)
            }
            _ = try cut(connection, from: admin)
            try elsewhere()
            try write(connection, nil)
            Issue.record("the write went through on a session that ended")
        }, committed: { committed += 1 }, dropConnection: {})
        let line = sink.lines.first { $0.contains("batch_recorded_again") } ?? ""
        var counts = [String: Int]()
        for series in pipeline.context.metrics.registry.expositionText().split(separator: "\n")
        where series.hasPrefix("pushd_unrecorded_outcomes_total{") && series.contains("lane=\"\(lane.rawValue)\"") {
            guard let result = series.split(separator: "result=\"").last?.split(separator: "\"").first,
                  let value = series.split(separator: " ").last.flatMap({ Double($0) }) else { continue }
            counts[String(result), default: 0] += Int(value)
        }
        return Said(line: line, counts: counts, committed: committed)
    }

    /// Four jobs of app shop.
    static func enqueueFourJobs(_ admin: PGConnection) throws {
        try admin.query("""
            INSERT INTO pushd.jobs (app, device_token, payload)
            SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"x"}}' FROM generate_series(1, 4) g
            """)
    }

    /// Four jobs claimed on `doomed`, recorded as all delivered (`record`).
    static func transactional(commits: Bool) throws -> Said {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            defer { admin.close() }
            try Self.enqueueFourJobs(admin)
            let queue = JobQueue()
            let doomed = try database.connect()
            defer { doomed.close() }
            var batch = try queue.claim(doomed, limit: 10, apps: ["shop"])
            #expect(batch.jobs.count == 4)
            #expect(batch.transaction != nil)
            let ids = batch.jobs.map(\.id)
            let said = try record(.transactional, "jobs", keys: ids, transaction: batch.transaction, doomed: doomed,
                                  database: database, commits: commits, retake: { fresh in
                let taken = try queue.retake(fresh, batch)
                let held = try queue.heldElsewhere(fresh, batch)
                batch = taken
                return .init(taken: taken.jobs.map(\.id), heldElsewhere: held, transaction: taken.transaction)
            }, write: { connection, takenBack in
                try queue.finish(connection, batch, JobOutcomes(delivered: ids).restricted(to: takenBack ?? Set(ids)))
            }, elsewhere: {
                let other = try database.connect()
                defer { other.close() }
                let theirs = try queue.claim(other, limit: 10, apps: ["shop"])
                #expect(theirs.jobs.count == 4, "the rows did not go back when the session ended")
                try queue.finish(other, theirs, JobOutcomes(delivered: theirs.jobs.map(\.id)))
            })
            #expect(try DaemonHarness.count(admin, "SELECT count(*) FROM pushd.jobs") == 0)
            return said
        }
    }

    /// Four parked targets claimed on `doomed`, recorded as all sent (`record`).
    static func parked(commits: Bool) throws -> Said {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            defer { admin.close() }
            let id = try CampaignParkedSessionLossTests.parkedCampaign(admin, count: 4)
            let store = CampaignStore()
            let doomed = try database.connect()
            defer { doomed.close() }
            let claimed = try #require(try store.claimParked(doomed, limit: 10, apps: ["shop"]))
            #expect(claimed.targets.count == 4)
            #expect(claimed.transaction != nil)
            var batch = claimed
            var outcomes = ParkedOutcomes()
            for target in claimed.targets { outcomes.sent(target) }
            let places = claimed.targets.map(\.place)
            let said = try record(.campaign, "targets", keys: places, transaction: claimed.transaction, doomed: doomed,
                                  database: database, commits: commits, retake: { fresh in
                let taken = try store.retakeParked(fresh, batch)
                let held = try store.parkedHeldElsewhere(fresh, batch, taken: taken)
                batch = taken
                return .init(taken: taken.targets.map(\.place), heldElsewhere: held, transaction: taken.transaction)
            }, write: { connection, takenBack in
                try store.settleParked(connection, batch, takenBack.map { outcomes.restricted(to: $0) } ?? outcomes)
            }, elsewhere: {
                let other = try database.connect()
                defer { other.close() }
                let theirs = try #require(try store.claimParked(other, limit: 10, apps: ["shop"]), "the targets did not go back when the session ended")
                var sent = ParkedOutcomes()
                for target in theirs.targets { sent.sent(target) }
                try store.settleParked(other, theirs, sent)
            })
            // Counted once, by whichever COMMIT went through.
            #expect(try #require(try store.campaign(admin, id: id)).sent == 4)
            return said
        }
    }

    @Test func aLostCommitThatWentThroughCountsItsJobsRecordedNotSentAgain() throws {
        let said = try Self.transactional(commits: true)
        #expect(said.counts["recorded_again"] == 4 && said.counts["sent_again", default: 0] == 0, "\(said.counts)")
        #expect(said.committed == 1)
        #expect(said.counts["unknown", default: 0] == 0, "\(said.counts)")
        #expect(said.line.contains("4 notifications APNs accepted were recorded again on a new session (4 of them by the COMMIT whose reply was lost), 0 will be sent again"), "\(said.line)")
        #expect(said.line.contains(#""claimed":4"#) && said.line.contains(#""recorded_again":4"#) && said.line.contains(#""sent_again":0"#), "\(said.line)")
    }

    @Test func aCommitThatDidNotGoThroughCountsTheJobsAnotherClaimerSettledAsSentAgain() throws {
        let said = try Self.transactional(commits: false)
        #expect(said.counts["sent_again"] == 4 && said.counts["recorded_again", default: 0] == 0, "\(said.counts)")
        #expect(said.committed == 0)
        #expect(said.counts["unknown", default: 0] == 0, "\(said.counts)")
        #expect(said.line.contains("0 notifications APNs accepted were recorded again on a new session, 4 will be sent again"), "\(said.line)")
        #expect(said.line.contains(#""claimed":4"#) && said.line.contains(#""recorded_again":0"#) && said.line.contains(#""sent_again":4"#), "\(said.line)")
    }

    @Test func aLostCommitThatWentThroughCountsItsParkedTargetsRecordedNotSentAgain() throws {
        let said = try Self.parked(commits: true)
        #expect(said.counts["recorded_again"] == 4 && said.counts["sent_again", default: 0] == 0, "\(said.counts)")
        #expect(said.committed == 1)
        #expect(said.line.contains(#""lane":"campaign""#) && said.line.contains(#""claimed":4"#) && said.line.contains(#""recorded_again":4"#), "\(said.line)")
    }

    @Test func aCommitThatDidNotGoThroughCountsTheParkedTargetsAnotherClaimerSettledAsSentAgain() throws {
        let said = try Self.parked(commits: false)
        #expect(said.counts["sent_again"] == 4 && said.counts["recorded_again", default: 0] == 0, "\(said.counts)")
        #expect(said.committed == 0)
        #expect(said.line.contains(#""lane":"campaign""#) && said.line.contains(#""claimed":4"#) && said.line.contains(#""sent_again":4"#), "\(said.line)")
    }

    /// A batch's session cut in the network where the server does not notice (a frozen relay
    /// keeps the client's close from it), while its answers are awaited (`keep`) or while its
    /// outcomes are written: its transaction still runs and holds the jobs, and PostgreSQL says
    /// "in progress". pushd ends that transaction before it takes the batch back, finds the jobs
    /// back and records their outcomes once, rather than leaving them to be sent again when the
    /// server ends the session by itself.
    @Test(arguments: [false, true])
    func aTransactionStillRunningAfterItsSessionWasCutIsEndedAndItsJobsRecordedOnce(whileWriting: Bool) throws {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            defer { admin.close() }
            try Self.enqueueFourJobs(admin)
            let (proxy, relayed) = try FreezableProxy.relaying(database)
            defer { proxy.stop() }
            let doomed = try QueueSession.connect(url: relayed, applicationName: "pushd-tests-cut")
            let queue = JobQueue()
            var batch = try queue.claim(doomed, limit: 10, apps: ["shop"])
            #expect(batch.jobs.count == 4)
            let ids = batch.jobs.map(\.id)
            let harness = try DaemonHarness(database: database)
            let sink = MemoryLogSink()
            let pipeline = try harness.pipeline(log: sink)
            let recorder = SentBatchRecorder<Int64>(context: pipeline.context, lane: .transactional, worker: 0, rows: "jobs", backIn: "the queue")
            var claim = SentBatchClaim(held: ids, connection: doomed, transaction: batch.transaction)
            var sessions = [PGConnection]()
            defer { sessions.forEach { $0.close() } }
            let retake = { (claim: inout SentBatchClaim<Int64>) throws in
                let claimed = batch
                try recorder.retake(&claim, connect: {
                    let fresh = try database.connect()
                    sessions.append(fresh)
                    return fresh
                }, take: { fresh in
                    batch = try queue.retake(fresh, claimed)
                    return (batch.jobs.map(\.id), batch.transaction)
                }, heldElsewhere: { fresh in try queue.heldElsewhere(fresh, claimed) })
            }
            if !whileWriting {
                proxy.freeze()
                doomed.close()
                recorder.keep(&claim, retake: retake)
                #expect(claim.connection != nil, "the batch was not taken back between answers")
            }
            _ = try recorder.record(&claim, accepted: Set(ids), retake: retake, write: { connection, takenBack in
                guard let takenBack else {
                    proxy.freeze()
                    connection.close()
                    try connection.checkSession()
                    return
                }
                try queue.finish(connection, batch, JobOutcomes(delivered: ids).restricted(to: takenBack))
            }, dropConnection: {})
            #expect(try DaemonHarness.count(admin, "SELECT count(*) FROM pushd.jobs") == 0, "the jobs are still held or back in the queue")
            let exposition = pipeline.context.metrics.registry.expositionText()
            let outcomes = exposition.split(separator: "\n").filter { $0.hasPrefix("pushd_unrecorded_outcomes_total{") && !$0.hasSuffix(" 0") }
            #expect(outcomes.count == 1 && outcomes.allSatisfy { $0.contains(#"result="recorded_again""#) && $0.hasSuffix(" 4") }, "\(outcomes)")
            // A session closed here (the stall watch, or a statement after the loss) is a connection reason.
            #expect(outcomes.allSatisfy { $0.contains(#"reason="connection""#) }, "\(outcomes)")
            #expect(exposition.contains(#"pushd_stale_transactions_total{lane="transactional",result="aborted"} 1"#), "\(exposition)")
            let line = sink.lines.first { $0.contains("stale_transaction_ended") } ?? ""
            #expect(line.contains("was still running on the database server after its session ended") && line.contains("ended it (backend "), "\(line)")
        }
    }

    /// A batch whose session ends during its COMMIT (which went through, its reply lost) when
    /// pushd is stopping, given up after one retake. With no new session to be had, PostgreSQL
    /// cannot be asked: its notifications were counted `given_up` and said to be sent again,
    /// though that COMMIT had recorded them; they are in doubt, `unknown`, and the line says
    /// either. With a new session that asked what became of the transaction before the retake
    /// failed (`asked`), they were still told in doubt; they are recorded by that COMMIT,
    /// `recorded_again`.
    @Test(arguments: [false, true])
    func aBatchGivenUpRightAfterItsSessionEndedDuringTheCommitIsRecordedOrInDoubtNeverGivenUp(asked: Bool) throws {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            defer { admin.close() }
            try Self.enqueueFourJobs(admin)
            let queue = JobQueue()
            let doomed = try database.connect()
            defer { doomed.close() }
            let batch = try queue.claim(doomed, limit: 10, apps: ["shop"])
            let ids = batch.jobs.map(\.id)
            #expect(ids.count == 4)
            let harness = try DaemonHarness(database: database)
            let sink = MemoryLogSink()
            let pipeline = try harness.pipeline(log: sink)
            let recorder = SentBatchRecorder<Int64>(context: pipeline.context, lane: .transactional, worker: 0, rows: "jobs", backIn: "the queue")
            var claim = SentBatchClaim(held: ids, connection: doomed, transaction: batch.transaction)
            var fresh: PGConnection?
            defer { fresh?.close() }
            var committed = 0
            #expect(throws: PGError.self) {
                _ = try recorder.record(&claim, accepted: Set(ids), retake: { claim in
                    guard asked else { throw PGError(code: .connectionFailure, message: "could not connect: the database is away") }
                    try recorder.retake(&claim, connect: {
                        let connection = try database.connect()
                        fresh = connection
                        return connection
                    }, take: { _ in
                        throw PGError(code: .connectionFailure, message: "server closed the connection unexpectedly")
                    }, heldElsewhere: { _ in [] })
                }, write: { connection, _ in
                    try queue.finish(connection, batch, JobOutcomes(delivered: ids))
                    pipeline.context.stopping.store(true, ordering: .relaxed)
                    throw try Self.cut(connection, from: admin)
                }, committed: { committed += 1 }, dropConnection: {})
            }
            // Known to have committed only when a new session asked.
            #expect(committed == (asked ? 1 : 0))
            // The COMMIT went through: nothing is sent again.
            #expect(try DaemonHarness.count(admin, "SELECT count(*) FROM pushd.jobs") == 0)
            let outcomes = pipeline.context.metrics.registry.expositionText().split(separator: "\n")
                .filter { $0.hasPrefix("pushd_unrecorded_outcomes_total{") && !$0.hasSuffix(" 0") }
            let result = asked ? "recorded_again" : "unknown"
            #expect(outcomes.count == 1 && outcomes.allSatisfy { $0.contains("result=\"\(result)\"") && $0.hasSuffix(" 4") }, "\(outcomes)")
            let line = sink.lines.first { $0.contains("batch_outcomes_given_up") } ?? ""
            #expect(line.contains("0 notifications APNs accepted will be sent again") && line.contains(#""given_up":0"#), "\(line)")
            if asked {
                #expect(line.contains("4 more were recorded by a COMMIT whose reply was lost") && !line.contains("no session has been able to ask")
                        && line.contains(#""unknown":0"#), "\(line)")
            } else {
                #expect(line.contains("either recorded by that COMMIT or will be sent again") && line.contains(#""unknown":4"#), "\(line)")
            }
        }
    }

    /// A batch of jobs answered BadDeviceToken whose COMMIT went through with its reply lost
    /// (the database's session cut right after it). Its prunes are written: they were neither
    /// counted in `pushd_tokens_pruned_total` nor told to the BadDeviceToken breaker, so when
    /// the run of such answers tripped (tokens of the other environment), the prunes of that
    /// batch stayed while the run's others were restored. Now both count them.
    @Test func prunesOfABatchWhoseCommitReplyWasLostAreCountedAndRestoredWithTheirRun() throws {
        let tokens = (1...12).map { DaemonHarness.token(90_000 + $0) }
        let limit = 8
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(badDeviceTokens: Set(tokens)))
            let admin = try database.connect()
            defer { admin.close() }
            try NotForTopicTests.register(admin, tokens)
            let (proxy, proxied) = try FreezableProxy.relaying(database)
            defer { proxy.stop() }
            let path = try harness.writeConfigFile(appending: "tokens:\n  bad_device_token_limit: \(limit)")
            try FreezableProxy.route(config: path, of: database, to: proxied)
            // The first transaction to write a BadDeviceToken outcome is the batch's.
            proxy.loseCommitReply(after: "BadDeviceToken")
            let daemon = try TLSFailurePausesAppTests.Daemon(config: path, log: harness.directory + "/pushd.log")
            func enqueue(_ tokens: ArraySlice<String>) throws {
                try admin.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', t, '{"aps":{"alert":"hi"}}' FROM unnest($1::text[]) t
                    """, [Array(tokens)])
            }
            let pruned = "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL"

            // Four dead tokens, as far as anyone can tell yet: pruned, by a COMMIT whose reply was lost.
            try enqueue(tokens.prefix(4))
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(admin, "SELECT count(*) FROM pushd.jobs") == 0 && DaemonHarness.count(admin, pruned) == 4
            }, "\(daemon.text.suffix(3000))")
            #expect(proxy.commitRepliesLost == 1)
            // None of them was accepted: none is recorded again or sent again.
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.text.split(separator: "\n").contains { $0.contains("\"event\":\"batch_recorded_again\"") && $0.contains("in statement: COMMIT")
                    && $0.contains(#""claimed":4,"recorded_again":0,"sent_again":0"#) }
            }, "\(daemon.text.suffix(3000))")
            var metrics = ""
            #expect(DaemonHarness.wait(seconds: 10) {
                metrics = daemon.metrics()
                return PruneCountersTests.total(metrics, "pushd_tokens_pruned_total") == 4
            }, "\(metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_tokens_pruned_total") })")

            // More of them: a run of the other environment's tokens. Every prune is restored,
            // those four too.
            try enqueue(tokens.dropFirst(4))
            #expect(try DaemonHarness.wait(seconds: 30) {
                try DaemonHarness.count(admin, "SELECT count(*) FROM pushd.jobs") == 0
            }, "\(daemon.text.suffix(3000))")
            #expect(DaemonHarness.wait(seconds: 10) { daemon.text.contains("\"event\":\"bad_device_token_run\"") }, "\(daemon.text.suffix(3000))")
            var maxInvalidated = 0
            let stillPruned = try NotForTopicTests.waitUntilNonePruned(admin, maxInvalidated: &maxInvalidated)
            #expect(stillPruned == 0, "\(stillPruned) still pruned: \(daemon.text.suffix(3000))")
            #expect(DaemonHarness.wait(seconds: 10) {
                metrics = daemon.metrics()
                return PruneCountersTests.total(metrics, "pushd_tokens_restored_total") >= 4
            }, "\(metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_tokens_restored_total") })")
        }
    }

    /// A campaign chunk's prunes are written by a transaction of their own at its checkpoint or
    /// its release. When the session ended during that COMMIT and the COMMIT went through, the
    /// tokens were pruned and nothing counted them (not the campaign's `pruned`, not
    /// `pushd_tokens_pruned_total`, not the breaker of a BadDeviceToken run): written again on
    /// the next session, the prune found them already pruned. Now the transaction's fate is asked
    /// first, and the prunes it wrote are counted.
    @Test func prunesOfACampaignChunkWhoseCommitReplyWasLostAreCounted() throws {
        let tokens = (1...4).map { DaemonHarness.token(91_000 + $0) }
        // The first statement to carry a BadDeviceToken prune is the chunk's.
        try Self.campaignLosingACommitReply(tokens: tokens, faults: FaultConfiguration(badDeviceTokens: Set(tokens)), registered: true,
                                            after: "BadDeviceToken") { (sent: CampaignSent) throws in
            #expect(try DaemonHarness.count(sent.admin, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL") == 4)
            #expect(sent.done.pruned == 4 && sent.done.failedByReason == ["BadDeviceToken": 4], "pruned \(sent.done.pruned), \(sent.done.failedByReason)")
            var metrics = ""
            #expect(DaemonHarness.wait(seconds: 10) {
                metrics = sent.daemon.metrics()
                return PruneCountersTests.total(metrics, "pushd_tokens_pruned_total") == 4
            }, "\(metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_tokens_pruned_total") })")
            // Said once, when the new session learned it (the 4 prunes may be written by a
            // checkpoint and the release, when the connections take long to set up).
            #expect(sent.inDoubt.count == 1 && sent.inDoubt.allSatisfy { $0.contains(#""result":"committed""#) && $0.contains("lost its session during its COMMIT") },
                    "\(sent.daemon.text.suffix(3000))")
        }
    }

    /// A chunk's checkpoint adds what was answered since the last one to its campaign's
    /// counters. When the session ended while it committed and the COMMIT went through, the run
    /// kept those answers and wrote them again with its next write: counted twice (a campaign of
    /// 20 targets reported more than 20 sent). Now the checkpoint's transaction is asked after,
    /// and what it wrote is taken off the run's progress.
    @Test func aCheckpointWhoseCommitReplyWasLostIsNotCountedTwice() throws {
        let tokens = (1...20).map { DaemonHarness.token(92_000 + $0) }
        // 5 a second: the chunk checkpoints (every second with the harness's 3 s lease) while it
        // sends. The marker is the mode parameter of a checkpoint's write, as the protocol
        // carries a text parameter (its length first): the first checkpoint's COMMIT.
        try Self.campaignLosingACommitReply(tokens: tokens, rateLimit: 5, after: "\u{0}\u{0}\u{0}\u{0A}checkpoint", seconds: 40) { (sent: CampaignSent) throws in
            #expect(tokens.allSatisfy { sent.harness.mock.stats.perToken[$0]?.accepted == 1 },
                    "\(tokens.filter { sent.harness.mock.stats.perToken[$0]?.accepted != 1 }.map { ($0.suffix(6), sent.harness.mock.stats.perToken[$0]?.accepted ?? 0) })")
            #expect(sent.done.sent == tokens.count && sent.done.failed == 0, "sent \(sent.done.sent), failed \(sent.done.failed) of \(tokens.count)")
            #expect(sent.inDoubt.count == 1 && sent.inDoubt.allSatisfy { $0.contains(#""result":"committed""#) && $0.contains(#""record":"checkpoint""#) },
                    "\(sent.daemon.text.suffix(3000))")
        }
    }

    /// A chunk's finish that committed with its reply lost was written again on the next
    /// session, found the chunk finished, and took that for a lease another worker had taken
    /// over: a "lost the lease" warning (nothing was sent again), the chunk's targets missing
    /// from `pushd_campaign_targets_processed_total`, and the campaign's "finished" line never
    /// written. Now its fate is asked and the finish told as if it had been answered.
    @Test func aFinishWhoseCommitReplyWasLostIsToldAsFinished() throws {
        let tokens = (1...4).map { DaemonHarness.token(93_000 + $0) }
        // The mode parameter of a finish's write (length-prefixed, as the protocol carries it).
        try Self.campaignLosingACommitReply(tokens: tokens, after: "\u{0}\u{0}\u{0}\u{06}finish") { (sent: CampaignSent) throws in
            #expect(sent.done.sent == tokens.count && sent.done.failed == 0, "sent \(sent.done.sent), failed \(sent.done.failed) of \(tokens.count)")
            var metrics = ""
            #expect(DaemonHarness.wait(seconds: 10) {
                metrics = sent.daemon.metrics()
                return metrics.contains(#"pushd_campaign_targets_processed_total{app="shop",status="sent"} 4"#)
            }, "\(metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_campaign_targets_processed_total") })")
            #expect(DaemonHarness.wait(seconds: 10) { sent.daemon.text.contains("\"event\":\"campaign_finished\"") }, "\(sent.daemon.text.suffix(3000))")
            #expect(!sent.daemon.text.contains("lost the lease of chunk"), "\(sent.daemon.text.suffix(3000))")
            #expect(sent.inDoubt.count == 1 && sent.inDoubt.allSatisfy { $0.contains(#""result":"committed""#) && $0.contains(#""record":"finish""#) },
                    "\(sent.daemon.text.suffix(3000))")
        }
    }

    /// A campaign sent by the real `pushd` whose database is behind a relay.
    struct CampaignSent {
        let harness: DaemonHarness
        let admin: PGConnection
        let daemon: TLSFailurePausesAppTests.Daemon
        /// The campaign once done.
        let done: Campaign
        /// The daemon's `campaign_write_in_doubt` lines.
        var inDoubt: [Substring] { daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"campaign_write_in_doubt\"") } }
    }

    /// Sends a campaign of `tokens` (registered in sandbox first with `registered`) through
    /// `pushd` on a relay to PostgreSQL that loses the reply to the COMMIT of the first
    /// transaction carrying `marker` (`FreezableProxy.loseCommitReply`), and hands `check` the
    /// campaign once it is done, that reply having been lost.
    static func campaignLosingACommitReply(tokens: [String], faults: FaultConfiguration = FaultConfiguration(), registered: Bool = false,
                                           rateLimit: Int? = nil, after marker: String, seconds: Double = 30,
                                           appending extra: String = "", _ check: (CampaignSent) throws -> Void) throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: faults)
            let admin = try database.connect()
            defer { admin.close() }
            if registered { try NotForTopicTests.register(admin, tokens) }
            let (proxy, proxied) = try FreezableProxy.relaying(database)
            defer { proxy.stop() }
            let path = try harness.writeConfigFile(appending: extra)
            try FreezableProxy.route(config: path, of: database, to: proxied)
            let store = CampaignStore()
            let campaign = try store.create(admin, NewCampaign(app: "shop", name: "lost reply", pushType: "alert",
                                                               payload: #"{"aps":{"alert":"sale"}}"#, rateLimit: rateLimit))
            _ = try store.importTargets(admin, campaignID: campaign, targets: tokens.map { (token: $0, payload: String?.none) })
            _ = try store.start(admin, id: campaign)
            proxy.loseCommitReply(after: marker)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: path, log: harness.directory + "/pushd.log")
            #expect(try DaemonHarness.wait(seconds: seconds) { try store.campaign(admin, id: campaign)?.status == .done }, "\(daemon.text.suffix(3000))")
            #expect(proxy.commitRepliesLost == 1)
            try check(CampaignSent(harness: harness, admin: admin, daemon: daemon, done: try #require(try store.campaign(admin, id: campaign))))
        }
    }

    /// A chunk's lease whose reply is lost as it commits (the session cut): the chunk is leased
    /// to the worker, which never learnt it. It sat leased to nobody for `lease_s` and was then
    /// taken over from that live worker, with a warning that it had died (`chunk_taken_over`)
    /// and a count in `pushd_lease_takeovers_total`. The marker is the worker's name (the
    /// instance's, then `/campaign-` and the worker's number), a parameter of the lease alone
    /// before it holds a chunk.
    @Test func aLeaseWhoseReplyWasLostIsGivenBackNotTakenOver() throws {
        let tokens = (1...4).map { DaemonHarness.token(700 + $0) }
        try Self.campaignLosingACommitReply(tokens: tokens, after: "/campaign-", appending: "workers:\n  campaign: 1\n") { sent in
            #expect(sent.done.sent == 4 && sent.done.failed == 0)
            #expect(sent.harness.mock.stats.accepted == 4)
            let text = sent.daemon.text
            #expect(!text.contains("chunk_taken_over"), "\(text.suffix(3000))")
            #expect(DaemonHarness.wait(seconds: 5) { sent.daemon.text.contains(#""event":"campaign_lease_given_back""#) },
                    "\(text.suffix(3000))")
            #expect(!sent.daemon.metrics().contains("pushd_lease_takeovers_total{"), "\(sent.daemon.metrics())")
        }
    }

    /// A broadcast job's claim whose reply is lost as it commits (the session cut): the job is
    /// claimed under the broadcast worker's name without the worker knowing. It sat for the
    /// claim's lease (the answer wait and 30 s) and was then taken over from that live worker
    /// with a warning that it may have reached APNs (`broadcast_taken_over`) and a count in
    /// `pushd_lease_takeovers_total`. The marker is the name the broadcast claim gives its rows
    /// (the instance's, then `/broadcasts`), a parameter of that claim alone.
    @Test func aBroadcastClaimWhoseReplyWasLostIsGivenBackNotTakenOver() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let admin = try database.connect()
            defer { admin.close() }
            let channel = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            let (proxy, proxied) = try FreezableProxy.relaying(database)
            defer { proxy.stop() }
            let path = try harness.writeConfigFile()
            try FreezableProxy.route(config: path, of: database, to: proxied)
            try admin.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', $1, $2)", [channel, BroadcastDaemonTests.update])
            proxy.loseCommitReply(after: "/broadcasts")
            let daemon = try TLSFailurePausesAppTests.Daemon(config: path, log: harness.directory + "/pushd.log")
            // Well inside the claim's lease: the job is given back on the worker's next session.
            #expect(try DaemonHarness.wait(seconds: 25) {
                try DaemonHarness.count(admin, "SELECT count(*) FROM pushd.broadcast_jobs") == 0
            }, "\(daemon.text.suffix(3000))")
            #expect(proxy.commitRepliesLost == 1)
            #expect(harness.mock.stats.broadcastsAccepted[channel] == 1)
            let text = daemon.text
            #expect(!text.contains("broadcast_taken_over"), "\(text.suffix(3000))")
            #expect(DaemonHarness.wait(seconds: 5) { daemon.text.contains(#""event":"broadcast_claim_given_back""#) }, "\(text.suffix(3000))")
            #expect(!daemon.metrics().contains("pushd_lease_takeovers_total{"), "\(daemon.metrics())")
        }
    }

    /// The store's answer for each fate a transaction can have when asked from another session.
    @Test func theFateOfATransactionIsAskedOfTheServer() throws {
        try IsolatedDatabase.with { database in
            let asker = try database.connect()
            let running = try database.connect()
            defer { asker.close(); running.close() }
            func current(_ connection: PGConnection) throws -> Int64 {
                try connection.query("SELECT \(TransactionFate.currentIDSQL)").require(row: 0, column: 0)
            }
            try running.execute(script: "BEGIN")
            let open = try current(running)
            #expect(try TransactionFate.fate(of: open, on: asker) == .inProgress)
            try running.execute(script: "COMMIT")
            #expect(try TransactionFate.fate(of: open, on: asker) == .committed)
            try running.execute(script: "BEGIN")
            let undone = try current(running)
            try running.execute(script: "ROLLBACK")
            #expect(try TransactionFate.fate(of: undone, on: asker) == .aborted)
            // An id this server has not given out yet (the old primary's, after a failover to a
            // replica that had not caught up) is refused by pg_xact_status: unknown, and the
            // asker's own transaction, where a retake asks, goes on.
            try asker.execute(script: "BEGIN")
            #expect(try TransactionFate.fate(of: undone + 1_000_000, on: asker) == .unknown)
            #expect(try asker.query("SELECT 1").require(Int64.self, row: 0, column: 0) == 1)
            try asker.execute(script: "COMMIT")
        }
    }
}
