import APNs
import Dispatcher
import Locking
import Posix
import QueueStore

/// Carries out what applications asked of broadcast channels: channel creations and
/// deletions from `pushd.channels` against APNs's channel management API, and broadcast
/// jobs from `pushd.broadcast_jobs` against the broadcast API. One thread, one database
/// connection; rows are claimed by lease, so nothing is held open while APNs answers and a
/// worker that dies leaves its rows due again.
///
/// APNs takes a broadcast and a channel management request with a provider token or with the
/// app's certificate (Apple, "Sending broadcast push notification requests to APNs" and
/// "Sending channel management requests to APNs"): a certificate app's broadcasts and channel
/// requests go on a connection that presents its certificate for the channel's environment,
/// with no `authorization` header.
final class BroadcastWorker: @unchecked Sendable {
    /// Who `RefusedWritesLog` speaks of.
    static let refusedWritesName = "broadcast worker"

    // Touched only on the worker's thread, except `results` (filled by dispatcher threads).
    private let context: PipelineContext
    private var connection: PGConnection?
    private var dispatchers: [DispatcherKey: HTTP2Dispatcher] = [:]
    /// The certificate each certificate app's dispatcher presents, to hand it a renewed one.
    private var presented: [DispatcherKey: ClientIdentity] = [:]
    /// Connections that could not be set up, with the failure and when to try again
    /// (monotonic seconds): the rows claimed meanwhile wait with it, without a line each.
    private var setupFailures: [DispatcherKey: (retryAt: Double, failure: AppSender.ConnectionSetupFailed)] = [:]
    private let results = BlockingResults()
    private var nextTag: UInt64 = 0
    private var random = SystemRandom()
    private let channels = ChannelStore()
    private let broadcasts = BroadcastQueue()
    let finished = Semaphore()
    /// The names its claims give the rows they take (`claimed_by`), one per table, so that a
    /// lost answer of one is told apart from the other's.
    private var broadcastOwner: String { "\(context.instance)/broadcasts" }
    private var channelRequestOwner: String { "\(context.instance)/channel-requests" }
    /// A claim's session ended before its answer came: it may have gone through, leasing a row
    /// to this worker that it knows nothing of (`giveBackClaimsInDoubt`).
    private var claimsInDoubt = false
    private var nextGiveBackTry = 0.0
    private static let giveBackRetryInterval = 5.0
    /// Rows this worker claimed and dropped without an outcome (a database error after the
    /// claim, the request perhaps at APNs), with when their lease ends (monotonic seconds):
    /// left to run out, so that whoever takes one says it may have reached APNs already;
    /// `giveBackClaimsInDoubt` leaves them alone.
    private var abandonedRequests: [Int64: Double] = [:]
    private var abandonedBroadcasts: [Int64: Double] = [:]

    /// A claimed row is not offered to another worker for this long; the engine answers by its
    /// answer deadline (`answerWaitSeconds` less 5 s), so the lease outlives the wait.
    private var leaseSeconds: Double { context.config.apns.answerWaitSeconds + 30 }

    private struct DispatcherKey: Hashable {
        var app: String
        var environment: APNsEnvironment
        var management: Bool
    }

    init(context: PipelineContext) {
        self.context = context
    }

    func start() {
        PosixThread.detach(name: "pushd-broadcasts") { [self] in
            run()
            finished.signal()
        }
    }

    /// Shuts the worker's own dispatchers down; call after `finished`.
    func shutdown() {
        for dispatcher in dispatchers.values { dispatcher.shutdown(drainTimeoutMilliseconds: 1000) }
        dispatchers.removeAll()
    }

