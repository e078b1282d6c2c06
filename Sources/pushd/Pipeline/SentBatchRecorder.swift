import Glibc
import QueueStore

/// A sent batch and the session whose open transaction holds its claim: the transactional
/// lane's jobs (deleted by the claim) and the campaign lane's parked targets (locked by it).
/// When the session ends before the batch's outcomes are committed (cut while answers are
/// awaited, or while they are recorded, or a COMMIT that fails), the rows are back as the claim
/// found them, for any claimer. The worker knows what APNs answered for each, so it takes back on
/// a new session those no other claimer has taken meanwhile and records the same outcomes for
/// them (`SentBatchRecorder`); the others are sent again by that claimer. `Key` names a row.
struct SentBatchClaim<Key: Hashable> {
    /// The rows the open transaction holds (after a retake, those it took back).
    var held: [Key]
    /// nil once the session ended, until the rows are taken back on a new one.
    var connection: PGConnection?
    /// The id of the transaction that holds `held` (`TransactionFate`): asked about on a new
    /// session when its session ends while it writes their outcomes.
    var transaction: Int64?
    /// The transactions that may hold rows of the batch, and the backends running them: the
    /// claim's, then each retake's from the moment it took rows (a retake's session may be cut
    /// before the rows are sorted). What `SentBatchRecorder.endStaleTransactions` ends.
    var holders: [TransactionHolder]
    /// What ended the first session, once one ended.
    var cause: (any Error)?
    /// A connection loss that ended one of its sessions (a retake's may end too), kept until a
    /// retake sorts the rows: a later error the server answered does not hide it.
    var cutBy: (any Error)?
    /// Whether it ended while the outcomes of `held` were being written: the COMMIT may have
    /// gone through with only its reply lost. Until the retake that asks whether it did.
    var lostWhileRecording = false
    /// Whether that write ended with the session during its COMMIT (or where it is not known at
    /// which statement; not an error the server answered, which rolled it back): the COMMIT may
    /// have gone through, and a batch given up before a new session could ask
    /// (`TransactionFate`) is recorded or sent again, not known which.
    var commitInDoubt = false
    /// What became of that transaction, once a new session learned it was committed or rolled
    /// back before the retake (`learned`); until the retake.
    var writerFate: TransactionFate?
    /// Whether a retake found that the transaction writing the outcomes committed with only its
    /// reply lost: what that write did is done, and `SentBatchRecorder.record` says so once.
    var writerCommitted = false
    /// Rows of the batch another claimer holds, to send them again.
    var sentAgain = [Key]()
    /// Rows of the batch settled since the claim by another claimer, which sent them again: the
    /// claim's own transaction never wrote them, or it was rolled back.
    var settledElsewhere = [Key]()
    /// Rows settled by the claim's own COMMIT, whose reply was lost (`TransactionFate.committed`):
    /// recorded once, not sent again.
    var committed = [Key]()
    /// Rows not taken back whose outcome is not known: the transaction that was writing them was
    /// still running, or its status unknown, when asked on the new session. Either its COMMIT
    /// recorded them, or they are back (and sent again); PostgreSQL could not say which.
    var undetermined = [Key]()
    /// What the new sessions said of the transactions that ended while writing, in order.
    var fates = [TransactionFate]()
    /// How many rows the batch had when claimed.
    let claimed: Int

    init(held: [Key], connection: PGConnection, transaction: Int64?) {
        self.held = held
        self.connection = connection
        self.transaction = transaction
        holders = transaction.map { [TransactionHolder(transaction: $0, backend: connection.backendPID)] } ?? []
        claimed = held.count
    }

    /// What became of `transaction` was asked after its session ended (`endStaleTransactions`).
    /// When it is the one that was writing the outcomes of `held`, the answer is kept
    /// (`writerFate`) for the retake to sort the rows by, and a batch given up before the retake
    /// is done is not told in doubt: committed, its rows are recorded; rolled back, they are
    /// back and sent again.
    mutating func learned(_ fate: TransactionFate, of transaction: Int64) {
        guard lostWhileRecording, transaction == self.transaction, fate == .committed || fate == .aborted else { return }
        writerFate = fate
        commitInDoubt = false
    }

    /// A retake on `connection` took rows in `transaction`.
    mutating func took(_ transaction: Int64?, on connection: PGConnection) {
        if let transaction { holders.append(TransactionHolder(transaction: transaction, backend: connection.backendPID)) }
    }

