import APNs
import Dispatcher
import Glibc
import Locking
import Posix
import QueueStore

/// One worker of the transactional lane, on its own thread with its own database
/// connection: claim a batch (its transaction stays open), send every job, wait for
/// the answers, settle the batch (delete delivered, reschedule retries, dead-letter,
/// prune tokens) and commit. If the process dies in between, the transaction aborts
/// and the whole batch is claimable again.
final class JobWorker: @unchecked Sendable {
    /// Who `RefusedWritesLog` speaks of: the transactional workers of this process together.
    static let refusedWritesName = "transactional workers"

    // Everything below is touched only on the worker's own thread, except `completions`
    // (pushed to by dispatcher threads) and the context's shared, thread-safe parts.
    private let context: PipelineContext
    private let index: Int
    private let completions: CompletionQueue
    private let batchSize: Int
    private var connection: PGConnection?
    private var generation: UInt32 = 0
    private var random = SystemRandom()
    private let queue = JobQueue()
    let finished = Semaphore()

    init(context: PipelineContext, index: Int, completions: CompletionQueue, batchSize: Int) {
        self.context = context
        self.index = index
        self.completions = completions
        self.batchSize = batchSize
    }

    func start() {
        PosixThread.detach(name: "pushd-jobs-\(index)") { [self] in
            run()
            finished.signal()
        }
    }

    private func run() {
        var failures = 0
        // Inserts notify only claimers registered as asleep (a NOTIFY serialises commits),
        // so a claimer that just had work polls cheaply for a second before it sleeps.
        let waiting = context.config.jobWait
        var lastWork = RateLimiter.monotonicSeconds() - waiting.busyWindow
        var woke = ClaimTrace.Wake.batch
        var passFailed = false
        var passStarted = RateLimiter.monotonicSeconds()
        while !context.isStopping {
            context.operatorLog.tick()
            // The pass before this one went through (`LaneHealth`).
            if !passFailed {
                context.laneHealth.passed(Lane.transactional.rawValue, started: passStarted)
                context.refusedWrites.passed(Self.refusedWritesName, started: passStarted)
            }
            passFailed = false
            passStarted = RateLimiter.monotonicSeconds()
            do {
                let connection = try connectIfNeeded()
                context.makeDueAfterOutage(lane: Lane.transactional.rawValue, what: "transactional jobs") { back in
                    try queue.makeDue(connection, app: back.app, environment: context.outageEnvironment(back.environment),
                                      errorPrefixes: OutcomePolicy.unavailableReasonPrefixes, onRefused: reportMadeDue)
                }
                // Claimed at once below, by this worker.
                try context.probeOutage(lane: Lane.transactional.rawValue, what: "transactional jobs") { apps, environment in
                    try queue.makeSoonestDue(connection, apps: apps, environment: context.outageEnvironment(environment),
                                             errorPrefixes: OutcomePolicy.unavailableReasonPrefixes, onRefused: reportMadeDue)
                }
                let apps = context.claimableApps()
                let leaving = context.coverage.leaving()
                let claimStarted = Timestamp()
                // While busy, an empty claim's COMMIT is not waited for: one round trip per
                // poll instead of three (claim, COMMIT, a probe).
                let busy = RateLimiter.monotonicSeconds() - lastWork < waiting.busyWindow
                let batch = try queue.claim(connection, limit: batchSize, apps: apps, leaving: leaving,
                                            commitEmptyWithoutWaiting: busy)
                reportUnreadable(batch.unreadable)
                if batch.isEmpty, !batch.unreadable.isEmpty {
                    lastWork = RateLimiter.monotonicSeconds()
                    continue
                }
                if batch.isEmpty {
                    failures = 0
                    switch waiting.step(idleSeconds: RateLimiter.monotonicSeconds() - lastWork) {
                    case .poll(let microseconds):
                        // An insert's NOTIFY (sent while another claimer sleeps) ends the wait at once.
                        let milliseconds = Int32(clamping: (Int(microseconds) + 999) / 1000)
                        switch try queue.waitWhileBusy(connection, timeoutMilliseconds: milliseconds) {
                        case .notified: woke = .notify
                        case .timedOut: woke = .tick
                        }
                    case .sleep(let milliseconds):
                        // Woken within milliseconds of an insert's COMMIT; the time-out is the
                        // fallback for scheduled jobs and bounds how long shutdown waits.
                        woke = try queue.sleepUntilJobs(connection, apps: apps, leaving: leaving, timeoutMilliseconds: milliseconds) ? .notify : .timeout
                    }
                    continue
                }
                lastWork = RateLimiter.monotonicSeconds()
                try process(batch, on: connection, trace: ClaimTrace(woke: woke, claimStarted: claimStarted, claimed: Timestamp()))
                // Only a batch settled ends a run of failures: one that fails after sending backs
                // off longer each time, as a failed claim does.
                failures = 0
                woke = .batch
            } catch {
                failures += 1
                passFailed = true
                context.databaseError(error)
                if !context.refusedWrites.failed(Self.refusedWritesName, meanwhile: "no job is claimed, so none is sent", error: error) {
                    context.logger.warning("transactional worker \(index): \(error)", ("worker", .int(Int64(index))))
                }
                context.laneHealth.failed(Lane.transactional.rawValue, error: error, started: passStarted)
                connection?.close()
                connection = nil
                context.sleepAfterDatabaseFailure(failures)
            }
        }
        connection?.close()
        connection = nil
    }

