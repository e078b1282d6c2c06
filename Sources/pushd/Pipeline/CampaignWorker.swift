import APNs
import Dispatcher
import Glibc
import Locking
import Polling
import Posix
import QueueStore

/// One worker of the campaign lane, on its own thread with its own connection: lease a
/// chunk of about a thousand targets, send them (respecting the campaign's rate cap),
/// retry failures that come due while the chunk is sending, and checkpoint progress every
/// couple of seconds. The checkpoint extends the lease; a worker that vanishes leaves a
/// lease that expires, and another worker resumes the chunk from its last checkpoint.
///
/// Once every target of a chunk has been sent and the window has room, the worker leases
/// the next chunk while the answers of the previous ones are still coming back (a
/// `ChunkRun` each, up to `maxRuns`): at a round trip of 150 ms a chunk's answers take
/// that long, and waiting for them would leave the connections idle.
///
/// Once every target of the chunk has been sent, targets still waiting for a retry are
/// parked (`pushd.campaign_retries`) in the transaction that finishes the chunk, and the
/// worker goes on with the next chunk: a throttled campaign never waits out its retries.
/// A few times a second the worker sends parked targets that are due, in a transaction held
/// until their answers are recorded, so a crash resends at most what was in flight.
final class CampaignWorker: @unchecked Sendable {
    /// Who `RefusedWritesLog` speaks of: the campaign workers of this process together.
    static let refusedWritesName = "campaign workers"

    // Touched only on the worker's own thread, except `completions` and the context.
    private let context: PipelineContext
    private let index: Int
    private let completions: CompletionQueue
    private let limiter: RateLimiter
    /// Extends the leases of this worker's chunks while it is alive, whatever it waits for.
    private let keeper: LeaseKeeper
    private let policy: OutcomePolicy
    private let store = CampaignStore()
    private var connection: PGConnection?
    private var generation: UInt32 = 0
    private var random = SystemRandom()
    private let leaseSeconds: Double
    /// Progress is checkpointed (and the lease extended) this often.
    private let checkpointInterval: Double
    let finished = Semaphore()

    init(context: PipelineContext, index: Int, completions: CompletionQueue, limiter: RateLimiter, keeper: LeaseKeeper) {
        self.context = context
        self.keeper = keeper
        self.index = index
        self.completions = completions
        self.limiter = limiter
        leaseSeconds = Double(context.config.campaignLeaseSeconds)
        checkpointInterval = Self.checkpointInterval(leaseSeconds: leaseSeconds)
        // The same policy as the transactional lane: an APNs storm costs a target time, not attempts.
        policy = context.policy
    }

    static func checkpointInterval(leaseSeconds: Double) -> Double { min(2, leaseSeconds / 3) }

    private var owner: String { "\(context.instance)/campaign-\(index)" }

    func start() {
        PosixThread.detach(name: "pushd-campaign-\(index)") { [self] in
            ThreadPriority.lowerCurrentThread(to: Int32(context.config.campaignNiceness))
            run()
            finished.signal()
        }
    }

    private func run() {
        var failures = 0
        var nextParkedCheck = 0.0
        var nextCancelledSweep = 0.0
        var dueButNotLeased = 0
        var passFailed = false
        // Whether a write went through in the pass (a claim of parked targets, a chunk's lease):
        // a pass that wrote nothing, between two that were refused, says nothing of whether the
        // database takes writes again.
        var passWrote = false
        var passStarted = RateLimiter.monotonicSeconds()
        // Since when every pass has failed on transient errors with the runs kept (nil: the last
        // pass went through).
        var keptSince: Double? = nil
        while !(context.isStopping && runs.isEmpty) {
            context.operatorLog.tick()
            keeper.beat(worker: index)
            // The pass before this one went through (`LaneHealth`).
            if !passFailed {
                context.laneHealth.passed(Lane.campaign.rawValue, started: passStarted)
                if passWrote { context.refusedWrites.passed(Self.refusedWritesName, started: passStarted) }
                keptSince = nil
            }
            passFailed = false
            passWrote = false
            passStarted = RateLimiter.monotonicSeconds()
            do {
                if connection == nil || connection?.isOpen == false {
                    let idle = QueueSession.idleInTransactionSeconds(waitingOnAnswersFor: context.config.apns.answerWaitSeconds)
                    connection = try QueueSession.connect(url: context.config.databaseURL, applicationName: "pushd-campaign-\(index)",
                                                          settings: ["idle_in_transaction_session_timeout": "\(idle)s"])
                }
                if context.makeDueAfterOutage(lane: Lane.campaign.rawValue, what: "parked campaign targets", { back in
                    try store.makeParkedDue(connection!, app: back.app, environment: context.outageEnvironment(back.environment),
                                            errorPrefixes: OutcomePolicy.unavailableReasonPrefixes)
                }) {
                    nextParkedCheck = 0
                }
                if try context.probeOutage(lane: Lane.campaign.rawValue, what: "parked campaign targets", { apps, environment in
                    try store.makeSoonestParkedDue(connection!, apps: apps, environment: context.outageEnvironment(environment),
                                                   errorPrefixes: OutcomePolicy.unavailableReasonPrefixes)
                }) {
                    nextParkedCheck = 0
                }
                if leaseInDoubt, RateLimiter.monotonicSeconds() >= nextGiveBackTry { giveBackLeaseInDoubt(on: connection!) }
                let seen = context.doorbell.current
                let now = RateLimiter.monotonicSeconds()
                if !owedParkedCounts.isEmpty, now >= nextOwedCountsTry { try writeOwedParkedCounts(on: connection!) }
                // Parked targets are looked for a few times a second, not before every chunk.
                if !context.isStopping, now >= nextParkedCheck {
                    let claimed = try store.claimParked(connection!, limit: Self.parkedBatchLimit, apps: context.claimableApps(),
                                                        leaving: context.coverage.leaving())
                    // A claim that found nothing wrote nothing (a read-only server runs it too).
                    if claimed != nil { passWrote = true }
                    if let parked = claimed {
                        failures = 0
                        if parked.targets.count < Self.parkedBatchLimit { nextParkedCheck = RateLimiter.monotonicSeconds() + Self.parkedCheckInterval }
                        let pause = try sendParked(parked, on: connection!)
                        if pause > 0 { nextParkedCheck = max(nextParkedCheck, RateLimiter.monotonicSeconds() + pause) }
                        continue
                    }
                    nextParkedCheck = RateLimiter.monotonicSeconds() + Self.parkedCheckInterval
                }
                if !context.isStopping, now >= nextCancelledSweep {
                    // Holds found by a lease, a command or another instance are told here too.
                    let holds = try store.refusals(connection!, apps: context.claimableApps())
                    context.campaignHolds.withLock { $0 = holds }
                    for held in holds { context.reportRefusedCampaign(held) }
                    try dropCancelledParked(on: connection!)
                    try dropCancelledChunks(on: connection!)
                    try forgetCampaignsNotRunning(on: connection!)
                    if index == 0 { try watchWaitingCampaigns(on: connection!) }
                    nextCancelledSweep = now + Self.cancelledSweepInterval
                }
                if !context.isStopping, wantsAnotherChunk, now >= nextLeaseTry {
                    let waits = campaignsPassedOverWhileDown(now: now)
                    let leased: CampaignChunk?
                    do {
                        leased = try store.leaseChunk(connection!, owner: owner, apps: context.claimableApps(), leaseSeconds: leaseSeconds,
                                                      skipping: limiter.pacedCampaigns + waits.campaigns, skippingChunksTo: waits.chunksTo)
                    } catch let error as PGError where error.leftStatementInDoubt(on: connection) {
                        // The session ended with the lease unanswered: it may have gone through
                        // under this worker's name (an error the server answered on a sound
                        // session undid it: it is one statement). The next pass gives back what
                        // that name holds that the worker does not.
                        leaseInDoubt = true
                        throw error
                    }
                    passWrote = true
                    if let chunk = leased {
                        failures = 0
                        dueButNotLeased = 0
                        try startOrRelease(chunk, on: connection!)
                        if !runs.isEmpty { continue }
                    } else if runs.isEmpty {
                        // With parked counts owed, their write closes what is done: closed before, a
                        // campaign would be done without them.
                        if owedParkedCounts.isEmpty {
                            for id in try store.closeFinishedCampaigns(connection!) { try logCampaign(id, "finished", on: connection!) }
                        }
                        // A capped campaign's next lease is taken when it is due, not up to a second later.
                        // One that is due but could not be leased (another worker held it for a moment)
                        // is tried again soon, then ever less often, so no worker spins on it.
                        var wait = 1.0
                        if let due = try store.secondsUntilNextLease(connection!) {
                            if due > 0 {
                                wait = min(1, due)
                                dueButNotLeased = 0
                            } else {
                                wait = min(1, 0.002 * pow(2, Double(min(dueButNotLeased, 10))))
                                dueButNotLeased += 1
                            }
                        }
                        context.doorbell.wait(after: seen, timeout: wait)
                        continue
                    } else {
                        // Nothing to lease now: look again soon, without a query per batch of answers.
                        nextLeaseTry = now + Self.leaseRetryInterval
                    }
                }
                if runs.isEmpty { continue }
                try pump(on: connection!)
            } catch {
                failures += 1
                passFailed = true
                context.databaseError(error)
                // Kept for at most a lease's length: an error of a transient class that does not
                // pass (a statement timeout on the same release, a disk full) would otherwise keep
                // the chunks, their leases extended by the keeper, from every other worker for ever.
                let now = RateLimiter.monotonicSeconds()
                let transient = (error as? PGError)?.code.isTransient == true
                if transient, keptSince == nil { keptSince = now }
                let keeps = transient && now - (keptSince ?? now) < leaseSeconds
                let kept = keeps && !runs.isEmpty
                    ? "; it keeps the \(runs.count) \(runs.count == 1 ? "chunk" : "chunks") it is sending, with their progress and leases, and writes them once the database takes the writes" : ""
                // Read-only (a failover), every pass of every worker fails the same way: told once
                // for them all, not a warning per pass of each.
                if !context.refusedWrites.failed(Self.refusedWritesName, meanwhile: Self.whileWritesAreRefused(leaseSeconds: leaseSeconds), error: error) {
                    context.logger.warning("campaign worker \(index): \(error)\(kept)", ("worker", .int(Int64(index))))
                }
                context.laneHealth.failed(Lane.campaign.rawValue, error: error, started: passStarted)
                if Self.survives(error, on: connection) {
                    // A row another session held for lock_timeout: the statement is undone, the
                    // session and the chunks being sent are sound, and their progress is written
                    // at the next checkpoint. Giving them up would send their targets again.
                    context.sleepAfterDatabaseFailure(failures)
                    continue
                }
                if keeps {
                    // The database went away (a restart, a failover, a session ended) or refused
                    // the statement for its state of the moment (read-only during a failover, a
                    // statement timeout, a serialization failure or deadlock, short of resources):
                    // nothing says the chunks being sent are wrong, and they are still this
                    // worker's until their leases run out (the keeper extends them). They send
                    // nothing more (whether the lease is still theirs is known only from the
                    // database); their answers come back, and once the database takes their
                    // writes they are released at their watermarks, as after a pause, with what
                    // was answered meanwhile: the next lease goes on from there. Given up, their
                    // leases sat unused for up to `lease_s` and whoever took them over sent every
                    // target since the last checkpoint again, the ones APNs had accepted too.
                    for run in runs { run.stopSubmitting = true }
                    connection?.close()
                    connection = nil
                    context.sleepAfterDatabaseFailure(failures)
                    continue
                }
                // The chunks' leases run out and another worker resumes them from their checkpoints;
                // answers still on their way find no run and are dropped.
                abandonRuns(after: error)
                keptSince = nil
                connection?.close()
                connection = nil
                context.sleepAfterDatabaseFailure(failures)
            }
        }
        if !owedParkedCounts.isEmpty, let connection, connection.isOpen, !connection.isInTransaction {
            try? writeOwedParkedCounts(on: connection)
        }
        for (id, counts) in owedParkedCounts.sorted(by: { $0.key < $1.key }) {
            context.logger.error("campaign worker \(index) stops with counts of campaign \(id) unwritten: \(counts.sent) sent and \(counts.failed) failed of its parked targets are missing from its counters; those targets were sent once and are not sent again",
                                 ("event", "campaign_parked_counts_lost"), ("campaign", .int(id)), ("worker", .int(Int64(index))),
                                 ("sent", .int(Int64(counts.sent))), ("failed", .int(Int64(counts.failed))))
        }
        connection?.close()
        connection = nil
    }

    /// What a spell of refused writes stops on the campaign lane (`RefusedWritesLog`).
    static func whileWritesAreRefused(leaseSeconds: Double) -> String {
        "no chunk is leased and no parked target claimed, so none is sent; the chunks being sent are kept, with their progress and leases, and written once writes are taken again (given up after \(Int(leaseSeconds)) s, a lease's length)"
    }

    /// Whether the runs outlive `error`: a lock timeout on a session that is still open, its
    /// transaction (a parked batch's) rolled back.
    private static func survives(_ error: any Error, on connection: PGConnection?) -> Bool {
        guard let error = error as? PGError, error.code == .lockNotAvailable, let connection, connection.isOpen else { return false }
        guard connection.isInTransaction else { return true }
        return (try? connection.execute(script: "ROLLBACK")) != nil && !connection.isInTransaction
    }

    /// Parked targets taken at once. Their transaction stays open while they are sent and
    /// answered, so the worker's session allows twice the answer wait idle in a transaction.
    static let parkedBatchLimit = 200
    /// Seconds between the last wait for a parked batch's answers and the end of the
    /// session's idle limit, left for its settle.
    static let parkedSettleMargin = 10.0

    /// The monotonic moments a parked batch claimed at `claimedAt` stops sending (after
    /// `sendSeconds`, `PushdConfig.parkedBatchSeconds`) and stops waiting for answers: in time for its settle,
    /// `parkedSettleMargin` inside the session's idle limit of `idleSeconds`. The targets not
    /// sent by then stay parked, unchanged and due, for the next claim. A batch that sent what
    /// its campaign's cap sends in 20 s took W × 20 s when W workers shared the cap, outlived
    /// the idle limit from 8 workers on, and PostgreSQL ended the session: the batch's outcomes
    /// were lost and every target of it that APNs had taken was sent again, claim after claim.
    static func parkedBatchDeadlines(claimedAt: Double, sendSeconds: Double,
                                     idleSeconds: Double) -> (sendBy: Double, answersBy: Double) {
        let answersBy = claimedAt + max(0, idleSeconds - parkedSettleMargin)
        return (min(claimedAt + sendSeconds, answersBy), answersBy)
    }
    /// Seconds between looks for due parked targets while there are chunks to send.
    static let parkedCheckInterval = 0.5
    /// The longest wait before claiming parked targets again after a batch found its
    /// campaign's cap taken by the other workers past its time.
    static let parkedCapPauseLimit = 5.0
    /// Chunks one worker sends at once, at most: enough to hold its whole budget in flight
    /// (a chunk stays a run until its last answer is back, and the next one is being sent
    /// meanwhile), and never fewer than 16, since resumed and last chunks are short.
    static func maxRuns(budget: Int, chunkSize: Int) -> Int {
        max(16, (budget + chunkSize - 1) / max(1, chunkSize) + 1)
    }
    /// Seconds a worker with nothing in flight waits before looking again at an engine that
    /// had no room for its requests.
    static let heldByEngineWait = 0.02
    /// Seconds before a worker with chunks in flight tries to lease again after finding none.
    static let leaseRetryInterval = 0.2
    /// Seconds between sweeps for targets of cancelled campaigns still parked for a retry.
    static let cancelledSweepInterval = 5.0