    mutating func lost(_ error: any Error) {
        if cause == nil { cause = error }
        if let code = (error as? PGError)?.code, code.isConnectionLoss || code == .connectionClosed { cutBy = error }
        connection = nil
    }
}

/// A transaction that holds rows of a sent batch, and the backend (pid) that runs it.
struct TransactionHolder: Equatable {
    let transaction: Int64
    let backend: Int32
}

/// What a worker of `lane` does with a sent batch whose session may end (`SentBatchClaim`): the
/// rules, the log lines and the counts are the same for every lane; the store calls are the lane's.
struct SentBatchRecorder<Key: Hashable> {
    let context: PipelineContext
    let lane: Lane
    let worker: Int
    /// What a row is called in log lines ("jobs", "targets").
    let rows: String
    /// Where a row not taken back is ("the queue", "their parked retries").
    let backIn: String
    /// Tells the worker's watchdog, if it has one, that the worker is alive while it tries again.
    var beat: () -> Void = {}

    /// What a retake on a new session found: the rows taken back, those another claimer holds,
    /// and the id of the transaction that holds the rows taken back.
    struct Retaken {
        var taken: [Key]
        var heldElsewhere: Set<Key>
        var transaction: Int64?
    }

    /// Between answers: a session that ended is noticed here, and the batch taken back at once,
    /// before other claimers take its rows (they back off before reconnecting). A failed attempt
    /// is left for `record`, which tries again.
    func keep(_ claim: inout SentBatchClaim<Key>, retake: (inout SentBatchClaim<Key>) throws -> Void) {
        guard let connection = claim.connection else { return }
        do {
            try connection.checkSession()
        } catch {
            context.databaseError(error)
            claim.lost(error)
            do {
                try retake(&claim)
            } catch {
                context.databaseError(error)
            }
        }
    }

    /// Takes `claim`'s rows back on a new session (`connect`), as the lane's store does: `take`
    /// takes back what no other claimer has taken (the rows and the id of the transaction that
    /// now holds them), `heldElsewhere` names the rows another claimer's transaction holds.
    /// Transactions of the claim still running on the server are ended first
    /// (`endStaleTransactions`); the rows are then sorted (`retaken`).
    func retake(_ claim: inout SentBatchClaim<Key>, connect: () throws -> PGConnection,
                take: (PGConnection) throws -> (taken: [Key], transaction: Int64?),
                heldElsewhere: (PGConnection) throws -> Set<Key>) throws {
        let fresh = try connect()
        try endStaleTransactions(of: &claim, on: fresh)
        let taken = try take(fresh)
        claim.took(taken.transaction, on: fresh)
        let held = try heldElsewhere(fresh)
        try retaken(&claim, Retaken(taken: taken.taken, heldElsewhere: held, transaction: taken.transaction), on: fresh)
    }

    /// Before a retake on `fresh`, once a session of the batch was lost (cut, or closed by its
    /// stall watch; not closed after an error the server answered): a transaction of the claim may still run on the
    /// database server, its session cut in the network where the server has not noticed. It
    /// then holds the batch's rows (the retake would skip them, and they would go back to be
    /// sent again when TCP keepalive or `idle_in_transaction_session_timeout` ended it) and may
    /// yet commit a COMMIT in flight, which PostgreSQL cannot say while it runs. It is ended
    /// (`TransactionFate.endRunning`, on the backend that ran it), so that the retake finds its
    /// rows back, or settled by its COMMIT; one warning line and
    /// `pushd_stale_transactions_total` tell what it became.
    func endStaleTransactions(of claim: inout SentBatchClaim<Key>, on fresh: PGConnection) throws {
        guard let cause = claim.cutBy else { return }
        for holder in claim.holders {
            // Up to 5.5 s each (`endRunning`'s wait): alive all the while.
            beat()
            var fate = try TransactionFate.fate(of: holder.transaction, on: fresh)
            // A session closed here (a retake's, given up) is still exiting for a moment.
            var exiting = 0
            while fate == .inProgress && exiting < 5 {
                exiting += 1
                usleep(100_000)
                fate = try TransactionFate.fate(of: holder.transaction, on: fresh)
            }
            if fate != .inProgress {
                claim.learned(fate, of: holder.transaction)
                continue
            }
            let ending = try TransactionFate.endRunning(holder.transaction, backend: holder.backend, on: fresh)
            fate = try TransactionFate.fate(of: holder.transaction, on: fresh)
            claim.learned(fate, of: holder.transaction)
            // It ended by itself meanwhile: nothing to tell.
            if !ending.signalled && fate != .inProgress { continue }
            let tried: String
            switch ending {
            case .ended: tried = "ended it (backend \(holder.backend))"
            case .notExited(let wait): tried = "told its backend \(holder.backend) to end, which had not exited \(wait) ms later"
            case .notFound: tried = "found no backend running it to end"
            case .refused(let error): tried = "the server refused to end its backend \(holder.backend) (\(error))"
            }
            let became: String
            switch fate {
            case .committed: became = "its COMMIT had gone through: the outcomes are recorded"
            case .aborted: became = "it was rolled back: its \(rows) are back, to be taken back and their outcomes recorded again"
            case .inProgress: became = "it still runs: its \(rows) are sent again once it ends"
            case .unknown: became = "the server could not say what became of it: its \(rows) may be sent again"
            }
            let result = fate == .committed || fate == .aborted ? fate.rawValue : "running"
            context.metrics.staleTransaction(lane: lane.rawValue, result: result).increment()
            context.logger.warning("\(lane.rawValue) worker \(worker): the transaction holding a batch of \(claim.claimed) sent \(rows) was still running on the database server after its session ended (\(cause)), as when the network drops a session without the server noticing; \(tried): \(became)",
                                   ("event", "stale_transaction_ended"), ("lane", .string(lane.rawValue)), ("worker", .int(Int64(worker))),
                                   ("claimed", .int(Int64(claim.claimed))), ("backend", .int(Int64(holder.backend))), ("result", .string(result)))
        }
    }