    private func connectIfNeeded() throws -> PGConnection {
        if let connection, connection.isOpen { return connection }
        // The batch's transaction waits on APNs; give it more than a request's time-out.
        let idle = QueueSession.idleInTransactionSeconds(waitingOnAnswersFor: context.config.apns.answerWaitSeconds)
        let fresh = try QueueSession.connect(url: context.config.databaseURL, applicationName: "pushd-jobs-\(index)",
                                             settings: ["idle_in_transaction_session_timeout": "\(idle)s"])
        try queue.listen(fresh)
        connection = fresh
        return fresh
    }

    /// How a batch was reached, for the per-job trace at `debug`: what ended the wait before
    /// the claim that found it, and when that claim ran.
    struct ClaimTrace {
        enum Wake: String {
            /// Claimed right after settling the previous batch.
            case batch
            /// The busy claimer's poll interval ended.
            case tick
            /// An insert's NOTIFY woke the claimer, asleep or between two polls.
            case notify
            /// The sleeping claimer's fallback time-out ended.
            case timeout
        }
        var woke: Wake
        var claimStarted: Timestamp
        var claimed: Timestamp
    }

    private struct InFlight {
        var job: Job
        var sender: AppSender
        var pushType: String
        /// When this send was submitted; the job's first attempt unless it has an earlier one.
        var sentAt: Timestamp
        /// Whose host it was sent to: only that host's verdict may prune the token.
        var environment: PushdConfig.Environment
        /// Its apns-topic: a TopicDisallowed answer holds this topic.
        var topic: String
        /// The `authorization` value it carried: an answer about the provider token judges that one.
        var authorization: String?
    }

    /// A job of a held scope waits until its hold ends (a SIGHUP, or the hold's 5 minutes), and
    /// at least this long: a job claimed as the hold ends is not put back for a moment only.
    static let heldRetrySeconds = 30.0

    /// How many jobs of a held scope one statement of the sweep puts back (`HeldWork.deferJobs`):
    /// short transactions, so claims of the app's other jobs do not wait behind them.
    static let heldSweepChunk = 10_000

    /// When a job of a scope held until `until` is due again.
    static func heldRunAt(until: Timestamp, now: Timestamp) -> Timestamp {
        max(until, now.addingTimeInterval(heldRetrySeconds))
    }

    /// A held topic (or environment) scope whose queued jobs this worker puts back once the batch is settled.
    private struct Sweep {
        var sender: AppSender
        var key: AppSender.HoldKey
        var hold: AppSender.Hold
    }

    /// Jobs of the scopes this batch found held, to put back once it is settled.
    private var sweeps = [Sweep]()
    /// The scopes this batch put jobs back for, until their hold ends.
    private var heldInBatch = [String: (sender: AppSender, key: AppSender.HoldKey)]()

    /// A delivered job's path, logged at `debug` once its batch is committed.
    private struct Delivered {
        var job: Job
        var sentAt: Timestamp
        var answeredAt: Timestamp
        var engineSeconds: Double
        var timings: TransferTimings?
    }

