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
    /// What ended the first session, once one ended.
    var cause: (any Error)?
    /// Whether it ended while the outcomes were being written: the COMMIT may have gone through
    /// with only its reply lost, and a row settled since the claim (gone, or written as a retry)
    /// was then settled by it.
    var lostWhileRecording = false
    /// Rows of the batch another claimer holds, to send them again.
    var sentAgain = [Key]()
    /// Rows of the batch settled since the claim, neither taken back nor held by another claimer.
    var settled = [Key]()
    /// How many rows the batch had when claimed.
    let claimed: Int

    init(held: [Key], connection: PGConnection) {
        self.held = held
        self.connection = connection
        claimed = held.count
    }

    mutating func lost(_ error: any Error) {
        if cause == nil { cause = error }
        connection = nil
    }

    /// Rows settled since the claim that another claimer settled (sent again): all of them unless
    /// the session ended while the outcomes were written, when the claim's own COMMIT settled them.
    var settledElsewhere: [Key] { lostWhileRecording ? [] : settled }
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

    /// What a retake on a new session found: the rows taken back, and those another claimer holds.
    struct Retaken {
        var taken: [Key]
        var heldElsewhere: Set<Key>
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

    /// Sorts the rows of `claim` by what a retake on `fresh` found.
    func retaken(_ claim: inout SentBatchClaim<Key>, _ found: Retaken, on fresh: PGConnection) {
        let taken = Set(found.taken)
        for key in claim.held where !taken.contains(key) {
            if found.heldElsewhere.contains(key) { claim.sentAgain.append(key) } else { claim.settled.append(key) }
        }
        claim.held = found.taken
        claim.connection = fresh
    }

    /// Writes the outcomes of a sent batch with `write` (given the rows taken back after the
    /// session ended, nil before) and returns the session that holds the worker's connection now.
    /// When the session ends or the write fails, the outcomes are kept and written again on a new
    /// session for the rows taken back (`retake`), for up to `SentBatchTiming.recordAgainSeconds`
    /// (once more only for an error that is not transient); then (at once for an error that is
    /// not the database's) they are given up, loudly, and the error is thrown for the worker's
    /// loop, which counts it in `pushd_database_errors_total`. `accepted`: the rows APNs accepted.
    func record(_ claim: inout SentBatchClaim<Key>, accepted: Set<Key>,
                retake: (inout SentBatchClaim<Key>) throws -> Void,
                write: (PGConnection, Set<Key>?) throws -> Void,
                dropConnection: () -> Void) throws -> PGConnection {
        let started = RateLimiter.monotonicSeconds()
        var attempts = 0
        while true {
            beat()
            var writing = false
            do {
                if claim.connection == nil { try retake(&claim) }
                guard let connection = claim.connection else { throw QueueError("no session holds the batch") }
                if !claim.held.isEmpty {
                    writing = true
                    try write(connection, claim.cause == nil ? nil : Set(claim.held))
                }
                if let cause = claim.cause { reportRecordedAgain(claim, cause: cause, accepted: accepted) }
                return connection
            } catch {
                if writing { claim.lostWhileRecording = true }
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

    /// One warning line per batch whose session ended before its outcomes were committed, and
    /// the counts of `pushd_unrecorded_outcomes_total`.
    private func reportRecordedAgain(_ claim: SentBatchClaim<Key>, cause: any Error, accepted: Set<Key>) {
        // Settled by the claim's own COMMIT, whose reply was lost: recorded once, not sent again.
        let committed = claim.lostWhileRecording ? claim.settled.count(where: { accepted.contains($0) }) : 0
        let recorded = claim.held.count { accepted.contains($0) } + committed
        let sentAgain = claim.sentAgain + claim.settledElsewhere
        let again = sentAgain.count { accepted.contains($0) }
        let others = sentAgain.count - again
        let reason = PipelineContext.databaseErrorReason(cause)
        context.metrics.unrecordedOutcome(lane: lane.rawValue, reason: reason, result: "recorded_again").increment(by: UInt64(recorded))
        context.metrics.unrecordedOutcome(lane: lane.rawValue, reason: reason, result: "sent_again").increment(by: UInt64(again))
        let lostReply = committed > 0 ? " (\(committed) of them by the COMMIT whose reply was lost)" : ""
        context.logger.warning("\(lane.rawValue) worker \(worker): the database session of a batch of \(claim.claimed) sent \(rows) ended before their outcomes were committed (\(cause)); \(recorded) notifications APNs accepted were recorded again on a new session\(lostReply), \(again) will be sent again (another claimer had taken their \(rows)), \(others) other \(rows) went back to \(backIn)",
                               ("event", "batch_recorded_again"), ("lane", .string(lane.rawValue)), ("worker", .int(Int64(worker))),
                               ("claimed", .int(Int64(claim.claimed))), ("recorded_again", .int(Int64(recorded))),
                               ("sent_again", .int(Int64(again))), ("reason", .string(reason)))
    }

    /// The outcomes of a batch could not be recorded for `seconds` (or pushd is stopping): its
    /// rows are back as claimed and are sent again, the accepted ones too.
    private func reportGivenUp(_ claim: SentBatchClaim<Key>, accepted: Set<Key>, last: any Error, seconds: Double) {
        let lost = claim.held.count { accepted.contains($0) }
        let again = (claim.sentAgain + claim.settledElsewhere).count { accepted.contains($0) }
        let reason = PipelineContext.databaseErrorReason(claim.cause ?? last)
        context.metrics.unrecordedOutcome(lane: lane.rawValue, reason: reason, result: "given_up").increment(by: UInt64(lost))
        context.metrics.unrecordedOutcome(lane: lane.rawValue, reason: reason, result: "sent_again").increment(by: UInt64(again))
        context.logger.error("\(lane.rawValue) worker \(worker): could not record the outcomes of a batch of \(claim.claimed) sent \(rows) for \(Int(seconds))s\(context.isStopping ? " before stopping" : "") (\(claim.cause.map { "\($0)" } ?? "\(last)"); last: \(last)): \(lost + again) notifications APNs accepted will be sent again",
                             ("event", "batch_outcomes_given_up"), ("lane", .string(lane.rawValue)), ("worker", .int(Int64(worker))),
                             ("claimed", .int(Int64(claim.claimed))), ("given_up", .int(Int64(lost))), ("sent_again", .int(Int64(again))),
                             ("reason", .string(reason)))
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