    /// Sorts the rows of `claim` by what a retake on `fresh` found. A row not taken back was
    /// settled since the claim, or is held by another claimer: when the session ended while the
    /// outcomes were being written, `fresh` is asked whether that transaction committed
    /// (`TransactionFate`). Committed, it settled every row it held, and none is sent again;
    /// rolled back (or never writing), another claimer took those rows and sends them again;
    /// still running or unknown, which of the two is not known, and they are counted so. Asked
    /// after the retake: a transaction still running then held its rows, and whatever it became
    /// since decides them all.
    func retaken(_ claim: inout SentBatchClaim<Key>, _ found: Retaken, on fresh: PGConnection) throws {
        var fate: TransactionFate?
        if claim.lostWhileRecording {
            fate = try claim.writerFate ?? claim.transaction.map { try TransactionFate.fate(of: $0, on: fresh) } ?? .unknown
        }
        let taken = Set(found.taken)
        for key in claim.held where !taken.contains(key) {
            switch fate {
            case .committed: claim.committed.append(key)
            case .inProgress, .unknown: claim.undetermined.append(key)
            case .aborted, nil:
                if found.heldElsewhere.contains(key) { claim.sentAgain.append(key) } else { claim.settledElsewhere.append(key) }
            }
        }
        if let fate { claim.fates.append(fate) }
        if fate == .committed { claim.writerCommitted = true }
        claim.held = found.taken
        claim.transaction = found.transaction
        claim.holders = found.transaction.map { [TransactionHolder(transaction: $0, backend: fresh.backendPID)] } ?? []
        claim.cutBy = nil
        claim.lostWhileRecording = false
        claim.commitInDoubt = false
        claim.writerFate = nil
        claim.connection = fresh
    }