    private func process(_ batch: ClaimedJobs, on connection: PGConnection, trace: ClaimTrace) throws {
        context.metrics.claimed(lane: Lane.transactional.rawValue).increment(by: UInt64(batch.jobs.count))
        generation &+= 1
        let now = Timestamp()
        var outcomes = JobOutcomes()
        var prunes = [Int64: TokenPrune]()
        var inFlight = [Int: InFlight]()
        // A lane's connections that could not be set up for an app and environment are not
        // tried again within the batch: its other jobs there wait the same way, under one line.
        var setupFailures = [String: AppSender.ConnectionSetupFailed]()
        // Jobs waiting for APNs to answer again, by their place in `outcomes.retries`: held back
        // for an outage (`PipelineContext.holdsBackWhileDown`), or answered while it lasted.
        var heldWhileDown = [HeldWhileDown]()
        for (position, job) in batch.jobs.enumerated() {
            // The claim returns only configured apps; should one slip through, it stays
            // queued for an instance that knows it rather than being given up.
            guard let sender = context.senders[job.app] else {
                outcomes.retries.append(JobRetry(id: job.id, runAt: now.addingTimeInterval(30),
                                                 error: "app '\(job.app)' is not configured in this instance", countsAsAttempt: false))
                continue
            }
            if let paused = sender.pausedReason {
                outcomes.retries.append(JobRetry(id: job.id, runAt: now.addingTimeInterval(30),
                                                 error: HeldWork.appPausedPrefix + paused, countsAsAttempt: false))
                continue
            }
            if let expired = OutcomePolicy.expiredBeforeSending(job.expiration.map { Int64($0.timeIntervalSince1970.rounded(.down)) }, now: now) {
                dead(job, status: nil, reason: expired, label: OutcomePolicy.expiredLabel, into: &outcomes, sender: sender)
                continue
            }
            if let held = context.throttle.heldUntil(job.deviceToken) {
                // APNs is throttling this device: this job waits with the one that drew the 429.
                outcomes.retries.append(JobRetry(id: job.id, runAt: held, error: "TooManyRequests: the device token is throttled",
                                                 countsAsAttempt: false))
                continue
            }
            let notification: APNsNotification
            do {
                notification = try sender.factory.notification(.init(
                    token: job.deviceToken, pushType: job.pushType, priority: job.priority, expiration: job.expiration,
                    collapseID: job.collapseID, apnsID: job.apnsID, payload: job.payload))
            } catch {
                if error.label == NotificationFactory.tokenAuthenticationRequired {
                    // A push type APNs takes only with a token key, and this instance has a certificate.
                    switch context.coverage.decideTokenWork(app: job.app, lane: Lane.transactional.rawValue) {
                    case .leave(let seconds):
                        outcomes.retries.append(JobRetry(id: job.id, runAt: now.addingTimeInterval(seconds),
                                                         error: EnvironmentCoverage.tokenLeftReason(app: job.app), countsAsAttempt: false))
                    case .deadLetter:
                        dead(job, status: nil, reason: error.reason + "; " + EnvironmentCoverage.noTokenKeyInFleet(app: job.app),
                             label: error.label, into: &outcomes, sender: sender)
                    }
                    continue
                }
                dead(job, status: nil, reason: error.reason, label: error.label, into: &outcomes, sender: sender)
                continue
            }
            // A job without an environment of its own goes where its token was registered.
            let environment = sender.environment(job: job.environment, registered: job.registeredEnvironment)
            if let why = sender.heldByEnvironmentDisagreement(job: job.environment, registered: job.registeredEnvironment) {
                // Which host it reaches would depend on which instance claimed it: it waits,
                // unspent, until the fleet agrees (then it is made due at once).
                outcomes.retries.append(JobRetry(id: job.id, runAt: now.addingTimeInterval(Self.heldRetrySeconds),
                                                 error: HeldWork.errorPrefix + why, countsAsAttempt: false))
                continue
            }
            if sender.hasHolds, let hold = sender.activeHold(AppSender.topicKey(notification.topic, environment)) {
                // APNs refused this topic to the app's credentials: the job waits, unspent, until the hold ends.
                outcomes.retries.append(JobRetry(id: job.id, runAt: Self.heldRunAt(until: hold.until, now: now),
                                                 error: HeldWork.errorPrefix + "\(hold.why)", countsAsAttempt: false))
                planSweep(sender, AppSender.topicKey(notification.topic, environment))
                continue
            }
            // No key is made for a job while every setup went through, the common case.
            if !setupFailures.isEmpty, let failed = setupFailures[job.app + "\u{0}" + environment.rawValue] {
                outcomes.retries.append(JobRetry(id: job.id, runAt: now.addingTimeInterval(10), error: failed.description, countsAsAttempt: false))
                context.metrics.retry(app: job.app, lane: Lane.transactional.rawValue, reason: AppSender.ConnectionSetupFailed.label).increment()
                continue
            }
            if context.holdsBackWhileDown(lastError: job.lastError, app: job.app, environment: environment.rawValue, lane: Lane.transactional.rawValue),
               let due = context.policy.dueWhileDown(now: now, expiration: job.expiration.map { Int64($0.timeIntervalSince1970) },
                                                     firstAttemptAt: job.firstAttemptAt, random: &random) {
                heldWhileDown.append(HeldWhileDown(retry: outcomes.retries.count, app: job.app, environment: environment))
                outcomes.retries.append(JobRetry(id: job.id, runAt: due, error: job.lastError ?? "", countsAsAttempt: false))
                continue
            }
            let client: APNsClient
            do {
                client = try sender.client(for: environment, lane: .transactional)
            } catch let missing as AppSender.NoCredentials {
                switch context.coverage.decide(app: job.app, environment: environment, lane: .transactional) {
                case .leave(let seconds):
                    // Claimed before this instance learnt that another one sends it: that one takes it.
                    outcomes.retries.append(JobRetry(id: job.id, runAt: now.addingTimeInterval(seconds),
                                                     error: EnvironmentCoverage.leftReason(environment),
                                                     countsAsAttempt: false))
                case .deadLetter:
                    dead(job, status: nil, reason: missing.description, label: missing.label, into: &outcomes, sender: sender)
                }
                continue
            } catch {
                let failed = context.connectionSetupFailed(app: job.app, lane: .transactional, environment: environment, error: error)
                setupFailures[job.app + "\u{0}" + environment.rawValue] = failed
                outcomes.retries.append(JobRetry(id: job.id, runAt: now.addingTimeInterval(10), error: failed.description, countsAsAttempt: false))
                continue
            }
            let authorization: String?
            do {
                // Answers are read on this thread after the loop, so recording after submitting is safe.
                authorization = try client.submit(notification, tag: CompletionQueue.tag(worker: index, generation: generation, index: position))
            } catch {
                outcomes.retries.append(JobRetry(id: job.id, runAt: now.addingTimeInterval(10),
                                                 error: "could not authenticate: \(error)", countsAsAttempt: false))
                context.logger.error("cannot build a request for app \(job.app): \(error)", ("app", .string(job.app)))
                continue
            }
            inFlight[position] = InFlight(job: job, sender: sender, pushType: job.pushType, sentAt: Timestamp(), environment: environment,
                                          topic: notification.topic, authorization: authorization)
        }

        let tracing = context.logger.enabled(.debug)
        var delivered = [Delivered]()
        // The engine answers each request by its answer deadline, counted from its submission:
        // waiting that long and 5 s more never gives up on a request the engine still holds.
        let timeout = context.config.apns.answerWaitSeconds
        let deadline = RateLimiter.monotonicSeconds() + timeout
        // The claim lives in the session's open transaction: should the session end meanwhile
        // (pg_terminate_backend, a restart, idle_in_transaction_session_timeout), every job of
        // the batch is back in the queue for any claimer to send again. Looked at between answers,
        // so that the batch is taken again at once on a new session (`Claim`).
        var claim = Claim(batch: batch, connection: connection)
        var nextCheck = RateLimiter.monotonicSeconds() + Self.sessionCheckSeconds
        while !inFlight.isEmpty {
            let results = completions.take(until: min(deadline, nextCheck))
            if RateLimiter.monotonicSeconds() >= nextCheck {
                keepClaim(&claim)
                nextCheck = RateLimiter.monotonicSeconds() + Self.sessionCheckSeconds
            }
            if results.isEmpty {
                if RateLimiter.monotonicSeconds() >= deadline { break }
                continue
            }
            let answeredAt = Timestamp()
            for result in results where CompletionQueue.generation(of: result.tag) == generation & 0xFF_FFFF {
                guard let item = inFlight.removeValue(forKey: CompletionQueue.index(of: result.tag)) else { continue }
                let before = outcomes.delivered.count
                settle(item, result, into: &outcomes, prunes: &prunes, waiting: &heldWhileDown)
                if tracing, outcomes.delivered.count > before {
                    delivered.append(Delivered(job: item.job, sentAt: item.sentAt, answeredAt: answeredAt,
                                               engineSeconds: Double(result.latencyNanoseconds) / 1e9, timings: result.timings))
                }
            }
        }
        for item in inFlight.values {
            // No answer in time: the request may or may not have reached APNs; retrying
            // keeps the at-least-once promise, and like any send without an answer it does
            // not use up the job's attempts.
            settle(item, outcome: .transportFailure("no answer within \(Int(timeout))s"), into: &outcomes, prunes: &prunes,
                   waiting: &heldWhileDown)
        }

        // APNs answered again meanwhile (this batch's probe, or another's): the jobs held back,
        // and those answered while it was down, are due now, since `apns_back` makes due only
        // rows no batch holds.
        for held in heldWhileDown
        where !context.operatorLog.isDown(app: held.app, environment: held.environment.rawValue, lane: Lane.transactional.rawValue) {
            outcomes.retries[held.retry].runAt = Timestamp()
        }
        let (refused, session) = try record(&claim, outcomes, prunes)
        reportRefusedRetries(refused)
        context.restoreTokens(on: session)
        sweepHeldScopes(on: session)
        if tracing {
            // Every time on the same wall clock as the database's created_at (one host in
            // Benchmarks/DaemonBench), so the stages of INSERT → accepted can be told apart.
            let recordedAt = Timestamp()
            for item in delivered {
                var fields: [(String, LogValue)] = [
                    ("worker", .int(Int64(index))), ("job", .int(item.job.id)), ("woke", .string(trace.woke.rawValue)),
                    ("batch", .int(Int64(batch.jobs.count))),
                    ("created_at", .double(item.job.createdAt.timeIntervalSince1970)),
                    ("claim_started_at", .double(trace.claimStarted.timeIntervalSince1970)),
                    ("claimed_at", .double(trace.claimed.timeIntervalSince1970)),
                    ("sent_at", .double(item.sentAt.timeIntervalSince1970)),
                    ("engine_s", .double(item.engineSeconds)),
                    ("answered_at", .double(item.answeredAt.timeIntervalSince1970)),
                    ("recorded_at", .double(recordedAt.timeIntervalSince1970))]
                if let timings = item.timings {
                    // The engine's part, split: its queue, then libcurl's times from the hand-over.
                    fields += [("queued_s", .double(Double(timings.queuedNanoseconds) / 1e9)),
                               ("request_sent_s", .double(Double(timings.sentMicroseconds) / 1e6)),
                               ("first_byte_s", .double(Double(timings.firstByteMicroseconds) / 1e6)),
                               ("transfer_s", .double(Double(timings.totalMicroseconds) / 1e6))]
                }
                context.logger.write(.debug, "delivered transactional job \(item.job.id)", fields: fields)
            }
        }
        if context.logger.enabled(.debug) {
            context.logger.debug("settled a batch of \(batch.jobs.count) jobs", ("worker", .int(Int64(index))),
                                 ("delivered", .int(Int64(outcomes.delivered.count))), ("retried", .int(Int64(outcomes.retries.count))),
                                 ("failed", .int(Int64(outcomes.failures.count))),
                                 ("ms", .int(Int64(Timestamp().timeIntervalSince(now) * 1000))))
        }
    }