    /// The chunks being sent, oldest first.
    private var runs: [ChunkRun] = []
    /// No lease is tried before this monotonic time while other chunks are sending.
    private var nextLeaseTry = 0.0
    /// Requests of every run in flight.
    private var inFlight = 0
    /// Requests this worker keeps in flight at most: its share of the engine's window.
    private var budget: Int {
        max(1, context.config.apns.maxInFlight / max(1, context.config.campaignWorkers))
    }

    /// Another chunk is leased once every run has sent all its targets and the window has room:
    /// its requests go out while the previous chunks' answers are still coming back. A capped
    /// run does not hold the lease back: between its paced sends the worker sends other
    /// campaigns' chunks. The lease passes over the capped campaigns this process is pacing
    /// (`RateLimiter.pacedCampaigns`), so a capped campaign's next chunk is leased once its
    /// current one has sent its targets, and when its pace makes it due.
    private var wantsAnotherChunk: Bool {
        (runs.isEmpty || !heldByEngine) && runs.count < Self.maxRuns(budget: budget, chunkSize: context.config.campaignChunkSize) && inFlight < budget
            && runs.allSatisfy { ($0.submittedAll || $0.rate != nil || $0.waitsForAPNs) && (!$0.stopSubmitting || $0.waitsForAPNs) && $0.writeInDoubt == nil }
    }
    // Not while a run's write is in doubt: a release that went through leaves its chunk
    // leasable, and leased again under this worker's name before the release is settled, the
    // run that released it would drop the new lease's keeping, or release it again.

    /// What one answer did, once metrics and tallies are counted.
    private enum Handled {
        case sent
        case pruned(String, TokenPrune)
        case failed(String)
        case retry(at: Timestamp, reason: String, countsAsAttempt: Bool)
        /// The app is paused: the target waits, with `reason`, until it is resumed.
        case pause(String)
        /// A scope of the app is held: the target waits, with `reason`, not failed.
        case hold(String)
    }

    /// `token` is made only for a prune or a throttle: most answers need no hex of their token.
    /// `authorization` is the value the request carried.
    private func handle(_ verdict: Verdict, of outcome: SendOutcome, app: String, token: @autoclosure () -> String, pushType: String,
                        sender: AppSender, environment: PushdConfig.Environment, authorization: String?) -> Handled {
        let verdict = context.environmentKeyVerdict(context.forbiddenVerdict(verdict, sender: sender, environment: environment, lane: Lane.campaign.rawValue),
                                                    sender: sender, environment: environment, carried: authorization)
        switch verdict {
        case .delivered:
            sender.countResponse(status: 200, reason: "none", environment: environment)
            sender.countSent(pushType: pushType, lane: .campaign, environment: environment)
            context.tally.add(context.tally.sent)
            return .sent
        case .prune(let status, let reason, let timestamp):
            sender.countResponse(status: status, reason: reason, environment: environment)
            return .pruned(reason, TokenPrune(app: app, token: token(), reason: reason, apnsTimestamp: timestamp,
                                                  environment: environment.rawValue))
        case .retry(let at, let reason, let refresh, let countsAsAttempt):
            sender.countAnswer(outcome, environment: environment)
            context.metrics.retry(app: app, lane: Lane.campaign.rawValue, reason: outcome.label).increment()
            context.operatorLog.retried(outcome)
            context.tally.add(context.tally.retried)
            if refresh { context.providerTokenExpired(sender, carried: authorization) }
            if reason == APNsReason.tooManyRequests.rawValue { context.throttle.throttle(token(), until: at) }
            return .retry(at: at, reason: reason, countsAsAttempt: countsAsAttempt)
        case .dead:
            sender.countAnswer(outcome, environment: environment)
            counted(failure: outcome.label, app: app)
            return .failed(outcome.label)
        case .pauseApp(let reason):
            sender.countAnswer(outcome, environment: environment)
            guard context.pause(sender, reason: reason, carried: authorization) else {
                // About a key replaced since: sent again at once with the current one, no attempt spent.
                context.metrics.retry(app: app, lane: Lane.campaign.rawValue, reason: outcome.label).increment()
                return .retry(at: Timestamp(), reason: PipelineContext.replacedKeyRetry, countsAsAttempt: false)
            }
            return .pause(HeldWork.pausedPrefix + outcome.label)
        case .hold(let scope, let reason, let why):
            sender.countAnswer(outcome, environment: environment)
            let key = scope == .topic
                ? AppSender.topicKey(sender.factory.topic(for: PushType(rawValue: pushType) ?? .alert), environment)
                : sender.broadcastKey(scope, environment)
            context.hold(sender, key, why: why, reason: APNsReason(reason))
            return .hold(HeldWork.errorPrefix + outcome.label)
        }
    }

    /// Seconds a campaign of a held scope is left unleased, fleet-wide, before a worker looks
    /// at it again (a SIGHUP that ends the hold makes it leasable at once).
    static let heldLeaseDeferral = 30.0

    /// Why notifications of `pushType` cannot go to `environment` now (their topic is held), nil when they can.
    private func heldReason(_ sender: AppSender, pushType: String, environment: PushdConfig.Environment) -> String? {
        guard sender.hasHolds else { return nil }
        return sender.heldReason(AppSender.topicKey(sender.factory.topic(for: PushType(rawValue: pushType) ?? .alert), environment))
    }

    /// Leaves the campaign unleased for a while: its topic is held here. Recorded so a SIGHUP
    /// can make it leasable again at once.
    private func deferHeldCampaign(_ campaignID: Int64, on connection: PGConnection) throws {
        try store.deferLeases(connection, campaignID: campaignID, seconds: Self.heldLeaseDeferral)
        context.deferredCampaigns.withLock { _ = $0.insert(campaignID) }
    }