    /// Writes the outcomes of a sent batch with `write` (given the rows taken back after the
    /// session ended, nil before) and returns the session that holds the worker's connection now.
    /// When the session ends or the write fails, the outcomes are kept and written again on a new
    /// session for the rows taken back (`retake`), for up to `SentBatchTiming.recordAgainSeconds`
    /// (once more only for an error that is not transient); then (at once for an error that is
    /// not the database's) they are given up, loudly, and the error is thrown for the worker's
    /// loop, which counts it in `pushd_database_errors_total`. `accepted`: the rows APNs accepted.
    ///
    /// `committed` is called once for the attempt of `write` whose transaction committed: when
    /// `write` returns, or when a new session learns that the attempt whose session ended during
    /// its COMMIT committed with only the reply lost (at the retake, or when the batch is given
    /// up after asking). What that attempt wrote besides the rows' outcomes (prunes) is then done
    /// and is counted; an attempt that was rolled back is never named.
    func record(_ claim: inout SentBatchClaim<Key>, accepted: Set<Key>,
                retake: (inout SentBatchClaim<Key>) throws -> Void,
                write: (PGConnection, Set<Key>?) throws -> Void,
                committed: () -> Void = {},
                dropConnection: () -> Void) throws -> PGConnection {
        let started = RateLimiter.monotonicSeconds()
        var attempts = 0
        while true {
            beat()
            var writing = false
            do {
                if claim.connection == nil {
                    try retake(&claim)
                    if claim.writerCommitted {
                        claim.writerCommitted = false
                        committed()
                    }
                }
                guard let connection = claim.connection else { throw QueueError("no session holds the batch") }
                if !claim.held.isEmpty {
                    writing = true
                    try write(connection, claim.cause == nil ? nil : Set(claim.held))
                    committed()
                }
                if let cause = claim.cause { reportRecordedAgain(claim, cause: cause, accepted: accepted) }
                return connection
            } catch {
                if writing {
                    claim.lostWhileRecording = true
                    // Lost at a statement before the COMMIT, the transaction never committed.
                    claim.commitInDoubt = (error as? PGError).map {
                        ($0.code.isConnectionLoss || $0.code == .connectionClosed) && ($0.statement.map { $0.hasPrefix("COMMIT") } ?? true)
                    } ?? false
                }
                claim.lost(error)
                dropConnection()
                // The worker sends nothing meanwhile: a lane that keeps failing is named by /readyz.
                context.laneHealth.failed(lane.rawValue, error: error, started: started)
                attempts += 1
                // Stopping, one more attempt (at once) before the batch is left to be sent again; an
                // error of pushd's own (outcomes that do not cover the batch) would only recur, and
                // so would a database error that is not of the server's moment (a constraint, a
                // trigger, bad data: `PGError.Code.isTransient`) once it has refused the batch taken
                // back too: retried for minutes, it held the worker while other claimers sent the
                // rows it rolled back each time.
                let transient = (error as? PGError)?.code.isTransient == true
                if !(error is PGError) || (context.isStopping && attempts >= 2) || (!transient && attempts >= 2)
                    || RateLimiter.monotonicSeconds() - started >= SentBatchTiming.recordAgainSeconds {
                    // A new session learned the lost COMMIT went through, though the retake failed.
                    if claim.writerFate == .committed { committed() }
                    reportGivenUp(claim, accepted: accepted, last: error, seconds: RateLimiter.monotonicSeconds() - started)
                    // Counted in pushd_database_errors_total by the worker's loop, which it reaches.
                    throw error
                }
                context.databaseError(error)
                // The first time at once: the sooner the batch is taken back, the fewer rows
                // another claimer has taken meanwhile.
                if attempts > 1 { context.sleepAfterDatabaseFailure(attempts - 1) }
            }
        }
    }

    /// A batch's notifications APNs accepted, by what became of them after its session ended.
    private struct Fates {
        /// Recorded on a new session, the lost COMMIT's among them.
        var recorded: Int
        /// Recorded by a COMMIT whose reply was lost.
        var lostReply: Int
        /// Held by the batch's transaction at the end: recorded by its COMMIT, or given up.
        var held: Int
        /// Sent again by the claimer that took their rows.
        var again: Int
        /// Rows of the batch, accepted or not, that other claimers took.
        var elsewhere: Int
        /// Recorded by a COMMIT whose reply was lost, or sent again: PostgreSQL could not say.
        var unknown: Int
        /// What the new sessions said of the transactions that ended while writing.
        var said: String
        /// Held by a transaction whose session ended while it wrote them, with no new session
        /// since to ask whether its COMMIT went through: recorded, or sent again.
        var inDoubt: Int

        init(_ claim: SentBatchClaim<Key>, accepted: Set<Key>) {
            let elsewhere = claim.sentAgain + claim.settledElsewhere
            lostReply = claim.committed.count { accepted.contains($0) }
            held = claim.held.count { accepted.contains($0) }
            // The transaction writing them was found committed after its session ended.
            if claim.writerFate == .committed {
                lostReply += held
                held = 0
            }
            recorded = held + lostReply
            again = elsewhere.count { accepted.contains($0) }
            self.elsewhere = elsewhere.count
            unknown = claim.undetermined.count { accepted.contains($0) }
            said = claim.fates.filter { $0 == .inProgress || $0 == .unknown }.map(\.rawValue).joined(separator: ", ")
            inDoubt = claim.commitInDoubt ? held : 0
        }