    /// A retry of a batch that waits for APNs to answer again (`OutcomePolicy.dueWhileDown`,
    /// `RetryPolicy.decideWhileDown`), by its place in the batch's `JobOutcomes.retries`.
    struct HeldWhileDown {
        var retry: Int
        var app: String
        var environment: PushdConfig.Environment
    }

    private func settle(_ item: InFlight, _ result: DispatchResult, into outcomes: inout JobOutcomes, prunes: inout [Int64: TokenPrune],
                        waiting: inout [HeldWhileDown]) {
        settle(item, outcome: item.sender.outcome(of: result, environment: item.environment), into: &outcomes, prunes: &prunes,
               waiting: &waiting)
    }

    /// - Parameter waiting: gets the job's retry when it was decided because the lane was down:
    ///   it waits for `apns_back`, which cannot reach it while this batch holds its row.
    private func settle(_ item: InFlight, outcome: SendOutcome, into outcomes: inout JobOutcomes, prunes: inout [Int64: TokenPrune],
                        waiting: inout [HeldWhileDown]) {
        let job = item.job
        let sender = item.sender
        // Windows count from the first send, not from the insert: a job scheduled for later
        // (run_at) has not been waiting before it was due.
        let firstAttemptAt = job.firstAttemptAt ?? item.sentAt
        context.operatorLog.record(outcome, app: job.app, environment: item.environment.rawValue, lane: "transactional")
        // Asked only of a send APNs did not answer or answered with a 5xx.
        var decidedWhileDown = false
        func apnsDown() -> Bool {
            decidedWhileDown = context.operatorLog.isDown(app: job.app, environment: item.environment.rawValue, lane: Lane.transactional.rawValue)
            return decidedWhileDown
        }
        let verdict = context.forbiddenVerdict(context.notForTopicVerdict(context.environmentKeyVerdict(
            context.policy.verdict(for: outcome, attempt: job.attempts + 1, expiration: job.expiration.map { Int64($0.timeIntervalSince1970) },
                                   firstAttemptAt: firstAttemptAt, now: Timestamp(),
                                   apnsDown: apnsDown(), random: &random),
            sender: sender, environment: item.environment, carried: item.authorization),
            sender: sender, topic: item.topic, environment: item.environment, source: .transactional, token: job.deviceToken),
            sender: sender, environment: item.environment, lane: Lane.transactional.rawValue)
        switch verdict {
        case .delivered:
            outcomes.delivered.append(job.id)
            sender.countResponse(status: 200, reason: "none", environment: item.environment)
            sender.countSent(pushType: item.pushType, lane: .transactional, environment: item.environment)
            context.tally.add(context.tally.sent)
            let latency = Timestamp().timeIntervalSince(job.createdAt)
            sender.deliveryLatency.observe(latency)
            context.tally.recordLatency(latency)
        case .prune(let status, let reason, let timestamp):
            outcomes.failures.append(JobFailure(id: job.id, status: status, reason: reason))
            prunes[job.id] = TokenPrune(app: job.app, token: job.deviceToken, reason: reason, apnsTimestamp: timestamp,
                                        environment: item.environment.rawValue)
            sender.countResponse(status: status, reason: reason, environment: item.environment)
        case .retry(let at, let reason, let refresh, let countsAsAttempt):
            if decidedWhileDown { waiting.append(HeldWhileDown(retry: outcomes.retries.count, app: job.app, environment: item.environment)) }
            outcomes.retries.append(JobRetry(id: job.id, runAt: at, error: reason, countsAsAttempt: countsAsAttempt,
                                             sentAt: firstAttemptAt))
            if reason == APNsReason.tooManyRequests.rawValue { context.throttle.throttle(job.deviceToken, until: at) }
            sender.countAnswer(outcome, environment: item.environment)
            context.metrics.retry(app: job.app, lane: Lane.transactional.rawValue, reason: outcome.label).increment()
            context.operatorLog.retried(outcome)
            context.tally.add(context.tally.retried)
            if refresh { context.providerTokenExpired(sender, carried: item.authorization) }
        case .dead(let status, let reason):
            sender.countAnswer(outcome, environment: item.environment)
            dead(job, status: status, reason: reason, label: outcome.label, into: &outcomes, sender: sender)
        case .hold(let scope, let reason, let why):
            sender.countAnswer(outcome, environment: item.environment)
            let key = scope == .topic ? AppSender.topicKey(item.topic, item.environment) : sender.broadcastKey(scope, item.environment)
            context.hold(sender, key, why: why, reason: APNsReason(reason))
            // Not an attempt, and no first send either: its retry windows start when it can go.
            let now = Timestamp()
            let held = sender.activeHold(key)
            let until = held?.until ?? now
            outcomes.retries.append(JobRetry(id: job.id, runAt: Self.heldRunAt(until: until, now: now),
                                             error: HeldWork.errorPrefix + (held?.why ?? why), countsAsAttempt: false))
            if scope == .topic || scope == .environment { planSweep(sender, key) }
        case .pauseApp(let reason):
            sender.countAnswer(outcome, environment: item.environment)
            guard context.pause(sender, reason: reason, carried: item.authorization) else {
                // About a key replaced since: sent again at once with the current one, no attempt spent.
                outcomes.retries.append(JobRetry(id: job.id, runAt: Timestamp(), error: PipelineContext.replacedKeyRetry,
                                                 countsAsAttempt: false, sentAt: firstAttemptAt))
                context.metrics.retry(app: job.app, lane: Lane.transactional.rawValue, reason: outcome.label).increment()
                return
            }
            outcomes.retries.append(JobRetry(id: job.id, runAt: Timestamp().addingTimeInterval(30),
                                             error: HeldWork.appPausedPrefix + reason, countsAsAttempt: false, sentAt: firstAttemptAt))
        }
    }