    private func run() {
        var failures = 0
        var passFailed = false
        var passStarted = RateLimiter.monotonicSeconds()
        while !context.isStopping {
            // The pass before this one went through (`LaneHealth`).
            if !passFailed {
                context.laneHealth.passed(Self.lane, started: passStarted)
                context.refusedWrites.passed(Self.refusedWritesName, started: passStarted)
            }
            passFailed = false
            passStarted = RateLimiter.monotonicSeconds()
            do {
                let connection = try connectIfNeeded()
                context.makeDueAfterOutage(lane: Self.lane, what: "broadcast jobs") { back in
                    try broadcasts.makeDue(connection, app: back.app, environment: context.outageEnvironment(back.environment),
                                           errorPrefixes: OutcomePolicy.unavailableReasonPrefixes, onRefused: context.reportRefusedRewrites(madeDue:))
                }
                context.makeDueAfterOutage(lane: Self.channelsLane, what: "channel requests") { back in
                    try channels.makeDue(connection, app: back.app, environment: context.outageEnvironment(back.environment),
                                         outcomePrefixes: OutcomePolicy.unavailableReasonPrefixes)
                }
                // Claimed at once below, by this worker.
                try context.probeOutage(lane: Self.lane, what: "broadcast jobs") { apps, environment in
                    try broadcasts.makeSoonestDue(connection, apps: apps, environment: context.outageEnvironment(environment),
                                                  errorPrefixes: OutcomePolicy.unavailableReasonPrefixes,
                                                  onRefused: context.reportRefusedRewrites(madeDue:))
                }
                try context.probeOutage(lane: Self.channelsLane, what: "channel requests") { apps, environment in
                    try channels.makeSoonestDue(connection, apps: apps, environment: context.outageEnvironment(environment),
                                                outcomePrefixes: OutcomePolicy.unavailableReasonPrefixes)
                }
                // A certificate sends a certificate app's channel requests and broadcasts alike:
                // one to an environment this instance has no credentials for is left to another
                // instance (`EnvironmentCoverage.decide`).
                let apps = context.claimableApps()
                // Requests and broadcasts of an environment this instance leaves to another live
                // instance (it has no certificate there) are not claimed here: claimed, each
                // would only be put back, `EnvironmentCoverage.leaveRetrySeconds` later, every
                // time this one won it.
                let leaving = context.coverage.leaving()
                // One row at a time, each leased as it is taken: rows are sent one after the
                // other, each waiting for its answer, so the lease of a row claimed with others
                // could end before its turn came, and another instance would send it too.
                // This worker holds no row between passes: what a claim whose answer was lost
                // took is all that is under its names, and goes back before it claims again.
                if claimsInDoubt, RateLimiter.monotonicSeconds() >= nextGiveBackTry { giveBackClaimsInDoubt(on: connection) }
                let operations = try claimInDoubtIfLost(connection) {
                    try channels.claim(connection, limit: 1, apps: apps, leaving: leaving, leaseSeconds: leaseSeconds, owner: channelRequestOwner)
                }
                for operation in operations {
                    try abandonIfFailed(operation.id, in: &abandonedRequests) { try carryOut(operation, on: connection) }
                }
                let jobs = try claimInDoubtIfLost(connection) {
                    try broadcasts.claim(connection, limit: 1, apps: apps, leaving: leaving, leaseSeconds: leaseSeconds, owner: broadcastOwner) { refused in
                        context.reportRefusedRewrites(refused, lane: Self.lane, doing: "claimed")
                    }
                }
                for job in jobs { try abandonIfFailed(job.id, in: &abandonedBroadcasts) { try send(job, on: connection) } }
                context.broadcastDeadLetters.flush()
                context.operatorLog.tick()
                failures = 0
                if operations.isEmpty && jobs.isEmpty {
                    // Woken by the tables' notifications; the time-out catches scheduled and
                    // retried rows and bounds how long shutdown waits.
                    if try !broadcasts.hasDue(connection, apps: apps, leaving: leaving) {
                        _ = try connection.waitForNotifications(timeoutMilliseconds: 1000)
                    }
                }
            } catch {
                failures += 1
                passFailed = true
                context.databaseError(error)
                if !context.refusedWrites.failed(Self.refusedWritesName, meanwhile: "no broadcast or channel request is claimed, so none is sent", error: error) {
                    context.logger.warning("broadcast worker: \(error)")
                }
                context.laneHealth.failed(Self.lane, error: error, started: passStarted)
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
        let fresh = try QueueSession.connect(url: context.config.databaseURL, applicationName: "pushd-broadcasts")
        try fresh.listen(ChannelStore.channel)
        try fresh.listen(BroadcastQueue.channel)
        connection = fresh
        return fresh
    }

    /// Runs a claim; one whose session ended before its answer came leaves the worker in
    /// doubt (an error the server answered on a sound session undid it: it is one statement).
    private func claimInDoubtIfLost<T>(_ connection: PGConnection, _ claim: () throws -> T) throws -> T {
        do {
            return try claim()
        } catch let error as PGError where error.leftStatementInDoubt(on: connection) {
            claimsInDoubt = true
            throw error
        }
    }

    /// Carries out a claimed row; one dropped by an error keeps its lease to run out.
    private func abandonIfFailed(_ id: Int64, in abandoned: inout [Int64: Double], _ work: () throws -> Void) throws {
        do {
            try work()
        } catch {
            abandoned[id] = RateLimiter.monotonicSeconds() + leaseSeconds
            throw error
        }
    }

    /// Gives back the channel requests and broadcast jobs under this worker's names after a
    /// claim whose answer it did not read (`claimsInDoubt`), each with the lease its claim
    /// replaced. Such a row sat leased to nobody for the answer wait and 30 s, and was then
    /// taken over from this live worker with a warning that it may have reached APNs (for a
    /// channel create, asking for a channel audit). One notice per row given back: nothing of
    /// it was sent. Failing, it is tried again a few seconds later, and the pass goes on.
    private func giveBackClaimsInDoubt(on connection: PGConnection) {
        do {
            let now = RateLimiter.monotonicSeconds()
            abandonedRequests = abandonedRequests.filter { $0.value > now }
            abandonedBroadcasts = abandonedBroadcasts.filter { $0.value > now }
            let requests = try channels.giveBackClaims(connection, owner: channelRequestOwner, excluding: Array(abandonedRequests.keys))
            let jobs = try broadcasts.giveBackClaims(connection, owner: broadcastOwner, excluding: Array(abandonedBroadcasts.keys))
            claimsInDoubt = false
            func replaced(_ back: GivenBackClaim) -> String {
                back.replacedUntil.map { until in
                    "; the lease it replaced, which ran out \(Int(max(0, Timestamp().timeIntervalSince(until)))) s ago unsettled, is put back, "
                        + "so the next claim still says it may have reached APNs"
                } ?? ""
            }
            for back in requests {
                context.logger.notice("broadcast worker: gave back channel request \(back.id) of app \(back.app), claimed by a claim whose answer its database session ended before; it sent nothing of it\(replaced(back))",
                                      ("event", "channel_request_given_back"), ("app", .string(back.app)), ("request", .int(back.id)))
            }
            for back in jobs {
                context.logger.notice("broadcast worker: gave back broadcast job \(back.id) of app \(back.app), claimed by a claim whose answer its database session ended before; it sent nothing of it\(replaced(back))",
                                      ("event", "broadcast_claim_given_back"), ("app", .string(back.app)), ("job", .int(back.id)))
            }
        } catch {
            context.databaseError(error)
            nextGiveBackTry = RateLimiter.monotonicSeconds() + Self.giveBackRetryInterval
            // Read-only (a failover): told once for the worker's passes, which fail alike.
            if RefusedWritesLog.refusesWrites(error) { return }
            context.logger.warning("broadcast worker: could not give back the rows a claim whose answer was lost may have taken (tried again in \(Int(Self.giveBackRetryInterval)) s; until then such a row waits for its lease to run out): \(error)",
                                   ("event", "broadcast_claim_give_back_failed"))
        }
    }

    // MARK: Channel operations

    private func carryOut(_ operation: ChannelOperation, on connection: PGConnection) throws {
        guard let sender = context.senders[operation.app] else { return }
        if operation.kind == .create, let ended = operation.unsettledLeaseEndedAt {
            // A delete carried out twice is harmless (the second is answered ChannelNotRegistered);
            // a create may have made a channel at APNs that pushd has no record of.
            let since = Int(max(0, Timestamp().timeIntervalSince(ended)))
            context.logger.warning("took over channel create request \(operation.id) of app \(operation.app), whose earlier claim's lease "
                                   + "ended \(since) s ago with no outcome recorded (its instance stopped or lost the database): APNs may have "
                                   + "created a channel for it already, which pushd has no record of and which counts against the app's "
                                   + "channel limit; creating it again. pushd channels audit --app \(operation.app) lists channels at APNs "
                                   + "that pushd has no record of, with the pushd channels delete command for each",
                                   ("event", "channel_request_taken_over"), ("app", .string(operation.app)),
                                   ("request", .int(operation.id)), ("expired_s", .int(Int64(since))))
            context.metrics.leaseTakeover(app: operation.app, lane: "channel_create").increment()
        }
        if operation.environment == nil, let why = sender.heldByEnvironmentDisagreement(job: nil, registered: nil) {
            // Only this instance's apps[].environment would choose the host, and the fleet
            // disagrees on it: the channel would be made (and recorded) in whichever environment
            // the claimer has. It waits, unspent, until the fleet agrees (then it is due at once).
            try channels.recordRetry(connection, id: operation.id, runAt: Timestamp().addingTimeInterval(Self.heldRetrySeconds),
                                     outcome: HeldWork.errorPrefix + why, countsAsAttempt: false)
            return
        }
        let environment = operation.environment.flatMap(APNsEnvironment.init(name:)) ?? Self.environment(of: sender)
        let kind = operation.kind == .create ? "create" : "delete"
        func count(_ status: String, _ reason: String) {
            context.metrics.channelOperation(app: operation.app, environment: environment.rawValue, operation: kind,
                                             status: status, reason: reason).increment()
        }
        let configured = Self.configured(environment)
        // nil: a certificate app, whose channel request goes with its certificate for the environment.
        let key = sender.tokenKey(for: configured)
        if key == nil, sender.app.credentials(for: configured) == nil {
            // A certificate reaches one environment's host: another live instance with credentials
            // for this one takes the request, else it fails naming the setting.
            if case .leave(let seconds) = context.coverage.decide(app: operation.app, environment: configured, lane: Self.channelsLane) {
                try channels.recordRetry(connection, id: operation.id, runAt: Timestamp().addingTimeInterval(seconds),
                                         outcome: EnvironmentCoverage.leftReason(configured), countsAsAttempt: false)
                return
            }
            count("none", "no_credentials")
            try channels.recordFailed(connection, id: operation.id,
                                      outcome: AppSender.NoCredentials(app: operation.app, environment: configured).description)
            return
        }
        // A held scope keeps the request pending, unsent and unspent, until the hold ends.
        var held = sender.heldReason(sender.broadcastKey(.broadcast, configured))
        if held == nil, operation.kind == .create { held = sender.heldReason(sender.broadcastKey(.channelCreation, configured)) }
        if let held {
            try channels.recordRetry(connection, id: operation.id, runAt: Timestamp().addingTimeInterval(Self.heldRetrySeconds),
                                     outcome: HeldWork.errorPrefix + "\(held)", countsAsAttempt: false)
            return
        }
        let request: ChannelRequest
        switch operation.kind {
        case .create:
            let policy = MessageStoragePolicy(name: operation.storagePolicy) ?? .noMessageStored
            request = ChannelRequest(bundleID: sender.app.bundleID, operation: .create(policy), requestID: APNsID())
        case .delete:
            guard let text = operation.channelID, let id = try? ChannelID(text) else {
                count("none", "invalid")
                try channels.recordFailed(connection, id: operation.id, outcome: "no valid channel id to delete")
                return
            }
            request = ChannelRequest(bundleID: sender.app.bundleID, operation: .delete(id), requestID: APNsID())
        }
        let issues = request.issues(authentication: key == nil ? .certificate : .token)
        if !issues.isEmpty {
            count("none", "invalid")
            try channels.recordFailed(connection, id: operation.id, outcome: NotificationValidationError(issues: issues).description)
            return
        }
        let sent: (outcome: SendOutcome, response: Response?)
        let authorization: String?
        do {
            authorization = try key.map { try sender.tokens.authorization($0) }
            let dispatchRequest = try DispatchRequest(
                method: DispatchRequest.Method(rawValue: request.method) ?? .post, path: request.path,
                headerLines: request.headerFields(authorization: authorization).map(\.line), body: request.body)
            sent = try dispatch(dispatchRequest, sender: sender, environment: environment, management: true)
        } catch let failed as AppSender.ConnectionSetupFailed {
            count("none", "connection_setup")
            try channels.recordRetry(connection, id: operation.id, runAt: Timestamp().addingTimeInterval(Self.setupRetrySeconds),
                                     outcome: failed.description, countsAsAttempt: false)
            return
        } catch {
            count("none", "provider_token")
            try channels.recordRetry(connection, id: operation.id, runAt: Timestamp().addingTimeInterval(30),
                                     outcome: "could not sign the provider token: \(error)", countsAsAttempt: false)
            return
        }
        let outcome = sent.outcome
        context.operatorLog.record(outcome, app: operation.app, environment: environment.rawValue, lane: Self.channelsLane)
        // APNs echoes the request id and quotes it in errors: kept with the row's outcome.
        let requestID = request.requestID.map { " (apns-request-id \($0.lowercasedString))" } ?? ""
        let status = sent.response.map { String($0.status) } ?? "none"
        let label = outcome.label
        if case .response(let response) = outcome, response.isSuccess {
            count(status, "none")
            sender.acceptedIn(configured)
            if operation.kind == .create {
                guard let created = sent.response?.channelID, (try? ChannelID(created)) != nil else {
                    try channels.recordFailed(connection, id: operation.id,
                                              outcome: "APNs answered \(response.status) without a valid apns-channel-id" + requestID)
                    return
                }
                try channels.recordCreated(connection, id: operation.id, channelID: created, environment: environment.rawValue,
                                           outcome: "created" + requestID)
                context.logger.info("created broadcast channel \(created) for app \(operation.app) (\(environment))\(requestID)",
                                    ("app", .string(operation.app)))
            } else {
                try channels.recordDeleted(connection, id: operation.id, environment: environment.rawValue, outcome: "deleted" + requestID)
                // A deletion makes room: creations held for the channel limit may go again.
                for key in sender.releaseHolds(matching: { $0.scope == .channelCreation && $0.environment == configured }) {
                    context.logger.notice("resumed \(key.scope.describe(topic: key.topic)) for app \(operation.app) in \(configured.rawValue): a channel was deleted",
                                          ("event", "sending_resumed"), ("app", .string(operation.app)),
                                          ("environment", .string(configured.rawValue)), ("scope", .string(key.scope.rawValue)))
                }
            }
            return
        }
        count(status, label)
        if operation.kind == .delete, case .response(let response) = outcome, response.reason == .channelNotRegistered {
            // The channel is gone either way; the row says APNs did not know it.
            try channels.recordDeleted(connection, id: operation.id, environment: environment.rawValue,
                                       outcome: "ChannelNotRegistered: APNs does not know this channel in \(environment)" + requestID)
            return
        }
        let verdict = context.environmentKeyVerdict(context.forbiddenVerdict(
            context.policy.verdict(for: outcome, attempt: operation.attempts + 1, expiration: nil,
                                   firstAttemptAt: operation.requestedAt, now: Timestamp(),
                                   apnsDown: context.operatorLog.isDown(app: operation.app, environment: environment.rawValue, lane: Self.channelsLane),
                                   random: &random),
            sender: sender, environment: configured, lane: Self.channelsLane),
            sender: sender, environment: configured, carried: authorization)
        switch verdict {
        case .delivered:
            try channels.recordFailed(connection, id: operation.id, outcome: "unexpected answer \(status)")
        case .retry(let at, let reason, let refresh, let countsAsAttempt):
            if refresh { context.providerTokenExpired(sender, carried: authorization) }
            context.operatorLog.retried(outcome)
            try channels.recordRetry(connection, id: operation.id, runAt: at, outcome: reason, countsAsAttempt: countsAsAttempt)
        case .dead(_, let reason), .prune(_, let reason, _):
            context.logger.warning("channel \(kind) for app \(operation.app) failed: \(reason)\(requestID)", ("app", .string(operation.app)))
            try channels.recordFailed(connection, id: operation.id, outcome: reason + requestID)
        case .pauseApp(let reason):
            guard context.pause(sender, reason: reason, carried: authorization) else {
                // About a key replaced since: sent again at once with the current one.
                try channels.recordRetry(connection, id: operation.id, runAt: Timestamp(), outcome: PipelineContext.replacedKeyRetry,
                                         countsAsAttempt: false)
                return
            }
            try channels.recordRetry(connection, id: operation.id, runAt: Timestamp().addingTimeInterval(30),
                                     outcome: HeldWork.appPausedPrefix + reason, countsAsAttempt: false)
        case .hold(let scope, let reason, let why):
            context.hold(sender, Self.holdKey(scope, sender: sender, environment: configured), why: why, reason: APNsReason(reason))
            try channels.recordRetry(connection, id: operation.id, runAt: Timestamp().addingTimeInterval(Self.heldRetrySeconds),
                                     outcome: HeldWork.errorPrefix + "\(why)", countsAsAttempt: false)
        }
    }

    // MARK: Broadcasts

    private func send(_ job: BroadcastJob, on connection: PGConnection) throws {
        guard let sender = context.senders[job.app] else { return }
        if let ended = job.unsettledLeaseEndedAt {
            let since = Int(max(0, Timestamp().timeIntervalSince(ended)))
            context.logger.warning("took over broadcast job \(job.id) of app \(job.app) to channel \(job.channelID), whose earlier claim's "
                                   + "lease ended \(since) s ago with no outcome recorded (its instance stopped or lost the database): "
                                   + "it may have reached APNs already, and is sent again",
                                   ("event", "broadcast_taken_over"), ("app", .string(job.app)), ("job", .int(job.id)),
                                   ("channel", .string(job.channelID)), ("expired_s", .int(Int64(since))))
            context.metrics.leaseTakeover(app: job.app, lane: Self.lane).increment()
        }
        if let expired = OutcomePolicy.expiredBeforeSending(job.expiration.map { Int64($0.timeIntervalSince1970.rounded(.down)) }, now: Timestamp()) {
            try dead(job, status: nil, reason: expired, label: OutcomePolicy.expiredLabel, on: connection)
            return
        }
        if job.environment == nil, let why = sender.heldByEnvironmentDisagreement(job: nil, registered: nil) {
            // Neither the broadcast nor its channel's record names an environment, and the fleet
            // disagrees on the app's: the host would be the claimer's. It waits, unspent, as a
            // transactional job does, until the fleet agrees (then it is due at once).
            try broadcasts.retry(connection, id: job.id, runAt: Timestamp().addingTimeInterval(Self.heldRetrySeconds),
                                 error: HeldWork.errorPrefix + why, countsAsAttempt: false)
            return
        }
        let environment = job.environment.flatMap(APNsEnvironment.init(name:)) ?? Self.environment(of: sender)
        // nil: a certificate app, whose broadcast goes with its certificate for the environment.
        let key = sender.tokenKey(for: Self.configured(environment))
        if key == nil, sender.app.credentials(for: Self.configured(environment)) == nil {
            // A certificate reaches one environment's host: another live instance with credentials
            // for this one takes the broadcast, else it is dead-lettered. The claim leaves such
            // broadcasts alone once the heartbeat knows that instance; this catches the rest
            // (claimed before it did).
            let missing = AppSender.NoCredentials(app: job.app, environment: Self.configured(environment))
            if case .leave(let seconds) = context.coverage.decide(app: job.app, environment: Self.configured(environment), lane: Self.lane) {
                try broadcasts.retry(connection, id: job.id, runAt: Timestamp().addingTimeInterval(seconds),
                                     error: EnvironmentCoverage.leftReason(Self.configured(environment)), countsAsAttempt: false)
                return
            }
            try dead(job, status: nil, reason: missing.description, label: missing.label, on: connection)
            return
        }
        let broadcast: BroadcastNotification
        do {
            guard let priority = Priority(rawValue: job.priority) else {
                throw NotificationValidationError(issues: [.init(field: "apns-priority", rule: .outOfRange, message: "\(job.priority) is not 10, 5 or 1")])
            }
            let policy = job.storagePolicy.flatMap(MessageStoragePolicy.init(name:))
            broadcast = BroadcastNotification(
                bundleID: sender.app.bundleID, channelID: try ChannelID(job.channelID), priority: priority,
                expiration: Self.expiration(of: job, policy: policy), apnsID: job.apnsID,
                payload: Array(job.payload.utf8))
            try broadcast.validate(authentication: key == nil ? .certificate : .token, storagePolicy: policy)
        } catch {
            try dead(job, status: nil, reason: "\(error)", label: "invalid", on: connection)
            return
        }
        if let held = sender.heldReason(sender.broadcastKey(.broadcast, Self.configured(environment))) {
            try broadcasts.retry(connection, id: job.id, runAt: Timestamp().addingTimeInterval(Self.heldRetrySeconds),
                                 error: HeldWork.errorPrefix + "\(held)", countsAsAttempt: false)
            return
        }
        let sent: (outcome: SendOutcome, response: Response?)
        let sentAt = Timestamp()
        let authorization: String?
        do {
            authorization = try key.map { try sender.tokens.authorization($0) }
            let request = try DispatchRequest(path: broadcast.path,
                                              headerLines: broadcast.headerFields(authorization: authorization).map(\.line),
                                              body: broadcast.payload)
            sent = try dispatch(request, sender: sender, environment: environment, management: false)
        } catch let failed as AppSender.ConnectionSetupFailed {
            context.metrics.retry(app: job.app, lane: Self.lane, reason: AppSender.ConnectionSetupFailed.label).increment()
            try broadcasts.retry(connection, id: job.id, runAt: Timestamp().addingTimeInterval(Self.setupRetrySeconds),
                                 error: failed.description, countsAsAttempt: false)
            return
        } catch {
            try broadcasts.retry(connection, id: job.id, runAt: Timestamp().addingTimeInterval(30),
                                 error: "could not sign the provider token: \(error)", countsAsAttempt: false)
            return
        }
        let outcome = sent.outcome
        context.operatorLog.record(outcome, app: job.app, environment: environment.rawValue, lane: Self.lane)
        // Retries follow the expiration the application gave; the 0 sent for a job without
        // one satisfies APNs's header rule and does not shorten pushd's own retry window.
        let verdict = context.environmentKeyVerdict(context.forbiddenVerdict(
            context.policy.verdict(for: outcome, attempt: job.attempts + 1,
                                   expiration: job.expiration.map { Int64($0.timeIntervalSince1970.rounded(.down)) },
                                   firstAttemptAt: job.firstAttemptAt ?? sentAt, now: Timestamp(),
                                   apnsDown: context.operatorLog.isDown(app: job.app, environment: environment.rawValue, lane: Self.lane),
                                   random: &random),
            sender: sender, environment: Self.configured(environment), lane: Self.lane),
            sender: sender, environment: Self.configured(environment), carried: authorization)
        switch verdict {
        case .delivered:
            try broadcasts.delivered(connection, ids: [job.id])
            sender.countResponse(status: 200, reason: "none", environment: Self.configured(environment))
            context.metrics.broadcastSent(app: job.app, environment: environment.rawValue).increment()
        case .retry(let at, let reason, let refresh, let countsAsAttempt):
            sender.countAnswer(outcome, environment: Self.configured(environment))
            context.metrics.retry(app: job.app, lane: Self.lane, reason: outcome.label).increment()
            context.tally.add(context.tally.retried)
            context.operatorLog.retried(outcome)
            if refresh { context.providerTokenExpired(sender, carried: authorization) }
            try broadcasts.retry(connection, id: job.id, runAt: at, error: reason, countsAsAttempt: countsAsAttempt,
                                 sentAt: job.firstAttemptAt ?? sentAt)
        case .dead(let status, let reason):
            sender.countAnswer(outcome, environment: Self.configured(environment))
            try dead(job, status: status, reason: reason, label: outcome.label, on: connection)
        case .prune(let status, let reason, _):
            // Only device tokens are pruned; a broadcast answered that way is simply dead.
            sender.countAnswer(outcome, environment: Self.configured(environment))
            try dead(job, status: status, reason: reason, label: outcome.label, on: connection)
        case .pauseApp(let reason):
            sender.countAnswer(outcome, environment: Self.configured(environment))
            guard context.pause(sender, reason: reason, carried: authorization) else {
                // About a key replaced since: sent again at once with the current one, no attempt spent.
                context.metrics.retry(app: job.app, lane: Self.lane, reason: outcome.label).increment()
                try broadcasts.retry(connection, id: job.id, runAt: Timestamp(), error: PipelineContext.replacedKeyRetry,
                                     countsAsAttempt: false, sentAt: job.firstAttemptAt ?? sentAt)
                return
            }
            try broadcasts.retry(connection, id: job.id, runAt: Timestamp().addingTimeInterval(30), error: HeldWork.appPausedPrefix + reason,
                                 countsAsAttempt: false, sentAt: job.firstAttemptAt ?? sentAt)
        case .hold(let scope, let reason, let why):
            sender.countAnswer(outcome, environment: Self.configured(environment))
            context.hold(sender, Self.holdKey(scope, sender: sender, environment: Self.configured(environment)), why: why,
                         reason: APNsReason(reason))
            try broadcasts.retry(connection, id: job.id, runAt: Timestamp().addingTimeInterval(Self.heldRetrySeconds),
                                 error: HeldWork.errorPrefix + "\(why)", countsAsAttempt: false)
        }
    }

    /// The `apns-expiration` of a broadcast job, which Apple requires on every broadcast: the
    /// job's own, else 0 (the one value a channel of either storage policy takes), except on
    /// a channel known to store its most recent message, where it is the job's creation plus
    /// the 8 hours APNs keeps that message at most.
    static func expiration(of job: BroadcastJob, policy: MessageStoragePolicy?) -> Int64 {
        if let expiration = job.expiration { return Int64(expiration.timeIntervalSince1970.rounded(.down)) }
        guard policy == .mostRecentMessageStored else { return BroadcastNotification.defaultExpiration }
        return Int64(job.createdAt.timeIntervalSince1970.rounded(.down)) + mostRecentStorageSeconds
    }

    /// Apple: "Messages in Most Recent Message store for a maximum duration of 8 hours."
    static let mostRecentStorageSeconds: Int64 = 8 * 3600

    /// A held broadcast job or channel request is looked at again after this long.
    static let heldRetrySeconds = 30.0

    /// What an answer holds: a TopicDisallowed on these APIs refuses the bundle id itself.
    static func holdKey(_ scope: ConfigurationScope, sender: AppSender, environment: PushdConfig.Environment) -> AppSender.HoldKey {
        scope == .topic ? AppSender.topicKey(sender.app.bundleID, environment) : sender.broadcastKey(scope, environment)
    }

    /// The `lane` label of broadcast retries and dead letters.
    static let lane = "broadcast"
    /// The `lane` of the channel management API in the outage log and `pushd_apns_unavailable`.
    static let channelsLane = "channels"

    private func dead(_ job: BroadcastJob, status: Int?, reason: String, label: String, on connection: PGConnection) throws {
        try broadcasts.dead(connection, id: job.id, status: status, reason: reason)
        context.metrics.deadLetter(app: job.app, lane: Self.lane, reason: label).increment()
        context.tally.add(context.tally.dead)
        context.operatorLog.deadLettered(reason: label)
        context.broadcastDeadLetters.deadLettered(id: job.id, channel: job.channelID, app: job.app, label: label, reason: reason)
    }

    // MARK: Transport

    static func environment(of sender: AppSender) -> APNsEnvironment {
        sender.app.environment.apns
    }

    /// The configuration's name for an APNs environment.
    static func configured(_ environment: APNsEnvironment) -> PushdConfig.Environment {
        environment == .production ? .production : .sandbox
    }

    /// Seconds before a broadcast or channel request whose connections could not be set up is
    /// tried again: as a transactional job or a campaign target waits for the same failure.
    static let setupRetrySeconds = 10.0

    /// Sends one request on the app's dispatcher for that environment and API and waits for
    /// its result (by the answer deadline, which the engine enforces).
    private func dispatch(_ request: DispatchRequest, sender: AppSender, environment: APNsEnvironment,
                          management: Bool) throws(AppSender.ConnectionSetupFailed) -> (outcome: SendOutcome, response: Response?) {
        let key = DispatcherKey(app: sender.app.name, environment: environment, management: management)
        let dispatcher: HTTP2Dispatcher
        if let existing = dispatchers[key] {
            dispatcher = existing
        } else {
            let now = RateLimiter.monotonicSeconds()
            if let failed = setupFailures[key], now < failed.retryAt { throw failed.failure }
            do {
                dispatcher = try makeDispatcher(app: sender.app, environment: environment, management: management)
            } catch {
                let what = management ? "channel requests" : "broadcasts"
                context.logger.error("cannot set up sending \(what) for app \(sender.app.name) to \(environment.rawValue): \(error); they wait and are tried again in \(Int(Self.setupRetrySeconds)) s",
                                     ("app", .string(sender.app.name)), ("environment", .string(environment.rawValue)), ("lane", .string(management ? Self.channelsLane : Self.lane)))
                let failure = AppSender.ConnectionSetupFailed(message: "\(error)")
                setupFailures[key] = (now + Self.setupRetrySeconds, failure)
                context.recordConnectionSetupFailure(app: sender.app.name, lane: management ? Self.channelsLane : Self.lane,
                                                     environment: environment.rawValue, error: failure.message)
                throw failure
            }
            setupFailures[key] = nil
            dispatchers[key] = dispatcher
        }
        // A certificate renewed by a reload (`Pipeline.replaceCertificate`) reaches the app's
        // other clients through its sender; this worker's own connections take it here.
        if let identity = context.certificates.identity(app: sender.app.name, environment: Self.configured(environment)) {
            if let before = presented[key], before != identity { dispatcher.replaceCertificate(identity) }
            presented[key] = identity
        }
        nextTag &+= 1
        let tag = nextTag
        dispatcher.submit(request, tag: tag)
        let result = results.wait(for: tag)
        return (sender.outcome(of: result, environment: Self.configured(environment)), result.response)
    }

    private func makeDispatcher(app: PushdConfig.App, environment: APNsEnvironment, management: Bool) throws -> HTTP2Dispatcher {
        let config = context.config
        // A certificate app's connections present the certificate held in memory for the
        // environment, on the broadcast host and the channel management host alike.
        guard var configuration = try Pipeline.dispatcherConfiguration(
            for: app, environment: Self.configured(environment), config: config,
            certificate: context.certificates.identity(app: app.name, environment: Self.configured(environment)), checkingCAFile: true) else {
            throw AppSender.NoCredentials(app: app.name, environment: Self.configured(environment))
        }
        // Broadcasts go to the environment's push host as notifications do (`apns.host`, and
        // `apns.sandbox_host` for the sandbox, already applied); channel requests to the
        // management host and port, or `apns.channel_host` (without a port, the management port).
        if management { try configuration.applyChannelManagementHost(config.apns.channelHostOverride, environment: environment) }
        // Broadcasts and channel requests are few: one connection each is plenty.
        configuration.threads = 1
        configuration.connectionsPerThread = 1
        let metrics = AppDispatcherMetrics(app: app.name, environment: environment.rawValue, metrics: context.metrics)
        let results = self.results
        return try HTTP2Dispatcher(configuration: configuration, metrics: metrics) { results.deliver($0) }
    }
}

/// Results handed from dispatcher threads to the one worker thread waiting for them.
final class BlockingResults: @unchecked Sendable {
    private let ready = Condition<[UInt64: DispatchResult]>([:])

    func deliver(_ result: DispatchResult) {
        ready.update { $0[result.tag] = result }
    }

    func wait(for tag: UInt64) -> DispatchResult {
        ready.wait { $0.removeValue(forKey: tag) }!
    }
}