        /// What is said of the undetermined ones, if any.
        var unknownClause: String {
            unknown == 0 ? "" : "; \(unknown) more APNs accepted were either recorded by the COMMIT whose reply was lost or will be sent again, which PostgreSQL could not say (pg_xact_status of that transaction: \(said))"
        }
    }

    /// One warning line per batch whose session ended before its outcomes were committed, and
    /// the counts of `pushd_unrecorded_outcomes_total`.
    private func reportRecordedAgain(_ claim: SentBatchClaim<Key>, cause: any Error, accepted: Set<Key>) {
        let fates = Fates(claim, accepted: accepted)
        let reason = PipelineContext.databaseErrorReason(cause)
        count(fates, reason: reason, recorded: fates.recorded)
        let lostReply = fates.lostReply > 0 ? " (\(fates.lostReply) of them by the COMMIT whose reply was lost)" : ""
        context.logger.warning("\(lane.rawValue) worker \(worker): the database session of a batch of \(claim.claimed) sent \(rows) ended before their outcomes were committed (\(cause)); \(fates.recorded) notifications APNs accepted were recorded again on a new session\(lostReply), \(fates.again) will be sent again (another claimer had taken their \(rows)), \(fates.elsewhere - fates.again) other \(rows) went back to \(backIn)\(fates.unknownClause)",
                               ("event", "batch_recorded_again"), ("lane", .string(lane.rawValue)), ("worker", .int(Int64(worker))),
                               ("claimed", .int(Int64(claim.claimed))), ("recorded_again", .int(Int64(fates.recorded))),
                               ("sent_again", .int(Int64(fates.again))), ("unknown", .int(Int64(fates.unknown))), ("reason", .string(reason)))
    }

    /// The outcomes of a batch could not be recorded for `seconds` (or pushd is stopping): its
    /// rows are back as claimed and are sent again, the accepted ones too.
    private func reportGivenUp(_ claim: SentBatchClaim<Key>, accepted: Set<Key>, last: any Error, seconds: Double) {
        let fates = Fates(claim, accepted: accepted)
        let reason = PipelineContext.databaseErrorReason(claim.cause ?? last)
        count(fates, reason: reason, recorded: fates.lostReply, inDoubt: fates.inDoubt)
        let givenUp = fates.held - fates.inDoubt
        context.metrics.unrecordedOutcome(lane: lane.rawValue, reason: reason, result: "given_up").increment(by: UInt64(givenUp))
        let lostReply = fates.lostReply > 0 ? " (\(fates.lostReply) more were recorded by a COMMIT whose reply was lost)" : ""
        let inDoubt = fates.inDoubt == 0 ? "" : "; \(fates.inDoubt) more APNs accepted were being recorded when the session ended: they are either recorded by that COMMIT or will be sent again, which no session has been able to ask PostgreSQL since"
        context.logger.error("\(lane.rawValue) worker \(worker): could not record the outcomes of a batch of \(claim.claimed) sent \(rows) for \(Int(seconds))s\(context.isStopping ? " before stopping" : "") (\(claim.cause.map { "\($0)" } ?? "\(last)"); last: \(last)): \(givenUp + fates.again) notifications APNs accepted will be sent again\(lostReply)\(fates.unknownClause)\(inDoubt)",
                             ("event", "batch_outcomes_given_up"), ("lane", .string(lane.rawValue)), ("worker", .int(Int64(worker))),
                             ("claimed", .int(Int64(claim.claimed))), ("given_up", .int(Int64(givenUp))), ("sent_again", .int(Int64(fates.again))),
                             ("unknown", .int(Int64(fates.unknown + fates.inDoubt))), ("reason", .string(reason)))
    }

    /// `pushd_unrecorded_outcomes_total` of a batch but for those given up.
    private func count(_ fates: Fates, reason: String, recorded: Int, inDoubt: Int = 0) {
        for (result, count) in [("recorded_again", recorded), ("sent_again", fates.again), ("unknown", fates.unknown + inDoubt)] {
            context.metrics.unrecordedOutcome(lane: lane.rawValue, reason: reason, result: result).increment(by: UInt64(count))
        }
    }
}

/// The times of `SentBatchRecorder`, the same for every lane.
enum SentBatchTiming {
    /// How often a worker waiting on a batch's answers looks whether its session still holds the claim.
    static let sessionCheckSeconds = 0.05
    /// How long a worker keeps a batch's outcomes, and tries to record them on a new session,
    /// while the database stays away; then they are given up and the batch is sent again.
    static let recordAgainSeconds = 300.0
}