    /// How often a worker waiting on a batch's answers looks whether its session still holds the claim.
    static let sessionCheckSeconds = SentBatchTiming.sessionCheckSeconds

    /// A sent batch and the session whose transaction holds its claim, the claiming
    /// transaction's DELETE (`SentBatchClaim`): when the session ends before the outcomes are
    /// committed, the rows are back in `pushd.jobs` under the same ids.
    private struct Claim {
        /// The jobs the open transaction holds (after a retake, those it took back).
        var batch: ClaimedJobs
        var rows: SentBatchClaim<Int64>

        init(batch: ClaimedJobs, connection: PGConnection) {
            self.batch = batch
            rows = SentBatchClaim(held: batch.jobs.map(\.id), connection: connection, transaction: batch.transaction)
        }
    }

    private var recorder: SentBatchRecorder<Int64> {
        SentBatchRecorder(context: context, lane: .transactional, worker: index, rows: "jobs", backIn: "the queue")
    }

    /// Between answers: a session that ended is noticed, and the batch taken back at once.
    private func keepClaim(_ claim: inout Claim) {
        var batch = claim.batch
        recorder.keep(&claim.rows) { rows in try retake(&batch, &rows) }
        claim.batch = batch
    }

    /// Takes back on a new session what of `batch` no other claimer has taken.
    private func retake(_ batch: inout ClaimedJobs, _ rows: inout SentBatchClaim<Int64>) throws {
        connection?.close()
        connection = nil
        let claimed = batch
        var taken = ClaimedJobs(jobs: [])
        try recorder.retake(&rows, connect: { try connectIfNeeded() }, take: { fresh in
            taken = try queue.retake(fresh, claimed)
            return (taken.jobs.map(\.id), taken.transaction)
        }, heldElsewhere: { fresh in try queue.heldElsewhere(fresh, claimed) })
        batch = taken
    }