    /// `start`, the chunk released at once when a statement of it fails (the `started` line's
    /// read, a release): before, it stayed leased to a worker that was not sending it, idle
    /// until its lease ran out. The campaign is leased again after `startFailureDeferral`, not
    /// at once: an error that concerns its rows would otherwise come back at every turn. One
    /// error line per campaign a minute from this worker, counting the others; the error goes
    /// on to the worker's loop (`pushd_database_errors_total`, `/readyz`).
    private func startOrRelease(_ chunk: CampaignChunk, on connection: PGConnection) throws {
        do {
            try start(chunk, on: connection)
        } catch {
            var released = false
            var deferred = false
            // Put off first, then released: released first, another worker could lease the chunk
            // between the two statements and fail on it at once too.
            if connection.isOpen, !connection.isInTransaction {
                // Leased again after the deferral, not after the time the lease reserved at a cap;
                // a failure of it is this one's, told below.
                givePaceBack(chunk, unsent: chunk.size - chunk.startIndex, on: connection, quietly: true)
                deferred = (try? store.deferLeases(connection, campaignID: chunk.campaignID, seconds: Self.startFailureDeferral)) != nil
                released = (try? store.release(connection, chunk, ChunkProgress(position: chunk.startIndex))) != nil
            }
            // Released, the chunk is no longer this worker's: thrown on, the error would make the
            // loop give up the chunks it is sending too, each sent again from its checkpoint by
            // whoever takes it over. Counted as a database error all the same.
            func rest() throws {
                guard released else { throw error }
                context.databaseError(error)
            }
            guard let unlogged = startFailureLines.admit(chunk.campaignID, now: RateLimiter.monotonicSeconds()) else { return try rest() }
            let fate = released
                ? (deferred ? "released it at once, to be leased again in \(Int(Self.startFailureDeferral)) s"
                            : "released it at once (its next lease could not be put off, so it may be leased again at once)")
                : "could not release it (the database is out of reach or refuses the write): it stays leased, unsent, until its lease ends within \(Int(leaseSeconds)) s"
            let since = unlogged > 0 ? " (\(unlogged) more such failures of the campaign since the last line)" : ""
            context.logger.error("campaign worker \(index) could not start chunk \(chunk.chunk) of campaign \(chunk.campaignID) it leased and \(fate)\(since): \(error)",
                                 ("event", "campaign_chunk_start_failed"), ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))),
                                 ("app", .string(chunk.app)), ("worker", .int(Int64(index))), ("released", .bool(released)),
                                 ("unlogged", .int(Int64(unlogged))), ("sqlstate", .string((error as? PGError)?.code.raw ?? "")))
            try rest()
        }
    }

    /// How long a campaign whose chunk could not be started waits before its next lease.
    static let startFailureDeferral = 5.0

    /// Seconds before a target whose connections could not be set up is tried again, and its
    /// campaign leased again (`AppSender.ConnectionSetupFailed`).
    static let setupRetrySeconds = 10.0
    private var startFailureLines = LogGate<Int64>(quietSeconds: 60)

    /// Takes a leased chunk on: a run to send, or released at once when its app cannot send here.
    private func start(_ chunk: CampaignChunk, on connection: PGConnection) throws {
        context.metrics.claimed(lane: Lane.campaign.rawValue).increment(by: UInt64(chunk.targets.count))
        // The lease returns only configured apps; should one slip through, the chunk goes
        // back for an instance that knows the app rather than being failed.
        guard let sender = context.senders[chunk.app] else {
            try store.release(connection, chunk, ChunkProgress(position: chunk.startIndex))
            givePaceBack(chunk, unsent: chunk.size - chunk.startIndex, on: connection)
            return
        }
        if sender.pausedReason != nil {
            try store.release(connection, chunk, ChunkProgress(position: chunk.startIndex))
            // Resumed (a SIGHUP), the app's capped campaign is leased at once, not after the
            // time this lease reserved for the chunk.
            givePaceBack(chunk, unsent: chunk.size - chunk.startIndex, on: connection)
            if runs.isEmpty { context.doorbell.wait(after: context.doorbell.current, timeout: 5) }
            return
        }
        if let why = heldReason(sender, pushType: chunk.pushType, environment: sender.environment(job: chunk.environment, registered: nil)) {
            // Its topic is refused to the app's credentials: the chunk goes back untouched and
            // the campaign waits, so its targets are neither sent nor failed.
            try store.release(connection, chunk, ChunkProgress(position: chunk.startIndex))
            // The hold's deferral decides when the campaign is leased again, not the time this
            // lease reserved for the chunk at a cap (longer: 100 s for 1,000 targets at 10/s).
            givePaceBack(chunk, unsent: chunk.size - chunk.startIndex, on: connection)
            try deferHeldCampaign(chunk.campaignID, on: connection)
            context.logger.debug("campaign \(chunk.campaignID) waits: \(why)", ("campaign", .int(chunk.campaignID)),
                                 ("app", .string(chunk.app)))
            return
        }

        context.operatorLog.campaignSending(chunk.campaignID)
        if chunk.chunk == 0 && chunk.startIndex == 0 {
            try logCampaign(chunk.campaignID, "started", on: connection)
        }
        abandonedChunks.remove(CampaignStore.ChunkKey(campaignID: chunk.campaignID, chunk: chunk.chunk))
        if let previous = chunk.expiredOwner {
            // The previous worker died, hung or lost the database mid-chunk: the targets it sent
            // after its last checkpoint are sent again.
            context.metrics.leaseTakeover(app: chunk.app, lane: Lane.campaign.rawValue).increment()
            let since = chunk.expiredAt.map { Int(max(0, Timestamp().timeIntervalSince($0))) } ?? 0
            context.logger.warning("took over chunk \(chunk.chunk) of campaign \(chunk.campaignID) from worker \(previous), whose lease expired \(since) s ago; resuming at its checkpoint, target \(chunk.startIndex)",
                                   ("event", "chunk_taken_over"), ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))),
                                   ("previous_owner", .string(previous)), ("expired_s", .int(Int64(since))),
                                   ("from", .int(Int64(chunk.startIndex))))
        } else if chunk.startIndex > 0 {
            // Released by its worker (a pause, a shutdown, a paused app): routine.
            context.logger.debug("chunk \(chunk.chunk) of campaign \(chunk.campaignID) resumes from its checkpoint at target \(chunk.startIndex) after its previous worker released it",
                                 ("event", "chunk_resumed"), ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))),
                                 ("from", .int(Int64(chunk.startIndex))))
        }
        context.logger.debug("leased chunk \(chunk.chunk) of campaign \(chunk.campaignID)", ("campaign", .int(chunk.campaignID)),
                             ("chunk", .int(Int64(chunk.chunk))), ("targets", .int(Int64(chunk.targets.count))),
                             ("chunks_sending", .int(Int64(runs.count + 1))))
        generation &+= 1
        let rate = chunk.rateLimit ?? context.config.apps.first(where: { $0.name == chunk.app })?.campaignRate
            ?? context.config.defaultCampaignRate
        let run = ChunkRun(chunk: chunk, sender: sender, generation: generation & 0xFF_FFFF, rate: rate)
        if rate != nil {
            limiter.startPacing(campaign: chunk.campaignID)
            run.pacing = true
        }
        runs.append(run)
        keeper.hold(chunk, worker: index)
        context.metrics.chunksSending.increment()
    }

    /// One round for the chunks being sent: fill the window (due retries first, then fresh
    /// targets, oldest chunk first), park and finish what is done, wait for a batch of answers
    /// and record them, checkpoint what is due.
    private func pump(on connection: PGConnection) throws {
        heldByEngine = false
        var waitingForALook = false
        for run in runs {
            if context.isStopping || run.sender.pausedReason != nil { run.stopSubmitting = true }
            var waitsForALook = false
            if !run.stopSubmitting {
                switch keeper.stops.verdict(run.chunk.campaignID) {
                case .stopped:
                    // Paused or cancelled: nothing more is sent, and the checkpoint at the end of
                    // this round records what was answered and logs the campaign's new status.
                    run.stopSubmitting = true
                    run.lastCheckpoint = -.infinity
                case .notifiedUnlooked:
                    // A pause or cancel was notified: nothing goes out until the watch has read
                    // the campaign's status (milliseconds).
                    waitsForALook = true
                    waitingForALook = true
                case .sending:
                    break
                }
            }
            if !run.stopSubmitting, run.sender.hasHolds,
               heldReason(run.sender, pushType: run.chunk.pushType,
                          environment: run.sender.environment(job: run.chunk.environment, registered: nil)) != nil {
                run.stopSubmitting = true
                run.held = true
            }
            if !run.retries.isEmpty {
                run.releaseRetriesWaitingForAPNs { context.operatorLog.isDown(app: run.app, environment: $0.rawValue, lane: Lane.campaign.rawValue) }
            }
            if inFlight < budget, !waitsForALook { try fill(run, on: connection) }
            if run.pacing, run.stopSubmitting || (run.next >= run.count && run.paced == nil) { stopPacing(run) }
            if run.shouldPark { parkRetries(run) }
        }
        var finished = [ObjectIdentifier]()
        for run in runs where run.isDone && RateLimiter.monotonicSeconds() >= run.finishNotBefore {
            if try finish(run, on: connection) { finished.append(ObjectIdentifier(run)) }
        }
        if !finished.isEmpty {
            for run in runs where run.pacing && finished.contains(ObjectIdentifier(run)) { stopPacing(run) }
            let before = runs.count
            runs.removeAll { finished.contains(ObjectIdentifier($0)) }
            context.metrics.chunksSending.add(Double(runs.count - before))
        }
        // Tokens a run of DeviceTokenNotForTopic or BadDeviceToken answers pruned before it tripped.
        context.restoreTokens(on: connection)
        if runs.isEmpty { return }

        let now = RateLimiter.monotonicSeconds()
        var wait = 0.5
        if inFlight == 0, let soonest = runs.compactMap(\.soonestRetry).min() { wait = max(0.001, min(wait, soonest - now)) }
        // A capped run's next send is made at its moment, whatever else is in flight.
        if inFlight < budget, let paced = runs.compactMap(\.paced?.at).min() { wait = max(0.0005, min(wait, paced - now)) }
        // Held back by requests of the other workers: room comes with their answers, not ours.
        if heldByEngine, inFlight == 0 { wait = min(wait, Self.heldByEngineWait) }
        if waitingForALook { wait = min(wait, CampaignStopWatch.notifiedLookInterval) }
        // While another chunk is wanted, the answers already here are taken without waiting:
        // the next lease goes out now, not a round trip later.
        let leaseNext = wantsAnotherChunk && now >= nextLeaseTry && !context.isStopping
        let batch = leaseNext ? 1 : min(inFlight / 4, 256)
        completions.take(atLeast: batch, until: now + (leaseNext ? 0 : wait), into: &results)
        for result in results {
            record(result)
        }
        // A done run whose finish found the campaign's row locked is only finished again.
        for run in runs where !run.leaseLost && !run.isDone && RateLimiter.monotonicSeconds() - run.lastCheckpoint >= checkpointInterval {
            try checkpoint(run, on: connection)
        }
    }

    /// Parks the retries of a run that sent every target and waits only for them, unless its
    /// last targets were handed back unsent while its lane fails: an outage starting, not yet
    /// called (three failures over a second), as when the engine hands back a whole chunk
    /// submitted at once. Parked then, that tail was one row each, the chunk released past it,
    /// and claimed back one by one after the outage. Kept, the run waits; once the outage is
    /// called it stops as at a retry come due into it, and gives the tail back to the chunk
    /// (`stopWhileDown`, `giveBackUnsentTail`). An answer ends the failure, and the retries are
    /// parked as usual.
    private func parkRetries(_ run: ChunkRun) {
        guard let environment = run.unsentTailEnvironment,
              context.operatorLog.isFailing(app: run.app, environment: environment.rawValue, lane: Lane.campaign.rawValue) else {
            run.parkRetries()
            return
        }
        guard context.operatorLog.isDown(app: run.app, environment: environment.rawValue, lane: Lane.campaign.rawValue),
              let retry = run.takeSoonestRetry(to: environment) else { return }
        if !stopWhileDown(run, retry.target) {
            // Its targets to the other environment, which answers, are not held back for this one.
            run.retries.append(retry)
            run.parkRetries()
        }
    }

    /// The last batch of answers; kept between rounds for its capacity (`CompletionQueue`).
    private var results: [DispatchResult] = []
    /// Requests built from a chunk's template and not yet handed to the engine, with the
    /// template they came from; kept between fills for its capacity.
    private var batch: [(request: DispatchRequest, tag: UInt64)] = []
    private var batchTemplate: NotificationTemplate?
    /// Requests handed to the engine at once: one window acquisition, one lock of a loop's
    /// inbox and at most one wake-up for all of them, instead of one each.
    static let submitBatch = 256

    /// How far ahead of its moment a capped run may send: the sends due within it go out as one
    /// batch (`fill`). 5 ms is a fraction of `RateLimiter.burstSeconds`' make-up, so a cap holds
    /// over any second; below 200/s each send still waits for its own moment.
    static let pacingSlice = 0.005

    /// The last fill stopped because the engine already held enough requests waiting for a
    /// stream (`engineHasRoom`): no chunk is leased ahead until answers make room.
    private var heldByEngine = false

    /// Whether `engine` takes more of this worker's requests now. Beyond what its connections
    /// carry, one connection's worth per event loop may wait for a stream: a loop grows a
    /// connection only after requests have waited for one without a break (250 ms), and at a
    /// round trip of 50 ms a connection's streams come free at once, so less would empty the
    /// loop's queue between two fills and the drain would stay on too few connections. More
    /// only holds memory: at 8 × 500 configured and 2 × 500 open on loopback, the workers
    /// kept 3,000 requests waiting, with the chunks leased ahead for them.
    static func engineHasRoom(outstanding: Int, streamCapacity: Int, waiting: Int) -> Bool {
        streamCapacity <= 0 || outstanding < streamCapacity + waiting
    }

    private func engineHasRoom(_ engine: HTTP2Dispatcher) -> Bool {
        Self.engineHasRoom(outstanding: engine.outstanding, streamCapacity: engine.streamCapacity,
                           waiting: engine.configuration.threads * engine.configuration.streamsPerConnection)
    }

    /// Hands the batched requests to their engine; blocks while its window is full.
    private func submitBatched() {
        keeper.beat(worker: index)
        if let template = batchTemplate, !batch.isEmpty { template.client.dispatcher.submit(contentsOf: batch) }
        batch.removeAll(keepingCapacity: true)
        batchTemplate = nil
    }

    /// When each app and environment down on the campaign lane may next get a target from this
    /// worker (monotonic seconds), by `app` NUL `environment`.
    private var downLaneProbes: [String: Double] = [:]

    /// Whether a target of `run` to `environment` may be sent: always while the lane is up;
    /// while APNs takes none of the app's notifications there, one per `retry.outage_probe_ms`
    /// from this worker, so that an answer shows it back. Without it a campaign kept sending
    /// every fresh target once, at full speed, into the outage (`setAsideWhileDown`).
    private func mayPassDownLane(_ run: ChunkRun, environment: PushdConfig.Environment, now: Double, looked: inout [PushdConfig.Environment: Bool]) -> Bool {
        // Looked up once per fill and environment, not once per target.
        let down = looked[environment] ?? {
            let down = context.operatorLog.isDown(app: run.app, environment: environment.rawValue, lane: Lane.campaign.rawValue)
            looked[environment] = down
            return down
        }()
        guard down else { return true }
        let key = run.app + "\u{0}" + environment.rawValue
        if now < downLaneProbes[key, default: 0] { return false }
        downLaneProbes[key] = now + Double(context.config.retry.outageProbeMilliseconds) / 1000
        return true
    }

    /// A campaign left unleased while APNs takes none of its app's notifications to
    /// `environments` on the campaign lane (`PipelineContext.campaignsWaitingForAPNs`).
    struct WaitForAPNs: Sendable {
        var app: String
        var environments: Set<PushdConfig.Environment>
        /// A chunk stopped for it records no environment (`CampaignChunk.targetsEnvironment`:
        /// a file import's, or one that mixes both environments): the lease cannot tell
        /// its chunks apart, so the campaign is passed over whole. Otherwise only its chunks of
        /// `environments` are, and its chunks of the other environment are sent meanwhile.
        var whole: Bool
    }

    /// What the lease passes over while campaigns wait for APNs: whole campaigns, and of
    /// others the chunks that go to an environment, by its name.
    struct PassedOver: Equatable {
        var campaigns: [Int64] = []
        var chunksTo: [String: [Int64]] = [:]
    }

    /// Stops `run` before `target`, which is not sent while its lane is down. A fresh target is
    /// given back unsent, so the chunk is released at it, once its answers are in, with every
    /// target after it: they stay in the chunk, not parked one row each, and the lease passes
    /// the campaign's chunks of that environment over while it stays down, or the campaign
    /// when the chunk records no environment (`campaignsPassedOverWhileDown`), but for a
    /// probe. Setting each fresh target aside instead wrote the whole campaign into the parked
    /// table during an outage, and after it the parked claim sent it back far slower than the
    /// chunks. A chunk whose targets go to both environments (registered tokens imported
    /// before schema version 35: by token alone before 34, and with 34 the one chunk per import
    /// where the environments met) stops only while APNs is down for both: else its targets to
    /// the other environment, which may answer, would be held back by this one and, at the
    /// lease, by the campaign's; its target is set aside instead (`setAsideWhileDown`).
    /// Returns whether the run stopped.
    private func stopWhileDown(_ run: ChunkRun, _ target: Int) -> Bool {
        let environment = run.environments[target]
        var stoppedFor: Set<PushdConfig.Environment> = [environment]
        if !run.singleEnvironment {
            let other: PushdConfig.Environment = environment == .production ? .sandbox : .production
            guard context.operatorLog.isDown(app: run.app, environment: other.rawValue, lane: Lane.campaign.rawValue) else { return false }
            stoppedFor.insert(other)
        }
        if !run.giveBackUnsent(target) {
            // A retry come due: it waits for APNs as it would have, parked with the chunk.
            setAsideWhileDown(run, target)
        }
        run.stopSubmitting = true
        run.waitsForAPNs = true
        let campaign = run.chunk.campaignID
        // The lease passes over the chunks of the stopped one's environment when the import
        // recorded it, and the campaign whole when not (a chunk that mixes both has none).
        let untagged = run.chunk.targetsEnvironment.flatMap(PushdConfig.Environment.init(rawValue:)) != environment
        let (added, wait) = context.campaignsWaitingForAPNs.withLock { waiting -> (Bool, WaitForAPNs) in
            if var wait = waiting[campaign] {
                wait.environments.formUnion(stoppedFor)
                wait.whole = wait.whole || untagged
                waiting[campaign] = wait
                return (false, wait)
            }
            let wait = WaitForAPNs(app: run.app, environments: stoppedFor, whole: untagged)
            waiting[campaign] = wait
            // Here, not only at worker 0's sweep, which an outage's parked batches can hold off.
            context.metrics.campaignsWaitingForAPNs.set(Double(waiting.count))
            return (true, wait)
        }
        // A campaign passed over whole is leased again when a probe of this worker comes due
        // for an environment it waits for, and the lease hands out its first free chunk, which
        // may go to another of them (chunks of both environments stopped, both down): a probe
        // left due, never reached by that chunk, had the lease take the campaign back at once,
        // the chunk stop at its first target again, and so on. So this worker passes such a
        // campaign over for a probe interval after each stop; the app's probes stay due for its
        // other campaigns. One whose chunks record their environment needs none of this: the
        // lease hands out only the chunks of an environment whose probe is due.
        if wait.whole, wait.environments.count > 1 {
            stoppedWhileDown[campaign] = RateLimiter.monotonicSeconds() + Double(context.config.retry.outageProbeMilliseconds) / 1000
        }
        if added, let unlogged = admitAPNsWaitLine(app: run.app, back: false) {
            let names = stoppedFor.map(\.rawValue).sorted().joined(separator: ", ")
            context.logger.notice("campaign \(campaign) of app \(run.app) waits for APNs, which takes none of the app's notifications to \(names) on the campaign lane: its unsent targets stay in its chunks, which are leased again when APNs answers (meanwhile a target goes as a probe every retry.outage_probe_ms)\(Self.apnsWaitSince(unlogged, app: run.app, back: false))",
                                  ("event", "campaign_waiting_for_apns"), ("campaign", .int(campaign)), ("app", .string(run.app)),
                                  ("environment", .string(names)), ("from", .int(Int64(run.chunk.startIndex + target))),
                                  ("unlogged", .int(Int64(unlogged))))
        }
        return true
    }

    /// Campaigns waiting for both environments that this worker passes over until then
    /// (monotonic seconds), since it last stopped a chunk of theirs (`stopWhileDown`).
    private var stoppedWhileDown: [Int64: Double] = [:]

    /// What of the campaigns waiting for APNs (`stopWhileDown`) the lease passes over now,
    /// while the environments they wait for are all still down. A campaign whose chunks record
    /// their environment: its chunks of each environment no probe of this worker is due for.
    /// Another: the whole campaign, when no probe of this worker is due for any of them or it
    /// stopped a chunk of theirs less than a probe interval ago. One whose environment answers
    /// again is forgotten, so it is leased at once and sent at the chunks' speed.
    private func campaignsPassedOverWhileDown(now: Double) -> PassedOver {
        let waiting = context.campaignsWaitingForAPNs.withLock { $0 }
        if waiting.isEmpty { stoppedWhileDown.removeAll() }
        guard !waiting.isEmpty else { return PassedOver() }
        if !stoppedWhileDown.isEmpty {
            stoppedWhileDown = stoppedWhileDown.filter { waiting[$0.key] != nil && now < $0.value }
        }
        var passedOver = PassedOver()
        var back = [Int64]()
        for (campaign, wait) in waiting {
            let probeDue = { (environment: PushdConfig.Environment) in
                now >= self.downLaneProbes[wait.app + "\u{0}" + environment.rawValue, default: 0]
            }
            guard let down = stillDown(wait) else {
                back.append(campaign)
                stoppedWhileDown[campaign] = nil
                continue
            }
            if !wait.whole {
                for environment in down where !probeDue(environment) {
                    passedOver.chunksTo[environment.rawValue, default: []].append(campaign)
                }
            } else if stoppedWhileDown[campaign] != nil || !down.contains(where: probeDue) {
                passedOver.campaigns.append(campaign)
            }
        }
        // One line per app for the campaigns back at once, not one per campaign.
        var backByApp = [String: [Int64]]()
        for campaign in back {
            guard let wait = context.campaignsWaitingForAPNs.withLock({ waiting -> WaitForAPNs? in
                let wait = waiting.removeValue(forKey: campaign)
                context.metrics.campaignsWaitingForAPNs.set(Double(waiting.count))
                return wait
            }) else { continue }
            backByApp[wait.app, default: []].append(campaign)
        }
        for (app, campaigns) in backByApp.sorted(by: { $0.key < $1.key }) {
            guard let unlogged = admitAPNsWaitLine(app: app, back: true, campaigns: campaigns.count) else { continue }
            let ids = campaigns.sorted().map(String.init).joined(separator: ", ")
            context.logger.notice("campaign(s) \(ids) of app \(app) are leased again: APNs answers again\(Self.apnsWaitSince(unlogged, app: app, back: true))",
                                  ("event", "campaign_apns_back"), ("campaigns", .string(ids)), ("app", .string(app)),
                                  ("unlogged", .int(Int64(unlogged))))
        }
        return passedOver
    }

    /// The environments `wait` is for, all of which APNs is still down for; nil once one of them
    /// answers again, when the campaign is leased as any other (`campaignsPassedOverWhileDown`).
    private func stillDown(_ wait: WaitForAPNs) -> Set<PushdConfig.Environment>? {
        let down = wait.environments.filter {
            context.operatorLog.isDown(app: wait.app, environment: $0.rawValue, lane: Lane.campaign.rawValue)
        }
        return down.count < wait.environments.count ? nil : down
    }

    /// A campaign waiting for APNs that was cancelled, paused, finished or deleted meanwhile
    /// waits no more: left in, it kept `pushd_campaigns_waiting_for_apns` above 0 for good, its
    /// lane never answering again without its sends. Every worker looks at its sweep: worker
    /// 0's can be held off by an outage's parked batches.
    private func forgetCampaignsNotRunning(on connection: PGConnection) throws {
        let ids = context.campaignsWaitingForAPNs.withLock { Array($0.keys) }
        guard !ids.isEmpty else { return }
        let running = try store.runningCampaigns(connection, ids: ids)
        let over = ids.filter { !running.contains($0) }
        guard !over.isEmpty else { return }
        context.campaignsWaitingForAPNs.withLock { waiting in
            for id in over { waiting.removeValue(forKey: id) }
            context.metrics.campaignsWaitingForAPNs.set(Double(waiting.count))
        }
    }

    /// Which `campaign_waiting_for_apns` (or, `back`, `campaign_apns_back`) lines of an app are
    /// written (`PipelineContext.campaignAPNsLines`): many campaigns and an APNs failing and
    /// answering by turns wrote a pair per campaign and turn.
    struct APNsWaitLine: Hashable, Sendable {
        var app: String
        var back: Bool
    }

    /// Nil when the line of `app` about `campaigns` stays silent (one was written within the
    /// minute), else how many campaigns came unlogged before it.
    private func admitAPNsWaitLine(app: String, back: Bool, campaigns: Int = 1) -> Int? {
        let now = RateLimiter.monotonicSeconds()
        let key = APNsWaitLine(app: app, back: back)
        return context.campaignAPNsLines.withLock { gate in
            guard let unlogged = gate.admit(key, now: now) else {
                // Silent: each of its campaigns is counted, not the line.
                for _ in 1..<max(1, campaigns) { _ = gate.admit(key, now: now) }
                return nil
            }
            return unlogged
        }
    }

    static func apnsWaitSince(_ unlogged: Int, app: String, back: Bool) -> String {
        guard unlogged > 0 else { return "" }
        return "; \(unlogged) more campaign(s) of app \(app) \(back ? "leased again as APNs answered" : "began waiting for APNs") since the last such line, not logged one by one"
    }

    /// The counts of silenced `campaign_waiting_for_apns` and `campaign_apns_back` lines whose
    /// minute passed with no line after them, so that none is left out of the log.
    private func flushAPNsWaitLines() {
        let now = RateLimiter.monotonicSeconds()
        for (line, unlogged) in context.campaignAPNsLines.withLock({ $0.flush(now: now) }) {
            context.logger.notice("\(unlogged) more campaign(s) of app \(line.app) \(line.back ? "leased again as APNs answered" : "began waiting for APNs") since the last such line, not logged one by one",
                                  ("event", .string(line.back ? "campaign_apns_back" : "campaign_waiting_for_apns")), ("app", .string(line.app)),
                                  ("unlogged", .int(Int64(unlogged))))
        }
    }

    /// The reason a target set aside unsent while its lane is down waits with: a `not sent: `
    /// one, so that `apns_back` makes it due with what APNs did not answer.
    static let setAsideReason = "not sent: APNs takes none of the app's notifications to this environment on the campaign lane; set aside until it answers"

    /// `target` is not sent while APNs is down for it: it waits as a retry set aside for APNs
    /// (`RetryPolicy.decideWhileDown`, no attempt spent), so the chunk goes on to its other
    /// targets and is finished or released with it parked, and the worker to other chunks:
    /// holding the chunk instead held its worker, and in the end every worker, for the outage.
    private func setAsideWhileDown(_ run: ChunkRun, _ target: Int) {
        let now = Timestamp()
        switch policy.retry.decideWhileDown(now: now, expiration: run.expiration, firstAttemptAt: run.firstAttempt(of: target),
                                            trouble: "APNs took none of the app's notifications", random: &random) {
        case .retry(let after, let at):
            run.retries.append(ChunkRun.Retry(at: RateLimiter.monotonicSeconds() + after, target: target, dueAt: at,
                                              reason: Self.setAsideReason, waitsForAPNs: true))
        case .giveUp:
            fail(run, target, OutcomePolicy.expiredLabel)
        }
    }

    /// Submits targets of `run` while the worker's window has room.
    private func fill(_ run: ChunkRun, on connection: PGConnection) throws {
        defer { submitBatched() }
        let chunk = run.chunk
        let sender = run.sender
        // The tokens stay raw in the chunk's block: a token's hex is written only into its request's path.
        let tokens = chunk.targets.tokens
        // One clock read per fill for an uncapped run: it never waits inside this loop except
        // for the engine's window, after which the clock is read again.
        var now = RateLimiter.monotonicSeconds()
        // The campaign's apns-expiration passed: what it has not sent fails unsent.
        let expired = OutcomePolicy.expiredBeforeSending(run.expiration, now: Timestamp()) != nil
        var lookedDown: [PushdConfig.Environment: Bool] = [:]
        while !run.stopSubmitting, inFlight < budget {
            // Looked at between batches only: a batch past the limit is one batch of waiting requests.
            if run.rate == nil, batch.isEmpty, let engine = run.templates.values.first?.client.dispatcher, !engineHasRoom(engine) {
                heldByEngine = true
                break
            }
            if run.rate != nil { now = RateLimiter.monotonicSeconds() }
            // A capped run's target reserved earlier goes when its moment comes; until then the
            // worker records answers, sends its other chunks and leases more (`pump`).
            if let paced = run.paced, paced.at - now > Self.pacingSlice { break }
            let target: Int
            if let paced = run.paced {
                run.paced = nil
                // Reserved before the campaign's apns-expiration passed, due after it: not sent.
                if expired {
                    fail(run, paced.target, OutcomePolicy.expiredLabel)
                    continue
                }
                target = paced.target
            } else {
                guard let next = run.takeNextTarget(now: now) else { break }
                if expired {
                    fail(run, next, OutcomePolicy.expiredLabel)
                    continue
                }
                // Before the cap's reservation: a target left to another instance takes no share of
                // this one's pace, so that instance sends it in the time the chunk left unused.
                if !sender.app.hasCredentials(for: run.environments[next]) {
                    noCredentials(run, next, run.environments[next])
                    continue
                }
                // APNs takes none of the app's notifications to that environment: the chunk stops
                // before the target, which stays in it unsent (`stopWhileDown`); one the chunk
                // does not stop at (targets of both environments in the chunk) is set aside
                // unsent and parked with the chunk's retries (the probe and `apns_back` bring it
                // back). Now and then one goes as a probe.
                if !mayPassDownLane(run, environment: run.environments[next], now: now, looked: &lookedDown) {
                    if stopWhileDown(run, next) {
                        // The probe built before goes first, not after a database round trip.
                        submitBatched()
                        givePaceBack(run, on: connection)
                        break
                    }
                    setAsideWhileDown(run, next)
                    continue
                }
                // Its connections failed moments ago (a chunk that goes on with the other
                // environment): it waits with that failure, taking no share of the pace.
                if let failed = run.setupFailedUntil[run.environments[next]] {
                    let now = RateLimiter.monotonicSeconds()
                    if now < failed.at {
                        context.metrics.retry(app: chunk.app, lane: Lane.campaign.rawValue, reason: AppSender.ConnectionSetupFailed.label).increment()
                        run.retries.append(ChunkRun.Retry(at: failed.at, target: next, dueAt: Timestamp().addingTimeInterval(failed.at - now),
                                                          reason: failed.failure))
                        continue
                    }
                }
                if let rate = run.rate {
                    // A send due within the pacing slice goes with the batch being built; one due
                    // later waits in `paced` while the batch is sent. So a capped run wakes the
                    // worker and the engine's loop once per slice, not once per notification, and
                    // never holds the worker: waiting inside this loop, a capped chunk kept its
                    // worker for size ÷ rate seconds, and a capped campaign with many chunks took
                    // every worker while newer campaigns got nothing.
                    let wait = limiter.reserve(campaign: chunk.campaignID, rate: rate, now: now)
                    if wait > Self.pacingSlice {
                        run.paced = (next, now + wait)
                        break
                    }
                }
                target = next
            }
            if run.rate != nil {
                keeper.beat(worker: index)
                // Paced sending can stay in this loop longer than the lease: renew it here,
                // with the answers recorded so far, or another worker takes the chunk over
                // and sends it again.
                if !run.leaseLost, RateLimiter.monotonicSeconds() - run.lastCheckpoint >= checkpointInterval {
                    do {
                        try checkpoint(run, on: connection)
                    } catch {
                        // The target taken stays the run's: lost here, the chunk would be
                        // released before it and every target after it sent again.
                        run.retries.append(ChunkRun.Retry(at: 0, target: target))
                        throw error
                    }
                }
                // An answer recorded while waiting (a pause, a hold) or the checkpoint (a pause,
                // a cancel, a lost lease) stopped the run: this target waits, unsent.
                if run.stopSubmitting {
                    run.retries.append(ChunkRun.Retry(at: 0, target: target))
                    break
                }
            }
            let ownPayload = chunk.targets.payload(at: target)
            if let held = context.throttle.heldUntil(tokens.hex(at: target)) {
                // APNs is throttling this device: wait with the notification that drew the 429.
                run.retries.append(ChunkRun.Retry(at: now + held.timeIntervalSinceNow, target: target, dueAt: held,
                                                  reason: "TooManyRequests: the device token is throttled"))
                continue
            }
            let environment = run.environments[target]
            if sender.heldByEnvironmentDisagreement(job: chunk.targets.environment(at: target) ?? chunk.environment, registered: nil) != nil {
                // Live instances disagree on the app's environment, the only thing that routes
                // this target: the chunk stops before it, as for a held topic. A fresh target is
                // given back unsent, so the chunk is released at it and nothing pins it to this
                // instance's environment (a parked target keeps the environment it is parked with);
                // a retry come due waits with the chunk's retries.
                if !run.giveBackUnsent(target) {
                    run.retries.append(ChunkRun.Retry(at: 0, target: target))
                }
                run.stopSubmitting = true
                run.held = true
                break
            }
            if sender.hasHolds, sender.heldReason(AppSender.topicKey(run.topic, environment)) != nil {
                // Its topic is held in this target's environment: the chunk stops before it and
                // is released at its watermark, the target unsent.
                run.retries.append(ChunkRun.Retry(at: 0, target: target))
                run.stopSubmitting = true
                run.held = true
                break
            }
            // The chunk's notification was checked for an earlier target: this one's token is all that is new.
            if ownPayload == nil, let template = run.templates[environment] {
                // A text in the chunk that is not a token of 32 to 100 bytes in hex.
                guard tokens.isValid(at: target) else {
                    fail(run, target, "BadDeviceToken")
                    continue
                }
                let tag = CompletionQueue.tag(worker: index, generation: run.generation, index: target)
                do {
                    if batchTemplate !== template {
                        submitBatched()
                        try template.refreshAuthorization()
                        batchTemplate = template
                    }
                    batch.append((tokens.withBytes(at: target) { template.requestWithCurrentHeaders(forTokenBytes: $0) }, tag))
                } catch {
                    context.logger.error("cannot build a request for app \(chunk.app): \(error)", ("app", .string(chunk.app)))
                    run.retries.append(ChunkRun.Retry(at: 0, target: target))
                    run.stopSubmitting = true
                    run.buildFailed = true
                    break
                }
                run.sent(target, to: environment, authorization: template.authorization)
                inFlight += 1
                if batch.count >= Self.submitBatch {
                    submitBatched()
                    now = RateLimiter.monotonicSeconds()
                }
                continue
            }
            // The notification is built on its own: what was batched goes first, in order.
            submitBatched()
            let notification: APNsNotification
            do {
                notification = try sender.factory.notification(.init(
                    token: tokens.hex(at: target), pushType: chunk.pushType, priority: chunk.priority, expiration: chunk.expiration,
                    collapseID: chunk.collapseID, apnsID: nil, payload: ownPayload ?? chunk.payload ?? "{}"))
            } catch {
                if error.label == NotificationFactory.tokenAuthenticationRequired {
                    tokenWork(run, target)
                } else {
                    refused(run, target, error)
                    fail(run, target, error.label)
                }
                continue
            }
            let client: APNsClient
            do {
                client = try sender.client(for: environment, lane: .campaign)
            } catch let missing as AppSender.NoCredentials {
                noCredentials(run, target, missing.environment)
                continue
            } catch {
                let failed = context.connectionSetupFailed(app: chunk.app, lane: .campaign, environment: environment, error: error)
                let retryAt = RateLimiter.monotonicSeconds() + Self.setupRetrySeconds
                run.retries.append(ChunkRun.Retry(at: retryAt, target: target, dueAt: Timestamp().addingTimeInterval(Self.setupRetrySeconds),
                                                  reason: failed.description))
                // Targets of the other environment still to send (a chunk of registered tokens
                // may mix both): they go on; this one's wait.
                let otherAhead = run.environments[min(run.next, run.count)...].contains { $0 != environment }
                    || run.retries.contains { run.environments[$0.target] != environment }
                if otherAhead {
                    run.setupFailedUntil[environment] = (retryAt, failed.description)
                    continue
                }
                // Parked with the chunk's retries, due in 10 s as a job's is, and the campaign
                // leased again no sooner: released and leased at once, the chunk came back at
                // every turn of the worker, one target and one error line each time.
                run.stopSubmitting = true
                run.setupFailed = true
                break
            }
            let authorization: String?
            do {
                authorization = try client.submit(notification, tag: CompletionQueue.tag(worker: index, generation: run.generation, index: target))
            } catch {
                context.logger.error("cannot build a request for app \(chunk.app): \(error)", ("app", .string(chunk.app)))
                run.retries.append(ChunkRun.Retry(at: 0, target: target))
                run.stopSubmitting = true
                run.buildFailed = true
                break
            }
            if ownPayload == nil, run.templates[environment] == nil {
                run.templates[environment] = try? NotificationTemplate(client: client, notification: notification)
            }
            run.sent(target, to: environment, authorization: authorization)
            inFlight += 1
        }
    }

    /// `target` goes to `environment`, which this instance has no credentials for: left to a
    /// live instance that has them (parked when the run ends, for its parked claim), else
    /// dead-lettered with the error line naming the setting to add.
    private func noCredentials(_ run: ChunkRun, _ target: Int, _ environment: PushdConfig.Environment) {
        switch context.coverage.decide(app: run.chunk.app, environment: environment, lane: .campaign) {
        case .leave:
            run.leave(target, reason: EnvironmentCoverage.leftReason(environment))
        case .deadLetter:
            fail(run, target, AppSender.NoCredentials(app: run.chunk.app, environment: environment).label)
        }
    }

    /// `target` is of a push type APNs takes only with token authentication, and this instance
    /// has a certificate for the app: left to a live instance that has a token key (parked when
    /// the run ends, for its parked claim), else dead-lettered with the error line saying none has.
    private func tokenWork(_ run: ChunkRun, _ target: Int) {
        switch context.coverage.decideTokenWork(app: run.chunk.app, lane: Lane.campaign.rawValue) {
        case .leave:
            run.leave(target, reason: EnvironmentCoverage.tokenLeftReason(app: run.chunk.app))
        case .deadLetter:
            fail(run, target, NotificationFactory.tokenAuthenticationRequired)
        }
    }

    /// Lines about targets the notification rules refuse, one per campaign per minute at most.
    private var refusedTargetLines = LogGate<Int64>(quietSeconds: 60)

    /// `target` breaks a notification rule and fails as `rejection.label`, which alone is kept
    /// with the failure and in the dead-letter metric (a closed set): its detail, which says
    /// what to fix ("payload: 5020 bytes; alert payloads may have at most 4096"), goes to the log.
    private func refused(_ run: ChunkRun, _ target: Int, _ rejection: NotificationFactory.Rejection) {
        let chunk = run.chunk
        guard let unlogged = refusedTargetLines.admit(chunk.campaignID, now: RateLimiter.monotonicSeconds()) else { return }
        let since = unlogged > 0 ? " (\(unlogged) more since the last line)" : ""
        let token = String(chunk.targets.tokens.hex(at: target).prefix(8))
        context.logger.error("campaign \(chunk.campaignID) of app \(chunk.app): target \(target + 1) of chunk \(chunk.chunk) (token \(token)...) cannot be sent and failed as \(rejection.label)\(since): \(rejection.detail)",
                             ("event", "campaign_target_refused"), ("campaign", .int(chunk.campaignID)), ("app", .string(chunk.app)),
                             ("chunk", .int(Int64(chunk.chunk))), ("target", .int(Int64(target + 1))), ("token_prefix", .string(token)),
                             ("reason", .string(rejection.label)), ("detail", .string(rejection.detail)), ("unlogged", .int(Int64(unlogged))))
    }

    /// A target that can never be sent (a bad token, a notification APNs would refuse, no
    /// credentials for its host anywhere in the fleet) fails at once.
    private func fail(_ run: ChunkRun, _ target: Int, _ reason: String) {
        run.resolve(target, .failed(reason))
        counted(failure: reason, app: run.chunk.app)
    }

    /// A target failed unsent or given up on: counted in the metric, the summary line and the tally.
    private func counted(failure reason: String, app: String) {
        context.metrics.deadLetter(app: app, lane: Lane.campaign.rawValue, reason: reason).increment()
        context.operatorLog.deadLettered(reason: reason)
        context.tally.add(context.tally.failed)
    }

    /// Records one answer for the run that sent it; answers of runs given up on are dropped.
    /// Returns false when no run sent it.
    @discardableResult
    private func record(_ result: DispatchResult) -> Bool {
        let generation = CompletionQueue.generation(of: result.tag)
        guard let run = runs.first(where: { $0.generation == generation }) else { return false }
        let target = CompletionQueue.index(of: result.tag)
        guard target < run.count, run.resolutions[target] == nil else { return true }
        run.inFlight -= 1
        inFlight -= 1
        // Nothing of the chunk is copied for an answer: its token's hex is made only for a prune
        // or a throttle, read in place from the run.
        let environment = run.environments[target]
        if result.mayHaveReachedServer { run.reachedAPNs[target] = true }
        let outcome = run.sender.outcome(of: result, environment: environment)
        // Counted before the verdict, as in the other lanes: the answer that shows APNs down
        // waits for it like the ones after it, not on its own short backoff.
        context.operatorLog.record(outcome, app: run.app, environment: environment.rawValue, lane: Lane.campaign.rawValue)
        // Asked only of an answer that retries for APNs's sake: most answers take no lock for it.
        var down: Bool?
        let apnsDown = { [context] () -> Bool in
            if let down { return down }
            down = context.operatorLog.isDown(app: run.app, environment: environment.rawValue, lane: Lane.campaign.rawValue)
            return down!
        }
        let verdict = context.notForTopicVerdict(
            policy.verdict(for: outcome, attempt: run.attempts[target], expiration: run.expiration,
                           firstAttemptAt: run.firstAttempt(of: target), now: Timestamp(), apnsDown: apnsDown(),
                           random: &random),
            sender: run.sender, topic: run.topic, environment: environment, source: .campaign(run.chunk.campaignID),
            token: run.chunk.targets.tokens.hex(at: target))
        switch handle(verdict, of: outcome, app: run.app, token: run.chunk.targets.tokens.hex(at: target), pushType: run.pushType,
                      sender: run.sender, environment: environment, authorization: run.authorizations[target]) {
        case .sent:
            run.resolve(target, .sent)
        case .pruned(let reason, let prune):
            run.resolve(target, .pruned(reason))
            run.prunes.append(prune)
        case .retry(let at, let reason, let countsAsAttempt):
            // A send APNs never answered, or answered for reasons of its own, does not use up the target's attempts.
            if !countsAsAttempt { run.attempts[target] -= 1 }
            run.retries.append(ChunkRun.Retry(at: RateLimiter.monotonicSeconds() + max(0, at.timeIntervalSinceNow), target: target,
                                              dueAt: at, reason: reason,
                                              waitsForAPNs: OutcomePolicy.unavailableReasonPrefixes.contains { reason.hasPrefix($0) } && apnsDown()))
        case .failed(let reason):
            run.resolve(target, .failed(reason))
        case .pause(let reason):
            run.stopSubmitting = true
            run.waitOut(target, reason: reason)
        case .hold(let reason):
            run.stopSubmitting = true
            run.held = true
            run.waitOut(target, reason: reason)
        }
        return true
    }

    /// Writes the run's progress, which extends its lease, and learns whether its campaign
    /// was paused or cancelled meanwhile.
    private func checkpoint(_ run: ChunkRun, on connection: PGConnection) throws {
        let chunk = run.chunk
        guard !run.finished else { return }
        run.advance()
        let written: (counted: ChunkProgress, directive: ChunkDirective)?
        do {
            switch try settle(run, on: connection) {
            case .clear:
                written = try write(run, .checkpoint, on: connection)
            case .waits:
                written = nil
            case .recorded:
                // Told there, its lease extended; what was answered since goes with the next one.
                return
            }
        } catch let error as PGError where error.code == .lockNotAvailable && !connection.isInTransaction {
            // The progress stays with the run and is written by the next checkpoint.
            rowLocked(error, chunk, writing: "checkpoint")
            run.lastCheckpoint = RateLimiter.monotonicSeconds()
            return
        }
        guard let written else {
            // The progress waits for the transaction in doubt, for the next checkpoint.
            run.lastCheckpoint = RateLimiter.monotonicSeconds()
            return
        }
        checkpointed(run, counted: written.counted, directive: written.directive, on: connection)
    }

    /// What follows a checkpoint that committed, `counted` written (the run's progress
    /// already has it taken off): told at once, or on the next session after its COMMIT's reply
    /// was lost.
    private func checkpointed(_ run: ChunkRun, counted: ChunkProgress, directive: ChunkDirective, on connection: PGConnection) {
        let chunk = run.chunk
        switch directive {
        case .proceed: break
        case .stop:
            run.stopSubmitting = true
        case .leaseLost:
            run.stopSubmitting = true
            run.leaseLost = true
            keeper.drop(chunk)
        case .refused(let held):
            // Its progress is written; the chunk is released at its watermark when its answers are in.
            context.reportRefusedCampaign(held)
            run.stopSubmitting = true
        }
        // What a lost chunk's checkpoint did not write is not counted here either: the metric
        // follows the campaign's counters.
        if directive != .leaseLost { countProcessed(counted, app: chunk.app) }
        run.checkpointedPosition = counted.position
        run.lastCheckpoint = RateLimiter.monotonicSeconds()
        // Told once the checkpoint's effects are in place: a query failing here (the
        // connection lost) leaves no count to write twice and no lost chunk to send on.
        tellAfterWrite(chunk, "checkpoint") {
            switch directive {
            case .stop(let status):
                context.logger.debug("campaign \(chunk.campaignID) is \(status.rawValue): stopping its chunk \(chunk.chunk)",
                                     ("campaign", .int(chunk.campaignID)))
                try logCampaign(chunk.campaignID, status.rawValue, on: connection)
            case .leaseLost:
                try lostChunk(chunk, uncounted: counted, on: connection)
            case .proceed, .refused:
                break
            }
        }
    }

    /// Runs `tell` (log lines that read the database) after `chunk`'s `write` committed: a
    /// failure is logged and counted, not thrown, since the write's effects are already the
    /// run's and thrown, the caller would redo it. A lost connection shows at the next query.
    private func tellAfterWrite(_ chunk: CampaignChunk, _ write: String, _ tell: () throws -> Void) {
        do {
            try tell()
        } catch {
            context.databaseError(error)
            context.logger.warning("the \(write) of chunk \(chunk.chunk) of campaign \(chunk.campaignID) is written, but what it found could not be logged: \(error)",
                                   ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))))
        }
    }

    /// Finishes a run with nothing in flight: the chunk is done (its retries parked) or, when
    /// it stopped early, released at its watermark for whichever worker leases it next.
    /// Returns false when the campaign's row stayed locked: the run stays, its lease kept, and
    /// the finish is tried again a checkpoint interval later.
    private func finish(_ run: ChunkRun, on connection: PGConnection) throws -> Bool {
        let chunk = run.chunk
        if run.finished { return true }
        // Another worker holds the chunk now; it resumes from the last checkpoint.
        if run.leaseLost {
            keeper.drop(chunk)
            abandon(chunk)
            return true
        }
        // Stopped for an APNs outage, the newest targets that never reached APNs stay in the
        // chunk. Stopped early, the targets waiting for a retry are parked too: the chunk is
        // then released past every target it sent, and none of those is sent again.
        if run.waitsForAPNs { run.giveBackUnsentTail() }
        run.parkRetries()
        run.advance()
        switch try settle(run, on: connection) {
        case .clear: break
        case .waits:
            run.finishNotBefore = RateLimiter.monotonicSeconds() + checkpointInterval
            return false
        case .recorded:
            // A finish or release learnt of there is done with; a checkpoint may have found
            // the lease lost, or be followed by the finish.
            if run.finished { return true }
        }
        // A checkpoint learnt of there may have found the lease lost.
        if run.leaseLost {
            keeper.drop(chunk)
            abandon(chunk)
            return true
        }
        let complete = run.watermark == run.count
        let written: (counted: ChunkProgress, directive: ChunkDirective)
        do {
            // Put off before the release: released first, another worker could lease the chunk
            // in between and fail on its connections at once too.
            if run.setupFailed {
                givePaceBack(run, on: connection)
                do {
                    try store.deferLeases(connection, campaignID: chunk.campaignID, seconds: Self.setupRetrySeconds)
                } catch let error as PGError where error.code != .lockNotAvailable && !connection.isInTransaction {
                    // Only a pause it would have made: the chunk is released all the same.
                    context.logger.warning("could not put off campaign \(chunk.campaignID)'s leases after a connection setup failure: \(error)",
                                           ("campaign", .int(chunk.campaignID)), ("app", .string(chunk.app)))
                }
            }
            written = try write(run, complete ? .finish : .release, on: connection)
        } catch let error as PGError where error.code == .lockNotAvailable && !connection.isInTransaction {
            rowLocked(error, chunk, writing: complete ? "finish" : "release")
            run.finishNotBefore = RateLimiter.monotonicSeconds() + checkpointInterval
            return false
        }
        finished(run, complete: complete, counted: written.counted, directive: written.directive, on: connection)
        return true
    }

    /// What follows a finish or release that committed, `counted` written: told at once, or on
    /// the next session after its COMMIT's reply was lost. The run is done with from here.
    private func finished(_ run: ChunkRun, complete: Bool, counted: ChunkProgress, directive: ChunkDirective, on connection: PGConnection) {
        let chunk = run.chunk
        run.finished = true
        keeper.drop(chunk)
        // Released early: its unsent targets' time at the cap goes back, the campaign running or
        // paused (resumed, it is leased at once; resumed before its chunk saw the pause, the
        // chunk went on and keeps its time). Not: one stopped for APNs gave it back as it
        // stopped; one stopped by a setup failure gave it back before its deferral, which must
        // stand; after a request that could not be built, the reservation is what keeps the
        // campaign from being leased and released again at once, a line and a parked target
        // each time.
        if !complete, directive == .proceed || directive == .stop(.paused), !run.waitsForAPNs, !run.setupFailed, !run.buildFailed {
            givePaceBack(run, on: connection)
        }
        context.logger.debug("\(complete ? "finished" : "released") chunk \(chunk.chunk) of campaign \(chunk.campaignID)",
                             ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))),
                             ("parked", .int(Int64(run.parked.count))), ("ms", .int(Int64(Timestamp().timeIntervalSince(run.leasedAt) * 1000))))
        if case .refused(let held) = directive { context.reportRefusedCampaign(held) }
        if directive != .leaseLost { countProcessed(counted, app: chunk.app) } else { abandon(chunk) }
        // A query failing now must not leave the run to be finished again.
        tellAfterWrite(chunk, complete ? "finish" : "release") {
            if !complete, run.held { try deferHeldCampaign(chunk.campaignID, on: connection) }
            if directive == .stop(.done) { try logCampaign(chunk.campaignID, "finished", on: connection) }
            if directive == .leaseLost { try lostChunk(chunk, uncounted: counted, on: connection) }
        }
    }

    /// A rate-capped campaign's chunk that stops early will not send its targets from
    /// `run.next` on, and the time its lease reserved for them at the cap is given back: the
    /// campaign's next lease is not held off by time no target uses.
    /// - Stopped for an APNs outage (`stopWhileDown`): at once, not at the release, which
    ///   waits for the answers in flight (a probe's timeout, when APNs does not answer). Else
    ///   each probe's lease held the next lease off by a whole chunk's time, by then the probe
    ///   was due again and took the next chunk of the down environment, and the campaign's
    ///   chunks of the other environment, which APNs answers, were not leased for as long as
    ///   the outage lasted.
    /// - Released early otherwise (`finish`: the instance stops, its app or the campaign is
    ///   paused, a scope it sends to is held while it sends): at the release. Else the
    ///   instance that came next after a restart waited out the rest of the chunk's time
    ///   (100 s for 1,000 targets at 10/s) before it sent anything.
    /// - Stopped by a connection that could not be set up: before its deferral of
    ///   `setupRetrySeconds` is written, which must stand. Else the campaign waited out the
    ///   chunk's time, not the 10 s, after a CA file was missing for a moment.
    /// Only this lease's reservation: a deferral ending after it, or a lease since, is left
    /// alone (`CampaignStore.givePaceBack`); a hold's deferral is written after the release.
    /// A failure only leaves the next lease at its time: logged and counted.
    private func givePaceBack(_ run: ChunkRun, on connection: PGConnection) {
        givePaceBack(run.chunk, unsent: run.count - run.next, on: connection)
    }

    /// The same for `chunk` released untouched (`start`): none of its targets was sent.
    /// `quietly`: a failure is neither logged nor counted (the caller tells its own).
    private func givePaceBack(_ chunk: CampaignChunk, unsent: Int, on connection: PGConnection, quietly: Bool = false) {
        guard let rate = chunk.rateLimit, rate > 0 else { return }
        let leasedAt = chunk.leaseUntil.timeIntervalSince1970 - leaseSeconds
        let reservedUntil = Timestamp(timeIntervalSince1970: leasedAt + Double(chunk.size - chunk.startIndex) / Double(rate))
        do {
            try store.givePaceBack(connection, campaignID: chunk.campaignID, unsent: unsent, rate: rate, reservedUntil: reservedUntil)
        } catch {
            guard !quietly else { return }
            context.databaseError(error)
            guard paceLines.admit(chunk.campaignID, now: RateLimiter.monotonicSeconds()) != nil else { return }
            context.logger.warning("could not give back the time campaign \(chunk.campaignID)'s lease of chunk \(chunk.chunk) reserved at its cap of \(rate)/s for the \(unsent) targets it stopped before: the campaign's next lease may wait up to \(Int((Double(unsent) / Double(rate)).rounded(.up))) s: \(error)",
                                   ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))), ("app", .string(chunk.app)))
        }
    }

    /// A checkpoint or finish of `chunk` matched no row: the chunk is no longer this worker's,
    /// and `uncounted` was not written. Either its lease ran out and another worker took it
    /// over (and sends again from its last checkpoint), or its campaign was cancelled and the
    /// chunk dropped (`CampaignStore.dropTargets` keeps chunks being sent, so only once the
    /// lease had run out). The line says which.
    private func lostChunk(_ chunk: CampaignChunk, uncounted: ChunkProgress, on connection: PGConnection) throws {
        let counts = "\(uncounted.sent) sent and \(uncounted.failed) failed since its last checkpoint are not counted"
        if let campaign = try store.campaign(connection, id: chunk.campaignID), campaign.status == .cancelled {
            context.logger.warning("chunk \(chunk.chunk) of campaign \(chunk.campaignID) was dropped because the campaign was cancelled while its lease had run out; \(counts)",
                                   ("event", "campaign_chunk_dropped"), ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))),
                                   ("sent", .int(Int64(uncounted.sent))), ("failed", .int(Int64(uncounted.failed))))
            return
        }
        context.logger.warning("lost the lease of chunk \(chunk.chunk) of campaign \(chunk.campaignID): another worker took it over and sends it again from its last checkpoint; \(counts)",
                               ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))))
    }

    /// Lines about campaign rows that stayed locked, one per campaign per minute at most.
    private var lockedRowLines = LogGate<Int64>(quietSeconds: 60)

    /// Lines about a give-back of a capped campaign's time that failed, one per campaign a minute.
    private var paceLines = LogGate<Int64>(quietSeconds: 60)

    /// A write of `chunk`'s progress waited `lock_timeout` for its campaign's row, which another
    /// session holds (an operator's open transaction, a long statement). Nothing is lost: the
    /// chunk keeps its lease (`LeaseKeeper`) and its progress, and the write is tried again; the
    /// runs are not given up, as they are when the database is gone, which sent every target
    /// since their checkpoints again. Counted in `pushd_database_errors_total{reason="55"}`.
    private func rowLocked(_ error: PGError, _ chunk: CampaignChunk, writing: String) {
        context.databaseError(error)
        guard let unlogged = lockedRowLines.admit(chunk.campaignID, now: RateLimiter.monotonicSeconds()) else { return }
        let since = unlogged > 0 ? " (\(unlogged) more since the last line)" : ""
        context.logger.warning("campaign worker \(index): the \(writing) of chunk \(chunk.chunk) of campaign \(chunk.campaignID) waited lock_timeout for the campaign's row, which another session holds locked; the chunk keeps its lease and progress and is written again shortly\(since): \(error.message)",
                               ("event", "campaign_row_locked"), ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))),
                               ("worker", .int(Int64(index))), ("unlogged", .int(Int64(unlogged))))
    }

    /// `run` has no more fresh targets to pace (or stopped): the lease may hand this process
    /// its campaign's next chunk, and this worker tries it at the campaign's next moment (when a
    /// cap the lease schedule paces makes it due), not a lease retry interval later.
    private func stopPacing(_ run: ChunkRun) {
        limiter.stopPacing(campaign: run.chunk.campaignID)
        run.pacing = false
        if let moment = limiter.nextMoment(campaign: run.chunk.campaignID) { nextLeaseTry = min(nextLeaseTry, moment) }
    }

    /// After a database error that is not transient (`PGError.Code.isTransient`: not one of
    /// the server's moment, so the runs' state may be what the database refuses): the runs are
    /// forgotten without a word to the database; their leases expire and another worker
    /// resumes each chunk from its checkpoint, sending again what was answered since. One
    /// error line per run says how many; each such chunk is counted in
    /// `pushd_lease_takeovers_total{lane="campaign"}` when it is taken over.
    private func abandonRuns(after error: any Error) {
        for run in runs {
            keeper.drop(run.chunk)
            if run.pacing { stopPacing(run) }
            let chunk = run.chunk
            abandon(chunk)
            let unrecorded = run.answeredSinceCheckpoint
            // Their tokens pruned, they are not counted when answered again.
            let inDoubt = run.writeInDoubt.map { "; the transaction writing \(Self.what($0)) lost its session and was not asked whether it committed: any tokens it pruned are not counted" } ?? ""
            context.logger.error("campaign worker \(index) gives up chunk \(chunk.chunk) of campaign \(chunk.campaignID) after a database error that may concern its state: \(unrecorded) of its targets answered since its last checkpoint (target \(run.checkpointedPosition)) are not recorded and are sent again when another worker takes the chunk over, once its lease ends within \(Int(leaseSeconds)) s; \(run.inFlight) more were awaiting their answers\(inDoubt): \(error)",
                                 ("event", "campaign_chunk_given_up"), ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))),
                                 ("app", .string(chunk.app)), ("worker", .int(Int64(index))), ("unrecorded", .int(Int64(unrecorded))),
                                 ("in_flight", .int(Int64(run.inFlight))), ("from", .int(Int64(run.checkpointedPosition))),
                                 ("sqlstate", .string((error as? PGError)?.code.raw ?? "")))
        }
        context.metrics.chunksSending.add(-Double(runs.count))
        runs.removeAll()
        inFlight = 0
    }

    /// Writes the prunes the run's answers asked for and, with `checkpoint`, its progress (which
    /// extends its lease), in one transaction, and counts them once it committed: the prunes in
    /// `pushd_tokens_pruned_total` and the breaker of a DeviceTokenNotForTopic or BadDeviceToken
    /// run (which restores the prunes of a run that trips), in the campaign's `pruned` and
    /// `kept_tokens` (what the prune did to the registered tokens, not the answers), with the
    /// checkpoint or with the run's next write; the checkpoint's counts are taken off the run's
    /// progress. When the session ends during the COMMIT, only the server knows whether they
    /// were written: the transaction is kept (`ChunkRun.writeInDoubt`) and asked after on the
    /// next session (`settle`) before anything is written again. Written again without asking, a
    /// prune found its tokens already pruned and counted none of them (and a run that tripped
    /// later left them pruned), and a checkpoint added its counts to the campaign twice.
    /// Returns what the checkpoint wrote and answered; nil with no checkpoint.
    private func write(_ run: ChunkRun, _ record: ChunkRun.Record, on connection: PGConnection) throws -> (counted: ChunkProgress, directive: ChunkDirective) {
        let count = run.prunes.count
        let base = run.progress
        do {
            let transaction = try TransactionFate.begin(on: connection)
            run.writeInDoubt = ChunkRun.WriteInDoubt(transaction: transaction, backend: connection.backendPID, prunes: count, record: record)
            let outcome = count > 0 ? try context.writePrunes(run.prunes, on: connection) : PruneOutcome()
            run.writeInDoubt?.outcome = outcome
            var counted = base
            counted.pruned += outcome.invalidated.count
            counted.keptTokens += outcome.keptByTimestamp.count
            let directive = switch record {
            case .checkpoint: try store.checkpoint(connection, run.chunk, counted, leaseSeconds: leaseSeconds)
            case .finish: try store.finish(connection, run.chunk, counted, parking: run.parked)
            case .release: try store.release(connection, run.chunk, counted, parking: run.parked)
            }
            run.writeInDoubt?.recorded = (base, counted, directive)
            // The progress's statement makes its transaction's commit asynchronous, as
            // bookkeeping: prunes are not, and commit as the session would.
            try connection.execute(script: count > 0 ? "SET LOCAL synchronous_commit TO DEFAULT; COMMIT" : "COMMIT")
            run.writeInDoubt = nil
            committed(outcome, prunes: count, base: base, of: run)
            return (counted, directive)
        } catch {
            // The session still there, the transaction is undone, and all of it is written again
            // with the next write. Else it is kept for the next session to ask.
            if connection.isOpen, (try? connection.execute(script: "ROLLBACK")) != nil { run.writeInDoubt = nil }
            throw error
        }
    }

    /// What `settle` found.
    enum Settled: Equatable {
        /// Nothing in doubt, or it is to be written again.
        case clear
        /// The transaction still runs on the server: the run's writes wait.
        case waits
        /// It committed the run's progress, now told (`checkpointed`, `finished`).
        case recorded
    }

    /// What became of the transaction that was writing the run's prunes and progress when its
    /// session ended (`write`); `.clear` at once when there is none. Committed, what it wrote is
    /// counted and its checkpoint, finish or release told (`.recorded`); rolled back, or unknown,
    /// all of it is written again (unknown, any tokens it pruned stay uncounted and a
    /// checkpoint's counts may be written twice: said in a warning). Still running on the server
    /// (a session cut in the network that the server has not noticed), it is ended first, once;
    /// `.waits` while it still runs after that, for at most a lease's length, after which it is taken as unknown
    /// (what is written again waits for its row locks, and it for
    /// `idle_in_transaction_session_timeout`). One line when its fate is learnt, and one when it
    /// is first found still running.
    private func settle(_ run: ChunkRun, on connection: PGConnection) throws -> Settled {
        guard let doubt = run.writeInDoubt else { return .clear }
        var fate = try TransactionFate.fate(of: doubt.transaction, on: connection)
        var ended = ""
        if fate == .inProgress, doubt.runningSince == nil {
            let ending = try TransactionFate.endRunning(doubt.transaction, backend: doubt.backend, on: connection)
            fate = try TransactionFate.fate(of: doubt.transaction, on: connection)
            if ending.signalled {
                let result = fate == .committed || fate == .aborted ? fate.rawValue : "running"
                context.metrics.staleTransaction(lane: Lane.campaign.rawValue, result: result).increment()
                ended = " (it was still running on the database server, whose backend \(doubt.backend) was told to end)"
            }
        }
        let now = RateLimiter.monotonicSeconds()
        let chunk = run.chunk
        let uncounted = "any tokens it pruned are not counted (the campaign's pruned, pushd_tokens_pruned_total) nor restored with a run of DeviceTokenNotForTopic or BadDeviceToken answers that trips"
            + (doubt.record != .checkpoint ? "" : ", and its checkpoint's counts may be counted twice in the campaign's")
            + (doubt.record == .checkpoint ? "" : ", and its \(doubt.record.rawValue) written again may take its chunk for one another worker took over")
        let said: String
        var waits = false
        switch fate {
        case .inProgress:
            if let since = doubt.runningSince {
                // Told once; taken as unknown after a lease's length.
                guard now - since >= leaseSeconds else { return .waits }
                said = "it has still been running on the database server \(Int(now - since)) s later: what it wrote is written again once it lets go of its rows, and \(uncounted)"
            } else {
                run.writeInDoubt?.runningSince = now
                waits = true
                said = "it still runs on the database server: the chunk's prunes and progress wait for it to end, for up to \(Int(leaseSeconds)) s"
            }
        case .committed:
            // Its COMMIT was sent: every statement before it had answered.
            let outcome = doubt.outcome ?? PruneOutcome()
            if let recorded = doubt.recorded { committed(outcome, prunes: doubt.prunes, base: recorded.base, of: run) }
            said = "its COMMIT had gone through: \(outcome.invalidated.count) tokens pruned and \(outcome.keptByTimestamp.count) kept by APNs' timestamp are counted now"
                + ", and what its \(doubt.record.rawValue) wrote is not written again"
        case .aborted:
            said = "it was rolled back: all of it is written again"
        case .unknown:
            said = "the database server could not say whether it committed: all of it is written again, and \(uncounted)"
        }
        if !waits { run.writeInDoubt = nil }
        let during = doubt.recorded == nil ? "while writing it" : "during its COMMIT"
        let message = "campaign worker \(index): the transaction writing \(Self.what(doubt)) of chunk \(chunk.chunk) of campaign \(chunk.campaignID) lost its session \(during)\(ended); \(said)"
        let fields: [(String, LogValue)] = [("event", "campaign_write_in_doubt"), ("campaign", .int(chunk.campaignID)), ("chunk", .int(Int64(chunk.chunk))),
                                            ("worker", .int(Int64(index))), ("prunes", .int(Int64(doubt.prunes))),
                                            ("record", .string(doubt.record.rawValue)), ("result", .string(fate.rawValue))]
        context.logger.write(fate == .committed || fate == .aborted ? .notice : .warning, message, fields: fields)
        if fate == .committed, let recorded = doubt.recorded {
            if doubt.record == .checkpoint {
                checkpointed(run, counted: recorded.counted, directive: recorded.directive, on: connection)
            } else {
                finished(run, complete: doubt.record == .finish, counted: recorded.counted, directive: recorded.directive, on: connection)
            }
            return .recorded
        }
        return waits ? .waits : .clear
    }

    /// What a transaction in doubt was writing, for its lines.
    static func what(_ doubt: ChunkRun.WriteInDoubt) -> String {
        doubt.prunes == 0 ? "its \(doubt.record.rawValue)" : "\(doubt.prunes) prunes and its \(doubt.record.rawValue)"
    }

    /// Counts the first `prunes` of the run's prunes, which `outcome` says were committed, and
    /// takes `base` off the run's progress, written with them (their counts added).
    private func committed(_ outcome: PruneOutcome, prunes: Int, base: ChunkProgress, of run: ChunkRun) {
        context.prunesCommitted(outcome)
        run.prunes.removeFirst(prunes)
        run.checkpointed(base)
    }

    /// Sends a claimed batch of parked targets of one campaign, records what became of each
    /// (parking the ones that must wait again) and commits. Returns how long to wait before
    /// claiming parked targets again: above 0 when the campaign's cap, shared with the other
    /// workers, had no send left for this batch in its time.
    private func sendParked(_ batch: ParkedBatch, on connection: PGConnection) throws -> Double {
        let claimedAt = RateLimiter.monotonicSeconds()
        var outcomes = ParkedOutcomes()
        guard let sender = context.senders[batch.app], sender.pausedReason == nil,
              !(sender.hasHolds && batch.targets.contains { heldReason(sender, pushType: batch.pushType,
                                                                       environment: sender.environment(job: $0.environment, registered: nil)) != nil })
        else {
            // The app is paused (or unknown here), or the topic of some of them is held: they
            // stay parked for a while, untouched.
            outcomes.retries = batch.targets.map { target in
                var target = target
                target.dueAt = Timestamp().addingTimeInterval(30)
                return target
            }
            try settleParked(batch, outcomes, on: connection)
            return 0
        }
        context.metrics.claimed(lane: Lane.campaign.rawValue).increment(by: UInt64(batch.targets.count))
        generation &+= 1
        let expiration = batch.expiration.map { Int64($0.timeIntervalSince1970) }
        let rate = batch.rateLimit ?? context.config.apps.first(where: { $0.name == batch.app })?.campaignRate
            ?? context.config.defaultCampaignRate
        var prunes = [ParkedPlace: TokenPrune]()
        var inFlight = [Int: (target: ParkedTarget, authorization: String?)]()
        // The claim lives in the session's open transaction: should the session end meanwhile,
        // every target of the batch is parked again as it was, due, for any claimer to send again.
        // Looked at between answers, so that the batch is taken again at once on a new session.
        var claim = SentBatchClaim(held: batch.targets.map(\.place), connection: connection, transaction: batch.transaction)
        var taken = batch
        var nextCheck = RateLimiter.monotonicSeconds() + SentBatchTiming.sessionCheckSeconds

        func again(_ target: ParkedTarget, at time: Timestamp, reason: String? = nil, countsAsAttempt: Bool = false) {
            var target = target
            target.dueAt = time
            if countsAsAttempt { target.attempts += 1 }
            if let reason { target.lastError = reason }
            outcomes.retries.append(target)
        }

        /// A target of an environment this instance has no credentials for, claimed before it
        /// learnt that another live instance has them (its claim leaves such targets alone):
        /// parked again, unspent, for that one; with none in the fleet, dead-lettered.
        func leaveOrFail(_ target: ParkedTarget, _ environment: PushdConfig.Environment) {
            switch context.coverage.decide(app: batch.app, environment: environment, lane: .campaign) {
            case .leave(let seconds):
                again(target, at: Timestamp().addingTimeInterval(seconds), reason: EnvironmentCoverage.leftReason(environment))
            case .deadLetter:
                let label = AppSender.NoCredentials(app: batch.app, environment: environment).label
                outcomes.failed(target, reason: label)
                counted(failure: label, app: batch.app)
            }
        }

        let idle = QueueSession.idleInTransactionSeconds(waitingOnAnswersFor: context.config.apns.answerWaitSeconds)
        let (sendBy, answersBy) = Self.parkedBatchDeadlines(claimedAt: claimedAt, sendSeconds: context.config.parkedBatchSeconds,
                                                            idleSeconds: Double(idle))
        // Set once the batch's time to send is spent: the targets left stay parked as they were.
        var outOfTime = false
        var pause = 0.0
        var answers: [DispatchResult] = []
        let topic = sender.factory.topic(for: PushType(rawValue: batch.pushType) ?? .alert)

        /// Takes answers until `moment` (monotonic seconds), and no longer than every request of
        /// the batch is answered when `untilAnswered`: the batch's own are settled, those of
        /// the chunks being sent recorded. A wait for the cap's next send so took no answer, and
        /// the answers of the chunks piled up behind it. The worker beats every second: the
        /// keeper takes a silent worker for a hung one.
        func takeAnswers(until moment: Double, untilAnswered: Bool) {
            while !(untilAnswered && inFlight.isEmpty) {
                let now = RateLimiter.monotonicSeconds()
                guard now < moment else { return }
                keeper.beat(worker: index)
                if now >= nextCheck {
                    parkedRecorder.keep(&claim) { claim in try retakeParked(&taken, &claim) }
                    nextCheck = RateLimiter.monotonicSeconds() + SentBatchTiming.sessionCheckSeconds
                }
                completions.take(atLeast: untilAnswered ? 1 : .max, until: min(moment, now + 1, nextCheck), into: &answers)
                for result in answers {
                    // The answers of the chunks being sent keep arriving meanwhile.
                    guard CompletionQueue.generation(of: result.tag) == generation & 0xFF_FFFF else {
                        record(result)
                        continue
                    }
                    guard let (target, authorization) = inFlight.removeValue(forKey: CompletionQueue.index(of: result.tag)) else { continue }
                    settle(target, sender.outcome(of: result, environment: sender.environment(job: target.environment, registered: nil)),
                           authorization: authorization)
                }
            }
        }

        // Connections that could not be set up for an environment are not tried again within
        // the batch: its other targets there wait the same way, under one line.
        var setupFailed = [PushdConfig.Environment: AppSender.ConnectionSetupFailed]()
        // Targets waiting for APNs to answer again, by their place in `outcomes.retries`: held
        // back for an outage (`PipelineContext.holdsBackWhileDown`), or answered while it lasted.
        var heldWhileDown = [(retry: Int, environment: PushdConfig.Environment)]()
        for (position, target) in batch.targets.enumerated() {
            keeper.beat(worker: index)
            // The session ended and this target was not taken back, or the retake has not
            // succeeded yet (its row is due again for every claimer): another claimer sends it.
            if claim.cause != nil, claim.connection == nil || !claim.held.contains(target.place) { continue }
            if outOfTime {
                outcomes.retries.append(target)
                continue
            }
            if context.isStopping || sender.pausedReason != nil {
                again(target, at: Timestamp())
                continue
            }
            if let held = context.throttle.heldUntil(target.token) {
                again(target, at: held, reason: "TooManyRequests: the device token is throttled")
                continue
            }
            /// Fails `target` when the campaign's apns-expiration has passed: asked before its
            /// credentials and again after the cap's wait, which can outlast it.
            func failedExpired() -> Bool {
                guard OutcomePolicy.expiredBeforeSending(expiration, now: Timestamp()) != nil else { return false }
                outcomes.failed(target, reason: OutcomePolicy.expiredLabel)
                counted(failure: OutcomePolicy.expiredLabel, app: batch.app)
                return true
            }
            if failedExpired() { continue }
            // Parked with the environment it was first sent to (or left for).
            let environment = sender.environment(job: target.environment, registered: nil)
            if sender.app.credentials(for: environment) == nil {
                leaveOrFail(target, environment)
                continue
            }
            // Before the cap's reservation: a target that cannot go takes no share of the pace.
            if context.holdsBackWhileDown(lastError: target.lastError, app: batch.app, environment: environment.rawValue, lane: Lane.campaign.rawValue),
               let due = policy.dueWhileDown(now: Timestamp(), expiration: expiration, firstAttemptAt: target.firstAttemptAt, random: &random) {
                heldWhileDown.append((outcomes.retries.count, environment))
                again(target, at: due)
                continue
            }
            if let failed = setupFailed[environment] {
                context.metrics.retry(app: batch.app, lane: Lane.campaign.rawValue, reason: AppSender.ConnectionSetupFailed.label).increment()
                again(target, at: Timestamp().addingTimeInterval(Self.setupRetrySeconds), reason: failed.description)
                continue
            }
            let now = RateLimiter.monotonicSeconds()
            if now >= sendBy {
                outOfTime = true
                outcomes.retries.append(target)
                continue
            }
            if let rate {
                switch limiter.reserve(campaign: batch.campaignID, rate: rate, now: now, notAfter: sendBy) {
                case .wait(let wait):
                    if wait > 0 {
                        takeAnswers(until: now + wait, untilAnswered: false)
                        if failedExpired() { continue }
                    }
                case .beyond(let wait):
                    // The other workers have taken the cap's sends up to past this batch's time:
                    // the rest stay parked, and this worker claims again when a send is in reach
                    // (other campaigns' parked targets wait `parkedCapPauseLimit` at most).
                    outOfTime = true
                    pause = min(Self.parkedCapPauseLimit, max(0, wait - context.config.parkedBatchSeconds))
                    outcomes.retries.append(target)
                    continue
                }
            }
            let notification: APNsNotification
            do {
                notification = try sender.factory.notification(.init(
                    token: target.token, pushType: batch.pushType, priority: batch.priority, expiration: batch.expiration,
                    collapseID: batch.collapseID, apnsID: nil, payload: target.payload ?? batch.payload ?? "{}"))
            } catch {
                let reason = error.label
                if reason == NotificationFactory.tokenAuthenticationRequired,
                   case .leave(let seconds) = context.coverage.decideTokenWork(app: batch.app, lane: Lane.campaign.rawValue) {
                    // Claimed before this instance learnt that another one has a token key: that one takes it.
                    again(target, at: Timestamp().addingTimeInterval(seconds), reason: EnvironmentCoverage.tokenLeftReason(app: batch.app))
                    continue
                }
                outcomes.failed(target, reason: reason)
                counted(failure: reason, app: batch.app)
                continue
            }
            let client: APNsClient
            do {
                client = try sender.client(for: environment, lane: .campaign)
            } catch let missing as AppSender.NoCredentials {
                leaveOrFail(target, missing.environment)
                continue
            } catch {
                let failed = context.connectionSetupFailed(app: batch.app, lane: .campaign, environment: environment, error: error)
                setupFailed[environment] = failed
                again(target, at: Timestamp().addingTimeInterval(Self.setupRetrySeconds), reason: failed.description)
                continue
            }
            let authorization: String?
            do {
                authorization = try client.submit(notification, tag: CompletionQueue.tag(worker: index, generation: generation, index: position))
            } catch {
                context.logger.error("cannot build a request for app \(batch.app): \(error)", ("app", .string(batch.app)))
                again(target, at: Timestamp().addingTimeInterval(10))
                continue
            }
            inFlight[position] = (target, authorization)
        }

        func settle(_ target: ParkedTarget, _ outcome: SendOutcome, authorization: String?) {
            let environment = sender.environment(job: target.environment, registered: nil)
            context.operatorLog.record(outcome, app: batch.app, environment: environment.rawValue, lane: Lane.campaign.rawValue)
            // Asked only of a send APNs did not answer or answered with a 5xx.
            var decidedWhileDown = false
            func apnsDown() -> Bool {
                decidedWhileDown = context.operatorLog.isDown(app: batch.app, environment: environment.rawValue, lane: Lane.campaign.rawValue)
                return decidedWhileDown
            }
            let verdict = context.notForTopicVerdict(
                policy.verdict(for: outcome, attempt: target.attempts + 1, expiration: expiration,
                               firstAttemptAt: target.firstAttemptAt, now: Timestamp(), apnsDown: apnsDown(), random: &random),
                sender: sender, topic: topic, environment: environment, source: .campaign(target.campaignID), token: target.token)
            switch handle(verdict, of: outcome, app: batch.app, token: target.token, pushType: batch.pushType, sender: sender,
                          environment: environment, authorization: authorization) {
            case .sent:
                outcomes.sent(target)
            case .pruned(let reason, let prune):
                outcomes.failed(target, reason: reason)
                prunes[target.place] = prune
            case .failed(let reason):
                outcomes.failed(target, reason: reason)
            case .retry(let at, let reason, let countsAsAttempt):
                // Waits for `apns_back`, which cannot reach it while this batch holds its row.
                if decidedWhileDown { heldWhileDown.append((outcomes.retries.count, environment)) }
                again(target, at: at, reason: reason, countsAsAttempt: countsAsAttempt)
            case .pause(let reason), .hold(let reason):
                again(target, at: Timestamp().addingTimeInterval(30), reason: reason)
            }
        }

        // The engine answers each request by its answer deadline: no answer is given up on early,
        // unless waiting longer would outlive the session's idle limit and lose every outcome.
        let timeout = context.config.apns.answerWaitSeconds
        takeAnswers(until: min(RateLimiter.monotonicSeconds() + timeout, answersBy), untilAnswered: true)
        for (target, authorization) in inFlight.values {
            settle(target, .transportFailure("no answer within \(Int(timeout))s"), authorization: authorization)
        }
        // APNs answered again meanwhile (this batch's probe, or another's): the targets held
        // back, and those answered while it was down, are due now, since `apns_back` makes due
        // only rows no batch holds.
        for held in heldWhileDown
        where !context.operatorLog.isDown(app: batch.app, environment: held.environment.rawValue, lane: Lane.campaign.rawValue) {
            outcomes.retries[held.retry].dueAt = Timestamp()
        }
        // Recorded through the end of the batch's session (`SentBatchRecorder`): the prunes are
        // written with it and counted once committed.
        // Only what the attempt that committed wrote is counted (also when only its COMMIT's reply
        // was lost, and when the batch is given up after that): a failed one rolled back, and a
        // retake that took nothing back left the batch to other claimers.
        var writing = (outcomes: ParkedOutcomes(), prunes: PruneOutcome())
        var recorded = (outcomes: ParkedOutcomes(), prunes: PruneOutcome())
        // Counted before the restores a tripped run's prunes ask for are written, and also when
        // the batch is given up.
        func count() {
            context.prunesCommitted(recorded.prunes)
            countProcessed(ChunkProgress(position: 0, sent: recorded.outcomes.sent, failedByReason: recorded.outcomes.failedByReason,
                                         pruned: recorded.outcomes.pruned, keptTokens: recorded.outcomes.keptTokens),
                           app: batch.app)
        }
        let session: PGConnection
        do {
            session = try parkedRecorder.record(&claim, accepted: outcomes.sentPlaces, retake: { claim in
                try retakeParked(&taken, &claim)
            }, write: { connection, takenBack in
                writing = (ParkedOutcomes(), PruneOutcome())
                var settling = takenBack.map { outcomes.restricted(to: $0) } ?? outcomes
                let places = takenBack ?? Set(batch.targets.map(\.place))
                let written = try context.writePrunes(prunes.filter { places.contains($0.key) }
                    .sorted { ($0.key.chunk, $0.key.position) < ($1.key.chunk, $1.key.position) }.map(\.value), on: connection)
                // The timestamp rule is counted as for a chunk's own targets: kept tokens apart.
                settling.pruned = written.invalidated.count
                settling.keptTokens = written.keptByTimestamp.count
                writing = (settling, written)
                try settleParked(taken, settling, on: connection)
            }, committed: {
                recorded = writing
            }, dropConnection: {
                self.connection?.close()
                self.connection = nil
            })
        } catch {
            count()
            throw error
        }
        count()
        context.restoreTokens(on: session)
        return pause
    }

    private var parkedRecorder: SentBatchRecorder<ParkedPlace> {
        SentBatchRecorder(context: context, lane: .campaign, worker: index, rows: "targets", backIn: "their parked retries",
                          beat: { [keeper, index] in keeper.beat(worker: index) })
    }

    /// Takes back on a new session the targets of `batch` no other claimer has taken; the
    /// worker's connection is that session's from now on.
    private func retakeParked(_ batch: inout ParkedBatch, _ claim: inout SentBatchClaim<ParkedPlace>) throws {
        connection?.close()
        connection = nil
        let idle = QueueSession.idleInTransactionSeconds(waitingOnAnswersFor: context.config.apns.answerWaitSeconds)
        let claimed = batch
        var taken: ParkedBatch?
        try parkedRecorder.retake(&claim, connect: {
            let fresh = try QueueSession.connect(url: context.config.databaseURL, applicationName: "pushd-campaign-\(index)",
                                                 settings: ["idle_in_transaction_session_timeout": "\(idle)s"])
            connection = fresh
            return fresh
        }, take: { fresh in
            let retaken = try store.retakeParked(fresh, claimed)
            taken = retaken
            return (retaken.targets.map(\.place), retaken.transaction)
        }, heldElsewhere: { fresh in
            guard let taken else { return [] }
            return try store.parkedHeldElsewhere(fresh, claimed, taken: taken)
        })
        if let taken { batch = taken }
    }

    /// A lease's session ended before its answer came: it may have gone through, leasing a
    /// chunk to this worker that it knows nothing of.
    private var leaseInDoubt = false
    private var nextGiveBackTry = 0.0
    /// Chunks this worker sent from and dropped without a finish or release — given up after a
    /// database error (`abandonRuns`), or found no longer its own by a write (a lease that ran
    /// out may still be under its name) — and has not leased since: their leases are left to run
    /// out, so that whoever takes them says their targets since the checkpoint go again
    /// (`chunk_taken_over`); `giveBackLeaseInDoubt` leaves them alone.
    private var abandonedChunks: Set<CampaignStore.ChunkKey> = []
    private static let giveBackRetryInterval = 5.0

    private func abandon(_ chunk: CampaignChunk) {
        abandonedChunks.insert(CampaignStore.ChunkKey(campaignID: chunk.campaignID, chunk: chunk.chunk))
    }

    /// Gives back the chunks leased under this worker's name that it does not hold, after a
    /// lease whose answer it did not read (`leaseInDoubt`), with the lease each replaced
    /// (`CampaignStore.releaseUnheldLeases`). Such a chunk sat leased to nobody for `lease_s`,
    /// and was then taken over from this live worker with a warning saying it had died. One
    /// notice per chunk given back: nothing of it was sent by this worker. Failing, it is tried
    /// again a few seconds later, and the pass goes on.
    private func giveBackLeaseInDoubt(on connection: PGConnection) {
        do {
            // The chunks given up after a database error stay leased until their leases run
            // out; those taken since by another worker are forgotten.
            abandonedChunks = try store.stillLeased(connection, owner: owner, among: Array(abandonedChunks))
            let held = runs.map { CampaignStore.ChunkKey(campaignID: $0.chunk.campaignID, chunk: $0.chunk.chunk) } + abandonedChunks
            let given = try store.releaseUnheldLeases(connection, owner: owner, holding: held)
            leaseInDoubt = false
            for back in given {
                let replaced = back.replacedOwner.map { previous in
                    let since = back.replacedUntil.map { Int(max(0, Timestamp().timeIntervalSince($0))) } ?? 0
                    return "; its lease before, of worker \(previous), which ran out \(since) s ago unsettled, is put back, so the next lease takes the chunk over from that one"
                } ?? ""
                context.logger.notice("campaign worker \(index): gave back chunk \(back.chunk.chunk) of campaign \(back.chunk.campaignID), leased to it by a lease whose answer its database session ended before; it sent nothing of it\(replaced)",
                                      ("event", "campaign_lease_given_back"), ("campaign", .int(back.chunk.campaignID)),
                                      ("chunk", .int(Int64(back.chunk.chunk))), ("worker", .int(Int64(index))),
                                      ("replaced_owner", .string(back.replacedOwner ?? "")))
            }
        } catch {
            context.databaseError(error)
            nextGiveBackTry = RateLimiter.monotonicSeconds() + Self.giveBackRetryInterval
            // Read-only (a failover): told once for the lane's passes, which fail alike.
            if RefusedWritesLog.refusesWrites(error) { return }
            context.logger.warning("campaign worker \(index): could not give back the chunks a lease whose answer was lost may have leased to it (tried again in \(Int(Self.giveBackRetryInterval)) s; until then such a chunk waits for its lease to run out): \(error)",
                                   ("event", "campaign_lease_give_back_failed"), ("worker", .int(Int64(index))))
        }
    }

    /// Counts of settled parked batches that their campaign's row did not take, per campaign
    /// (`ParkedCountsNotWritten`): written again every `owedCountsRetryInterval`.
    private var owedParkedCounts: [Int64: ParkedOutcomes] = [:]
    private var nextOwedCountsTry = 0.0
    /// Seconds between tries to write counts a settle left owed; each waits up to
    /// `lock_timeout` for the row, so not at every pass.
    static let owedCountsRetryInterval = 5.0
    /// Lines about parked counts not written, one per campaign per minute at most.
    private var uncountedLines = LogGate<Int64>(quietSeconds: 60)

    /// Settles a parked batch. When its campaign's counters cannot be written (the row stays
    /// locked past `lock_timeout`), the batch is settled all the same, so that no target of it
    /// is sent again, and the counts are kept here until they can be.
    private func settleParked(_ batch: ParkedBatch, _ outcomes: ParkedOutcomes, on connection: PGConnection) throws {
        do {
            for id in try store.settleParked(connection, batch, outcomes) { try logCampaign(id, "finished", on: connection) }
        } catch let uncounted as ParkedCountsNotWritten {
            owedParkedCounts[uncounted.campaignID, default: ParkedOutcomes()].addCounts(uncounted.counts)
            nextOwedCountsTry = RateLimiter.monotonicSeconds() + Self.owedCountsRetryInterval
            parkedCountsNotWritten(uncounted.error, campaignID: uncounted.campaignID)
        }
    }

    /// Writes the counts settles left owed, then closes the campaigns that are done; the counts
    /// whose row is still locked wait for the next try.
    private func writeOwedParkedCounts(on connection: PGConnection) throws {
        for (id, counts) in owedParkedCounts.sorted(by: { $0.key < $1.key }) {
            do {
                try store.countParked(connection, campaignID: id, counts)
            } catch let error as PGError where !error.code.isConnectionLoss && error.code != .connectionClosed
                && connection.isOpen && !connection.isInTransaction {
                parkedCountsNotWritten(error, campaignID: id)
                nextOwedCountsTry = RateLimiter.monotonicSeconds() + Self.owedCountsRetryInterval
                return
            }
            owedParkedCounts[id] = nil
            context.logger.notice("campaign worker \(index): wrote the counts of parked targets of campaign \(id) that waited for its row: \(counts.sent) sent, \(counts.failed) failed",
                                  ("event", "campaign_parked_counted"), ("campaign", .int(id)), ("worker", .int(Int64(index))),
                                  ("sent", .int(Int64(counts.sent))), ("failed", .int(Int64(counts.failed))))
        }
        for id in try store.closeFinishedCampaigns(connection) { try logCampaign(id, "finished", on: connection) }
    }

    /// The counters of campaign `campaignID` were not written for parked targets whose outcomes
    /// are recorded. Counted in `pushd_database_errors_total` (reason "55" for a lock timeout).
    private func parkedCountsNotWritten(_ error: PGError, campaignID: Int64) {
        context.databaseError(error)
        guard let unlogged = uncountedLines.admit(campaignID, now: RateLimiter.monotonicSeconds()) else { return }
        let owed = owedParkedCounts[campaignID] ?? ParkedOutcomes()
        let why = error.code == .lockNotAvailable
            ? "waited lock_timeout for the campaign's row, which another session holds locked"
            : "failed"
        let since = unlogged > 0 ? " (\(unlogged) more since the last line)" : ""
        context.logger.warning("campaign worker \(index): the count of parked targets of campaign \(campaignID) \(why); their outcomes are recorded and none is sent again, and \(owed.sent) sent and \(owed.failed) failed are kept here and written to its counters shortly\(since): \(error.message)",
                               ("event", "campaign_parked_uncounted"), ("campaign", .int(campaignID)), ("worker", .int(Int64(index))),
                               ("sent", .int(Int64(owed.sent))), ("failed", .int(Int64(owed.failed))), ("unlogged", .int(Int64(unlogged))))
    }

    /// Campaigns no worker of the fleet takes while the others occupy every worker (worker 0 of
    /// each instance looks).
    private var waitWatch = CampaignWaitWatch()

    /// Tells of the campaigns that have chunks to send and none being sent for a while: every
    /// worker is busy with other campaigns' chunks (leased oldest campaign first). Silent
    /// before, such a campaign got nothing for as long as the others lasted.
    private func watchWaitingCampaigns(on connection: PGConnection) throws {
        // A campaign waiting for APNs (`stopWhileDown`) is left unleased on purpose, not for want
        // of a worker: whole, or its chunks of the environments it waits for. Its chunks of the
        // other environment are leased meanwhile, so when no worker takes them it waits for one
        // as any campaign does. Set under the lock, as everywhere it changes: a count read
        // before another worker's change would overwrite it.
        let forAPNs = context.campaignsWaitingForAPNs.withLock { waiting in
            context.metrics.campaignsWaitingForAPNs.set(Double(waiting.count))
            return waiting
        }
        flushAPNsWaitLines()
        // What the lease passes over but for the probes: nothing of a campaign one of whose
        // environments answers again, which a lease takes back (none may try while every
        // worker is busy, when this matters).
        var whole = [Int64](), chunksTo = [String: [Int64]]()
        for (campaign, wait) in forAPNs {
            guard let down = stillDown(wait) else { continue }
            if wait.whole {
                whole.append(campaign)
            } else {
                for environment in down { chunksTo[environment.rawValue, default: []].append(campaign) }
            }
        }
        let waiting = try store.campaignsWaitingForWorker(connection, apps: context.claimableApps(),
                                                          passingOver: whole, passingOverChunksTo: chunksTo)
        for event in waitWatch.observe(waiting, now: RateLimiter.monotonicSeconds()) {
            switch event {
            case .waiting(let campaign, let seconds, let unlogged):
                let since = unlogged > 0 ? " (\(unlogged) more looks since the last line)" : ""
                context.logger.warning("campaign \(campaign.id) of app \(campaign.app) has chunks to send but no campaign worker has taken any for \(Int(seconds)) s: every worker that serves the app is busy with other campaigns' chunks, which are leased oldest campaign first; it is sent when one comes free, sooner with more campaign workers (workers.campaign) or instances\(since)",
                                       ("event", "campaign_waiting_for_worker"), ("campaign", .int(campaign.id)), ("app", .string(campaign.app)),
                                       ("waited_s", .int(Int64(seconds))), ("unlogged", .int(Int64(unlogged))))
            case .taken(let campaign, let seconds):
                context.logger.notice("campaign \(campaign.id) of app \(campaign.app) is being sent (or is over) after waiting \(Int(seconds)) s for a campaign worker",
                                      ("event", "campaign_worker_taken"), ("campaign", .int(campaign.id)), ("app", .string(campaign.app)),
                                      ("waited_s", .int(Int64(seconds))))
            }
        }
        context.metrics.campaignsWaitingForWorker.set(Double(waitWatch.longWaiting))
    }

    /// Targets parked for a retry when their campaign was cancelled will never be sent: they are
    /// dropped, counted as `cancelled` in `pushd_campaign_targets_processed_total`, and each
    /// campaign's share is told in one line. The campaign's own counters leave them in
    /// `remaining`, as every other target a cancel left unsent.
    private func dropCancelledParked(on connection: PGConnection) throws {
        for dropped in try store.dropCancelledParked(connection, apps: context.senders.keys.sorted()) {
            context.metrics.campaignTargets(app: dropped.app, status: "cancelled").increment(by: UInt64(dropped.count))
            context.logger.notice("campaign \(dropped.campaignID) is cancelled: dropped \(dropped.count) of its targets that were parked for a retry; they will not be sent",
                                  ("event", "campaign_parked_dropped"), ("campaign", .int(dropped.campaignID)),
                                  ("app", .string(dropped.app)), ("targets", .int(Int64(dropped.count))))
        }
    }

    /// The chunks a cancel left to the workers sending them, dropped once those recorded their
    /// last answers (`CampaignStore.dropCancelledChunks`); one line per campaign.
    private func dropCancelledChunks(on connection: PGConnection) throws {
        for dropped in try store.dropCancelledChunks(connection, apps: context.senders.keys.sorted()) {
            context.logger.notice("campaign \(dropped.campaignID) is cancelled: dropped \(dropped.chunks) of its chunks that were being sent when it was cancelled, now stopped, with the \(dropped.unsent) targets past their last checkpoints, which are not sent",
                                  ("event", "campaign_chunks_dropped"), ("campaign", .int(dropped.campaignID)), ("app", .string(dropped.app)),
                                  ("chunks", .int(Int64(dropped.chunks))), ("unsent", .int(Int64(dropped.unsent))))
        }
    }

    /// One line when a campaign starts, pauses, is cancelled or finishes, with its counts.
    private func logCampaign(_ id: Int64, _ event: String, on connection: PGConnection) throws {
        guard let campaign = try store.campaign(connection, id: id) else { return }
        let reasons = campaign.failedByReason.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        let verb = event == "finished" || event == "started" ? event : "is \(event)"
        context.operatorLog.campaign(id, event, "campaign \(id) '\(campaign.name)' \(verb): \(campaign.sent) of \(campaign.targets) sent, \(campaign.failed) failed",
                                     [("app", .string(campaign.app)), ("targets", .int(Int64(campaign.targets))),
                                      ("sent", .int(Int64(campaign.sent))), ("failed", .int(Int64(campaign.failed))),
                                      ("pruned", .int(Int64(campaign.pruned))), ("failed_by_reason", .string(reasons))])
    }

    private func countProcessed(_ progress: ChunkProgress, app: String) {
        if progress.sent > 0 {
            context.metrics.campaignTargets(app: app, status: "sent").increment(by: UInt64(progress.sent))
        }
        if progress.failed > 0 {
            context.metrics.campaignTargets(app: app, status: "failed").increment(by: UInt64(progress.failed))
        }
    }
}