    /// Records the outcomes of a sent batch (prunes, then `JobQueue.finish`) and returns the
    /// retries refused and the session that holds the worker's connection now; through the end of
    /// the batch's session, as `SentBatchRecorder.record` says. The prunes are counted once
    /// committed (also by a COMMIT whose reply was lost, and when the batch is given up after
    /// that): written in a transaction that was rolled back, they are written again with the
    /// jobs taken back.
    private func record(_ claim: inout Claim, _ outcomes: JobOutcomes,
                        _ prunes: [Int64: TokenPrune]) throws -> ([RefusedRetry], PGConnection) {
        var refused = [RefusedRetry]()
        // What the attempt under way wrote, and what the one that committed did.
        var writing = PruneOutcome()
        var pruned = PruneOutcome()
        var batch = claim.batch
        defer {
            claim.batch = batch
            context.prunesCommitted(pruned)
        }
        let session = try recorder.record(&claim.rows, accepted: Set(outcomes.delivered), retake: { rows in
            try retake(&batch, &rows)
        }, write: { connection, takenBack in
            let ids = takenBack ?? Set(batch.jobs.map(\.id))
            writing = PruneOutcome()
            writing = try context.writePrunes(prunes.filter { ids.contains($0.key) }.sorted { $0.key < $1.key }.map(\.value), on: connection)
            refused = try queue.finish(connection, batch, takenBack.map { outcomes.restricted(to: $0) } ?? outcomes)
        }, committed: {
            pruned = writing
        }, dropConnection: {
            connection?.close()
            connection = nil
        })
        return (refused, session)
    }

    /// Takes on putting back the queued jobs of `key` for its hold, unless another worker has.
    private func planSweep(_ sender: AppSender, _ key: AppSender.HoldKey) {
        heldInBatch["\(sender.app.name) \(key)"] = (sender, key)
        guard let hold = sender.takeSweep(key) else { return }
        sweeps.append(Sweep(sender: sender, key: key, hold: hold))
    }

    /// Puts the due jobs of every scope this batch found held back until the hold ends, a set at
    /// a time (`HeldWork.deferJobs`), rather than claiming, deleting and inserting each of them
    /// again every 30 s: a held backlog costs one row write per job for the whole hold. A
    /// failure is logged and left: the claims put those jobs back one batch at a time.
    private func sweepHeldScopes(on connection: PGConnection) {
        guard !heldInBatch.isEmpty || !sweeps.isEmpty else { return }
        let planned = sweeps
        let held = heldInBatch
        sweeps.removeAll()
        heldInBatch.removeAll()
        for sweep in planned where sweep.sender.activeHold(sweep.key) != nil {
            let app = sweep.sender.app
            let types = sweep.sender.pushTypes(heldBy: sweep.key).map(\.rawValue)
            let until = Self.heldRunAt(until: sweep.hold.until, now: Timestamp())
            var total = 0
            do {
                while !context.isStopping {
                    var refused = 0
                    let count = try HeldWork().deferJobs(connection, app: app.name, pushTypes: types,
                                                         environment: sweep.key.environment.rawValue,
                                                         appEnvironment: app.environment.rawValue, until: until,
                                                         reason: sweep.hold.why, limit: Self.heldSweepChunk) { items in
                        refused = items.count
                        context.reportRefusedRewrites(items, lane: Lane.transactional.rawValue, doing: "put back for a held topic")
                    }
                    total += count
                    if count + refused < Self.heldSweepChunk { break }
                }
                if total > 0 {
                    context.logger.info("put back \(total) queued jobs of held \(sweep.key) for app \(app.name) until the hold ends",
                                        ("event", "held_jobs_deferred"), ("app", .string(app.name)),
                                        ("topic", .string(sweep.key.topic)), ("environment", .string(sweep.key.environment.rawValue)),
                                        ("jobs", .int(Int64(total))))
                }
            } catch {
                context.databaseError(error)
                context.logger.warning("could not put back the queued jobs of held \(sweep.key) for app \(app.name) at once (they are put back as they are claimed): \(error)",
                                       ("app", .string(app.name)))
            }
        }
        // A SIGHUP that ended a hold while this batch or sweep put its jobs back made the app's
        // held work due before they were committed: make them due too, not at the hold's end.
        var ended = Set<String>()
        for (sender, key) in held.values where sender.activeHold(key) == nil { ended.insert(sender.app.name) }
        for sweep in planned where sweep.sender.activeHold(sweep.key) == nil { ended.insert(sweep.sender.app.name) }
        for app in ended.sorted() {
            do {
                try HeldWork().release(connection, app: app, onRefused: context.reportRefusedRewrites(madeDue:))
            } catch {
                context.databaseError(error)
                context.logger.warning("could not make the held work of app \(app) due after its hold ended: \(error)", ("app", .string(app)))
            }
        }
    }

    private func reportMadeDue(_ refused: [RefusedRewrite]) { context.reportRefusedRewrites(madeDue: refused) }

    /// Jobs of one kind counted since the last log line about them, which is written at most
    /// once a minute and says how many.
    private struct QuietCount {
        private var since = 0
        private var loggedAt = Timestamp.distantPast
        /// The count to log now, or nil while the last line is less than a minute old.
        mutating func add(_ count: Int, now: Timestamp = Timestamp()) -> Int? {
            since += count
            guard now.timeIntervalSince(loggedAt) >= 60 else { return nil }
            defer { since = 0; loggedAt = now }
            return since
        }
    }

    private var refusedRetries = QuietCount()
    private var unreadableJobs = QuietCount()

    /// Retries a CHECK of `pushd.jobs` refused to queue again (`JobQueue.finish`), now dead
    /// letters: each counts as one (reason `requeue_refused`); one error line a minute at most
    /// per worker says how many and what the first check said.
    private func reportRefusedRetries(_ refused: [RefusedRetry]) {
        guard let first = refused.first else { return }
        for item in refused {
            context.metrics.deadLetter(app: item.job.app, lane: Lane.transactional.rawValue, reason: "requeue_refused").increment()
            context.operatorLog.deadLettered(reason: "requeue_refused")
            context.tally.add(context.tally.dead)
        }
        guard let count = refusedRetries.add(refused.count) else { return }
        context.logger.error("\(count) retried job(s) could not be queued again and were dead-lettered: a CHECK of pushd.jobs added after they were queued refuses them (job \(first.job.id) of app \(first.job.app): \(first.message)); see pushd.dead_jobs",
                             ("event", "retry_requeue_refused"), ("worker", .int(Int64(index))), ("app", .string(first.job.app)),
                             ("check", .string(first.check ?? "unknown")), ("jobs", .int(Int64(count))))
    }

    /// Rows the claim could not read (a timestamp pushd cannot parse), dead-lettered by the
    /// claim: each counts as one (reason `unreadable`); one error line a minute at most per
    /// worker says how many and why the first was.
    private func reportUnreadable(_ rows: [UnreadableJob]) {
        guard let first = rows.first else { return }
        for row in rows {
            context.metrics.deadLetter(app: row.app, lane: Lane.transactional.rawValue, reason: "unreadable").increment()
            context.operatorLog.deadLettered(reason: "unreadable")
            context.tally.add(context.tally.dead)
        }
        guard let count = unreadableJobs.add(rows.count) else { return }
        context.logger.error("\(count) claimed job(s) could not be read and were dead-lettered (job \(first.id) of app \(first.app): \(first.reason)); see pushd.dead_jobs",
                             ("event", "job_unreadable"), ("worker", .int(Int64(index))), ("app", .string(first.app)),
                             ("jobs", .int(Int64(count))))
    }

    /// `label` names the reason from a closed set, for the metric.
    private func dead(_ job: Job, status: Int?, reason: String, label: String, into outcomes: inout JobOutcomes, sender: AppSender? = nil) {
        outcomes.failures.append(JobFailure(id: job.id, status: status, reason: reason))
        context.metrics.deadLetter(app: sender?.app.name ?? "unknown", lane: Lane.transactional.rawValue, reason: label).increment()
        context.operatorLog.deadLettered(reason: label)
        context.tally.add(context.tally.dead)
    }
}
