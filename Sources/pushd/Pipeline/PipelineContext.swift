import APNs
import Dispatcher
import Glibc
import Posix
import Metrics
import QueueStore
import Locking
import Synchronization

/// What every worker of one pushd process shares.
///
/// Thread rule: immutable after init except the atomics and the mutex-guarded tallies.
final class PipelineContext: @unchecked Sendable {
    let config: PushdConfig
    let instance: String
    let senders: [String: AppSender]
    /// The certificate apps' client certificates held in memory (`AppCertificates`).
    let certificates: AppCertificates
    let policy: OutcomePolicy
    let metrics: PushdMetrics
    let logger: Logger
    let doorbell = Doorbell()
    let tally = Tally()
    let throttle = TokenThrottle()
    let operatorLog: OperatorLog
    /// One line per app and reason a minute for dead-lettered broadcasts.
    let broadcastDeadLetters: BroadcastDeadLetterLog
    /// The environments of its apps this instance cannot send to, and who can.
    let coverage: EnvironmentCoverage
    /// Whether each lane's passes go through or keep failing on the database (`LaneHealth`).
    let laneHealth: LaneHealth
    /// Set when shutdown begins: workers stop claiming and finish what they hold.
    let stopping = Atomic<Bool>(false)
    /// Campaigns this process left unleased because their topic is held: a SIGHUP makes
    /// them leasable again at once.
    let deferredCampaigns = Lock<Set<Int64>>([])
    /// Campaigns whose chunk stopped before a target APNs takes nothing for on the campaign
    /// lane (`CampaignWorker.stopWhileDown`): the workers' leases pass them over while those
    /// environments stay down, their unsent targets left in their chunks.
    let campaignsWaitingForAPNs = Lock<[Int64: CampaignWorker.WaitForAPNs]>([:])
    /// The lanes whose connections to APNs could not be set up lately (`AppSender.ConnectionSetupFailed`),
    /// with the error and when it was last seen (monotonic seconds), by app, lane and environment.
    private let setupFailures = Lock<[SetupFailureKey: (error: String, at: Double)]>([:])

    private struct SetupFailureKey: Hashable {
        var app: String
        var lane: String
        var environment: String
    }

    /// What tells a connection setup failure from an outage among an app's entries of
    /// `pushd.instances.apns_unavailable` ("campaign lane cannot connect to sandbox: …").
    static let cannotConnectMarker = " lane cannot connect to "

    /// How long a connection setup failure is reported after it was last seen: the work it
    /// holds tries again every 10 s while it lasts.
    static let setupFailureReportSeconds = 30.0

    /// A lane of `app` could not set up its connections to `environment`: its work waits and
    /// tries again, and `/readyz` and `pushd status` name it until it has not failed for
    /// `setupFailureReportSeconds`.
    func recordConnectionSetupFailure(app: String, lane: String, environment: String, error: String) {
        let now = RateLimiter.monotonicSeconds()
        setupFailures.withLock { $0[SetupFailureKey(app: app, lane: lane, environment: environment)] = (error, now) }
    }

    /// The transactional or campaign lane of `app` could not set up its connections to
    /// `environment` for a notification: the error line, `pushd_retries_total{reason="connection_setup"}`
    /// and the record for `/readyz` and `pushd status` (`recordConnectionSetupFailure`).
    /// Returns the failure the notification waits with (`cannot connect: …`).
    func connectionSetupFailed(app: String, lane: Lane, environment: PushdConfig.Environment, error: any Error) -> AppSender.ConnectionSetupFailed {
        logger.error("cannot set up sending for app \(app) to \(environment.rawValue): \(error)",
                     ("app", .string(app)), ("lane", .string(lane.rawValue)), ("environment", .string(environment.rawValue)))
        metrics.retry(app: app, lane: lane.rawValue, reason: AppSender.ConnectionSetupFailed.label).increment()
        let failed = AppSender.ConnectionSetupFailed(message: "\(error)")
        recordConnectionSetupFailure(app: app, lane: lane.rawValue, environment: environment.rawValue, error: failed.message)
        return failed
    }

    /// App → "lane lane cannot connect to environment: error" (joined by "; ") for every
    /// connection setup failure seen within `setupFailureReportSeconds`.
    func connectionSetupFailures() -> [String: String] {
        let now = RateLimiter.monotonicSeconds()
        let recent = setupFailures.withLock { failures -> [(SetupFailureKey, String)] in
            guard !failures.isEmpty else { return [] }
            failures = failures.filter { now - $0.value.at < Self.setupFailureReportSeconds }
            return failures.map { ($0.key, $0.value.error) }
        }
        var byApp = [String: String]()
        for (key, error) in recent.sorted(by: { ($0.0.app, $0.0.lane, $0.0.environment) < ($1.0.app, $1.0.lane, $1.0.environment) }) {
            let entry = "\(key.lane)\(Self.cannotConnectMarker)\(key.environment): \(error)"
            byApp[key.app] = byApp[key.app].map { "\($0); \(entry)" } ?? entry
        }
        return byApp
    }

    /// One `campaign_waiting_for_apns` and one `campaign_apns_back` line per app a minute, the
    /// others counted (`CampaignWorker.APNsWaitLine`).
    let campaignAPNsLines = Lock<LogGate<CampaignWorker.APNsWaitLine>>(LogGate())
    /// What the workers say while the database refuses writes (a failover).
    let refusedWrites: RefusedWritesLog
    /// How long a paused app waits before trying its credentials again (a SIGHUP resumes it at once).
    let pauseDuration: Double = 300
    /// The lanes `OperatorLog` tracks outages of: the two of notifications to devices, and
    /// broadcasts and the channel management API.
    static let outageLanes = Lane.allCases.map(\.rawValue) + [BroadcastWorker.lane, BroadcastWorker.channelsLane]
    /// When each lane that is down next makes a waiting notification due (`probeOutage`).
    private let probes: Lock<(schedule: OutageProbe, random: SystemRandom)>
    /// Rows a CHECK refused to write since the last `rewrite_refused` line, and when it was
    /// written (monotonic seconds; `reportRefusedRewrites`).
    let refusedRewrites = Lock<(count: Int, loggedAt: Double)>((0, -.infinity))
    /// The same for token prunes a CHECK refused (`reportRefusedPrunes`).
    let refusedPrunes = Lock<(count: Int, loggedAt: Double)>((0, -.infinity))
    let failedPrunes = Lock<(count: Int, loggedAt: Double)>((0, -.infinity))
    /// When the `apns_forbidden` line of each app and environment was last written (`forbiddenVerdict`).
    let forbiddenLines = Lock<LogGate<String>>(LogGate())
    /// `bad_device_token_run` lines, one per app and environment a minute.
    let badDeviceTokenLines = Lock<LogGate<String>>(LogGate())
    /// Campaigns whose row a CHECK refuses (`CampaignRefusal`), by id: when their
    /// `campaign_refused` line was last written.
    let refusedCampaigns = Lock<[Int64: Double]>([:])
    /// The campaigns of this instance's apps held for a refused row, as the campaign workers
    /// last read them (every `CampaignWorker.cancelledSweepInterval`): `/readyz` names them.
    let campaignHolds = Lock<[CampaignRefusal]>([])

    init(config: PushdConfig, instance: String, senders: [String: AppSender], certificates: AppCertificates,
         metrics: PushdMetrics, logger: Logger) {
        self.config = config
        self.instance = instance
        self.senders = senders
        self.certificates = certificates
        self.metrics = metrics
        self.logger = logger
        coverage = EnvironmentCoverage(apps: config.apps, logger: logger, metrics: metrics)
        operatorLog = OperatorLog(logger: logger, summaryInterval: Double(config.logSummarySeconds), metrics: metrics)
        broadcastDeadLetters = BroadcastDeadLetterLog(logger: logger)
        laneHealth = LaneHealth(metrics: metrics, logger: logger)
        refusedWrites = RefusedWritesLog(logger: logger)
        probes = Lock((schedule: OutageProbe(interval: Double(config.retry.outageProbeMilliseconds) / 1000), random: SystemRandom()))
        // Every app's lanes show 0 from the start in each environment it can send to, so a query
        // sees an outage begin, not a series appear; probes too, so an increase() over the first
        // probe of an outage is not lost.
        for app in config.apps {
            for environment in PushdConfig.Environment.allCases where app.credentials(for: environment) != nil {
                for lane in Self.outageLanes {
                    metrics.apnsUnavailable(app: app.name, environment: environment.rawValue, lane: lane).set(0)
                    metrics.apnsThrottled(app: app.name, environment: environment.rawValue, lane: lane).set(0)
                }
            }
        }
        for environment in PushdConfig.Environment.allCases {
            for lane in Self.outageLanes { _ = metrics.outageProbes(environment: environment.rawValue, lane: lane) }
        }
        policy = OutcomePolicy(retry: RetryPolicy(baseDelay: Double(config.retry.baseDelayMilliseconds) / 1000,
                                                  maxDelay: Double(config.retry.maxDelayMilliseconds) / 1000,
                                                  maxAttempts: config.retry.maxAttempts,
                                                  outageLimit: Double(config.retry.outageLimitSeconds)))
    }

    var isStopping: Bool { stopping.load(ordering: .relaxed) }

    /// The apps this instance claims jobs and leases chunks of: every configured app
    /// whose sending is not paused. Work of any other app stays queued for an instance
    /// configured for it.
    func claimableApps() -> [String] {
        senders.values.compactMap { $0.pausedReason == nil ? $0.app.name : nil }.sorted()
    }

    /// Apps whose jobs stay queued for now.
    func pausedApps() -> [String] {
        senders.values.compactMap { $0.pausedReason == nil ? nil : $0.app.name }
    }

    /// Every paused app with why, sorted by app: `/readyz` names the reason, not only the app.
    func pausedAppReasons() -> [(app: String, reason: String)] {
        senders.values.compactMap { sender in sender.pausedReason.map { (app: sender.app.name, reason: $0) } }.sorted { $0.app < $1.app }
    }

    /// Apps paused because the APNs server's certificate failed verification, with why,
    /// sorted by app (`AppSender.serverCertificateRefusal`): they make the process not ready.
    func serverCertificateRefusals() -> [(app: String, reason: String)] {
        senders.values.compactMap { sender in sender.serverCertificateRefusal.map { (app: sender.app.name, reason: $0) } }.sorted { $0.app < $1.app }
    }

    /// App → "lane lane in environment: error" (joined by "; ") for every app APNs takes none
    /// of the notifications of in some environment on some lane now (`OperatorLog`'s
    /// outages). Keyed by app alone, as `pushd.instances.apns_unavailable` has always been, so
    /// that instances of every version read each other's. A lane APNs answers mostly 429 on
    /// (`OperatorLog.throttledLanes`) is named here too, as throttled: little of its work gets
    /// through, but it is still sent (a campaign there is leased, not left waiting for APNs).
    func apnsUnavailable() -> [String: String] {
        var byApp = [String: String]()
        let entries = operatorLog.outages().map { ($0.app, "\($0.lane) lane in \($0.environment): \($0.error)") }
            + operatorLog.throttledLanes().map { ($0.app, "\($0.lane) lane throttled in \($0.environment): \($0.error)") }
        for (app, entry) in entries {
            byApp[app] = byApp[app].map { "\($0); \(entry)" } ?? entry
        }
        return byApp
    }

    /// The error of a notification sent again because APNs refused the token of a key replaced since.
    static let replacedKeyRetry = "InvalidProviderToken to a token of the key file replaced on reload: sent again with the current key"

    /// Pauses `sender` after APNs refused its credentials (`reason`) in answer to a request that
    /// carried `authorization`. Returns false, and pauses nothing, when that answer was
    /// InvalidProviderToken to a request signed by a key a reload has replaced since: it judges
    /// the old key, and the caller sends the notification again at once with the new one.
    /// Before, such answers arriving after SIGHUP paused the app just fixed for 5 minutes.
    @discardableResult
    func pause(_ sender: AppSender, reason: String, carried authorization: String? = nil) -> Bool {
        let invalidToken = reason == APNsReason.invalidProviderToken.rawValue
        if invalidToken, let key = sender.tokenKey(carried: authorization), let authorization,
           !sender.tokens.signedByCurrentKey(key, authorization: authorization) {
            sender.tokens.refusedReplacedKey(key)
            return false
        }
        let seconds = Self.pauseSeconds(reason: reason, otherwise: pauseDuration)
        if sender.pauseSending(reason: reason, until: Timestamp().addingTimeInterval(seconds)) {
            let again = seconds < 60 ? "\(Int(seconds)) s" : "\(Int(seconds / 60)) minutes"
            logger.error("sending for app \(sender.app.name) is paused, its jobs are kept: \(Self.describePause(reason)); fix its configuration and send SIGHUP, else sending is tried again in \(again)",
                         ("app", .string(sender.app.name)), ("reason", .string(reason)))
            // The fleet must not take the refused token over from the shared table.
            if invalidToken, let key = sender.tokenKey(carried: authorization) { sender.tokens.reportInvalid(key, carried: authorization) }
        }
        return true
    }

    /// How long a pause for `reason` lasts: `otherwise`, but for CA certificates libcurl could
    /// not load as it opened a connection (`TransportFailureKind.trustStoreUnusable`), a file
    /// caught being rewritten more likely than one that stays bad: tried again after
    /// `trustStorePauseSeconds` (the wait of the work a pause puts back), not after 5 minutes.
    static func pauseSeconds(reason: String, otherwise: Double) -> Double {
        reason.hasPrefix(TransportFailureKind.trustStoreUnusable.explanation) ? trustStorePauseSeconds : otherwise
    }

    static let trustStorePauseSeconds = 30.0

    /// APNs answered ExpiredProviderToken to a request of `sender` that carried `authorization`:
    /// the token is replaced (or kept for the update window), unless it was replaced already.
    /// A token this host minted minutes ago that APNs calls over an hour old means this host's
    /// clock is wrong: every token would be refused, so the app is paused, its work kept, with
    /// one line saying so, instead of retrying for hours. Every lane reports here.
    func providerTokenExpired(_ sender: AppSender, carried authorization: String?) {
        guard let key = sender.tokenKey(carried: authorization), let authorization else { return }
        guard sender.tokens.reportExpired(key, carried: authorization) else { return }
        pause(sender, reason: "APNs calls the provider token of key \(key.keyID) expired (ExpiredProviderToken) although this host "
              + "issued it less than \(sender.tokens.policy.updateWindowSeconds / 60) minutes ago: this host's clock is probably "
              + "more than 40 minutes off; correct it (NTP), then send SIGHUP")
    }

    /// Holds one scope of an app after APNs refused the app's configuration for it (a topic its
    /// credentials may not use, broadcast push not enabled, no room for a channel): the rest
    /// of the app keeps sending. One error line when the hold begins, naming the app, the
    /// environment, the topic, APNs's reason and what to fix.
    ///
    /// `reason` is the scope's own unless given (DeviceTokenNotForTopic when the breaker holds
    /// a topic); `extra` adds fields to the line.
    func hold(_ sender: AppSender, _ key: AppSender.HoldKey, why: String, reason: APNsReason? = nil,
              extra: [(String, LogValue)] = []) {
        let reason = reason ?? key.scope.reason
        // APNs's answer cannot say which key and environment: the hold names both, and the fix.
        let token = sender.tokenKey(for: key.environment)
        let why = key.scope == .environment && (reason == .badEnvironmentKeyIdInToken || reason == .badEnvironmentKeyInToken)
            ? token.map { Self.wrongEnvironmentKeyWhy(keyID: $0.keyID, key.environment, reason: reason,
                                                       ownKey: sender.environmentOwnKey(key.environment) != nil) } ?? why : why
        guard sender.hold(key, why: why, until: Timestamp().addingTimeInterval(pauseDuration), reason: reason) else { return }
        // The fleet must not take the refused token over from the shared table.
        if key.scope == .environment, reason == .invalidProviderToken, let token { sender.tokens.reportInvalid(token) }
        // Which credentials APNs refused, so the operator knows what to compare with the developer account.
        let signer = token.map { " (the app signs with key \($0.keyID) of team \($0.teamID))" } ?? " (the app uses a certificate)"
        var fields: [(String, LogValue)] = [
            ("event", "sending_held"), ("app", .string(sender.app.name)), ("environment", .string(key.environment.rawValue)),
            ("topic", .string(key.topic)), ("scope", .string(key.scope.rawValue)), ("reason", .string(reason.rawValue))] + extra
        if let token { fields += [("key_id", .string(token.keyID)), ("team_id", .string(token.teamID))] }
        logger.write(.error, "sending of \(key.scope.describe(topic: key.topic)) for app \(sender.app.name) in \(key.environment.rawValue) is held, its notifications are kept (not failed): \(why)\(signer); then send SIGHUP (a replaced key file is reloaded by it; a changed bundle_id or key id needs a restart), else it is tried again in \(Int(pauseDuration / 60)) minutes",
                     fields: fields)
    }

    /// Why an environment of a token app is held after BadEnvironmentKeyInToken: its key is
    /// restricted to the other environment.
    /// `ownKey`: the key is the app's for this environment only (`<env>_token`), which is then
    /// the setting to fix.
    static func wrongEnvironmentKeyWhy(keyID: String, _ environment: PushdConfig.Environment,
                                       reason: APNsReason = .badEnvironmentKeyIdInToken, ownKey: Bool = false) -> String {
        let fix = ownKey
            ? "check \(environment.rawValue)_token: it names a key restricted to the other environment; give it a key for \(environment.rawValue) or for both"
            : "give the app a key for \(environment.rawValue) as \(environment.rawValue)_token, or a key for both environments"
        return "the key \(keyID) is not valid for \(environment.rawValue) (\(reason.rawValue): APNs says it is restricted to the other environment): \(fix)"
    }

    /// The token answers that judge the key that signed the request's token, and with it only the
    /// environments that key signs for.
    static let environmentKeyReasons: Set<String> = [APNsReason.invalidProviderToken.rawValue,
                                                     APNsReason.badEnvironmentKeyInToken.rawValue,
                                                     APNsReason.missingProviderToken.rawValue]

    /// What a credential answer to a request to `environment` that carried `authorization` does,
    /// as `verdict` (the outcome policy's) said. An app with a key for this environment only
    /// (`<env>_token`, the other environment signed by another key) has that environment held
    /// (`ConfigurationScope.environment`) on InvalidProviderToken, BadEnvironmentKeyInToken and
    /// MissingProviderToken to a token of that key: the other environment's key is not judged
    /// by them, and its notifications keep going. With one key for both environments the app
    /// is paused, as for every other credential answer. (BadEnvironmentKeyInToken, in either
    /// spelling, holds the environment whatever the key: `ResponseClassifier`.) An InvalidProviderToken to a key a
    /// reload has replaced since is left to `pause`, which sends the notification again.
    ///
    /// A certificate app with a certificate for each environment has the environment held on
    /// an answer refusing its certificate there (`certificateEnvironmentHold`).
    func environmentKeyVerdict(_ verdict: Verdict, sender: AppSender, environment: PushdConfig.Environment,
                               carried authorization: String?) -> Verdict {
        guard case .pauseApp(let reason) = verdict else { return verdict }
        if let held = Self.certificateEnvironmentHold(reason: reason, app: sender.app, environment) { return held }
        guard Self.environmentKeyReasons.contains(reason), let key = sender.environmentOwnKey(environment) else { return verdict }
        let carried = authorization.map { (key: sender.tokenKey(carried: $0), current: sender.tokens.signedByCurrentKey(key, authorization: $0)) }
        guard Self.holdsEnvironment(reason: reason, environmentKey: key, carried: carried) else { return verdict }
        return .hold(.environment, reason: reason, why: Self.environmentKeyWhy(reason: reason, key: key, environment))
    }

    /// The hold of `environment` alone for an answer refusing the certificate a certificate app
    /// presents there (BadCertificate, BadCertificateEnvironment, or the TLS handshake refusing
    /// it) when the app presents a certificate in another environment too: APNs issues a
    /// certificate per environment, and the refusal judges only this one. Pausing the app
    /// stopped the other environment's sending with it, again after every pause. nil otherwise
    /// (an app with one certificate is paused, as before).
    static func certificateEnvironmentHold(reason: String, app: PushdConfig.App, _ environment: PushdConfig.Environment) -> Verdict? {
        guard !app.otherCertificates.isEmpty, case .certificate? = app.credentials(for: environment) else { return nil }
        let answer: APNsReason
        if reason == APNsReason.badCertificate.rawValue || reason == APNsReason.badCertificateEnvironment.rawValue {
            answer = APNsReason(reason)
        } else if reason.hasPrefix(TransportFailureKind.clientCertificateRefused.explanation) {
            answer = .badCertificate
        } else {
            return nil
        }
        let block = environment == app.environment ? "certificate" : "\(environment.rawValue)_certificate"
        return .hold(.environment, reason: answer.rawValue,
                     why: "the certificate the app presents in \(environment.rawValue) was refused or could not be used (\(reason)); the other environment presents "
                        + "its own certificate and keeps sending: check \(block) (the environment it was issued for, its expiry, "
                        + "whether it was revoked)")
    }

    /// Whether a credential answer (`reason`) to a request going to an environment signed by a key
    /// of its own (`environmentKey`) holds only that environment: the request carried a token of
    /// that key (`carried.key`; nil `carried` for a request that carried none, whose environment's
    /// key is the one that failed to sign), and an InvalidProviderToken judges the key signing
    /// now (`carried.current`), not one a reload replaced since.
    static func holdsEnvironment(reason: String, environmentKey: ProviderTokenService.Key?,
                                 carried: (key: ProviderTokenService.Key?, current: Bool)?) -> Bool {
        guard environmentKeyReasons.contains(reason), let environmentKey else { return false }
        guard let carried else { return true }
        guard carried.key == environmentKey else { return false }
        return reason != APNsReason.invalidProviderToken.rawValue || carried.current
    }

    /// Why an environment of an app with a key of its own for it is held after a credential answer.
    static func environmentKeyWhy(reason: String, key: ProviderTokenService.Key, _ environment: PushdConfig.Environment) -> String {
        "APNs refused the provider token of the key \(key.keyID) of team \(key.teamID), which the app uses for \(environment.rawValue) only (\(reason)); the other environment signs with its own key and keeps sending: check \(environment.rawValue)_token (key_id, team_id, and that key_file is the key Apple issued under that key id and is not revoked)"
    }

    /// "app shop: topic com.example.shop.voip (sandbox)" for every scope held now, sorted.
    func heldScopes() -> [(app: String, key: AppSender.HoldKey, why: String, reason: APNsReason)] {
        senders.values.flatMap { sender in sender.activeHolds.map { (app: sender.app.name, key: $0.key, why: $0.why, reason: $0.reason) } }
            .sorted { ($0.app, $0.key.description) < ($1.app, $1.key.description) }
    }

    /// What an app holds while live instances disagree on its configured environment, in the
    /// words `/readyz` and `pushd status` use.
    static func environmentHeldScope(_ environment: PushdConfig.Environment) -> String {
        "notifications routed only by its configured environment (\(environment.rawValue))"
    }

    /// Every app whose work routed only by its configured environment is held now (live
    /// instances disagree on that setting), with the environment and why, sorted.
    func environmentHeldApps() -> [(app: String, environment: PushdConfig.Environment, why: String)] {
        senders.values.compactMap { sender in
            sender.environmentDisagreementHold.map { (app: sender.app.name, environment: sender.app.environment, why: $0) }
        }.sorted { $0.app < $1.app }
    }

    /// An APNs reason alone (InvalidProviderToken) names a credential APNs rejected; a TLS
    /// failure already explains itself.
    static func describePause(_ reason: String) -> String {
        if reason == APNsReason.unrelatedKeyIdInToken.rawValue {
            return "APNs refused the provider token as signed by a key unrelated to the connection's (UnrelatedKeyIdInToken) also on a new connection: check the app's key_id, team_id and key file"
        }
        return reason.contains(" ") ? reason : "APNs rejected the app's credentials (\(reason))"
    }

    /// Prunes a batch of tokens in a transaction still to be committed: a transaction that ends
    /// without its COMMIT takes them back, and they are written again. `prunesCommitted` counts
    /// them once the COMMIT went through, never before: a COMMIT whose reply was lost is asked
    /// after on a new session (`TransactionFate`).
    ///
    /// DeviceTokenNotForTopic and BadDeviceToken prunes of a run that tripped its app's breaker
    /// are left out (`PruneOutcome.withheld`).
    func writePrunes(_ prunes: [TokenPrune], on connection: PGConnection) throws -> PruneOutcome {
        guard !prunes.isEmpty else { return PruneOutcome() }
        let runs = prunes.contains { NotForTopicBreaker.runReasons.contains($0.reason) }
        guard runs else { return try TokenStore().prune(connection, prunes) }
        var writing = [TokenPrune]()
        var withheld = [TokenPrune]()
        for (app, prunes) in Dictionary(grouping: prunes, by: \.app).sorted(by: { $0.key < $1.key }) {
            let split = senders[app]?.prunesToWrite(prunes) ?? (write: prunes, withheld: [])
            writing += split.write
            withheld += split.withheld
        }
        var outcome = writing.isEmpty ? PruneOutcome() : try TokenStore().prune(connection, writing)
        outcome.withheld = withheld
        return outcome
    }

    /// Counts prunes `writePrunes` wrote, once they are committed: `pushd_tokens_pruned_total`
    /// for tokens actually invalidated, `pushd_tokens_kept_total` for 410s whose token was
    /// registered again after APNs' timestamp (a token nobody registered is neither), and the
    /// breaker learns which DeviceTokenNotForTopic and BadDeviceToken prunes were written
    /// (`NotForTopicBreaker`), to restore them when their run trips.
    func prunesCommitted(_ outcome: PruneOutcome) {
        if !outcome.withheld.isEmpty {
            for (app, withheld) in Dictionary(grouping: outcome.withheld, by: \.app) { senders[app]?.prunesWithheldCommitted(withheld) }
        }
        if outcome.invalidated.contains(where: { NotForTopicBreaker.runReasons.contains($0.reason) }) {
            for (app, invalidated) in Dictionary(grouping: outcome.invalidated, by: \.app) { senders[app]?.prunesWritten(invalidated) }
        }
        for prune in outcome.invalidated {
            metrics.tokenPruned(app: prune.app, environment: senders[prune.app]?.environmentLabel ?? "unknown", reason: prune.reason).increment()
        }
        for prune in outcome.keptByTimestamp {
            metrics.tokenKept(app: prune.app, environment: senders[prune.app]?.environmentLabel ?? "unknown", reason: prune.reason).increment()
        }
        tally.add(tally.pruned, outcome.invalidated.count)
        reportRefusedPrunes(outcome)
    }

    // MARK: DeviceTokenNotForTopic and BadDeviceToken

    /// What a DeviceTokenNotForTopic answer to a notification to `topic` does, as `verdict`
    /// (the outcome policy's) said: the token is pruned only for the app's main topic (its
    /// bundle id), and a run of such answers on one topic with none accepted holds the topic
    /// instead (`NotForTopicBreaker`). An accepted notification ends the topic's run. Every
    /// other verdict is returned as it is.
    ///
    /// - A notification to a topic of its own (`.voip`, `.complication`,
    ///   `.push-type.liveactivity` …) sent to the app's alert token draws this answer, and the
    ///   token is good for the app: the notification is failed with the reason, the token kept.
    ///   The registry records no push type, so it cannot tell such a token from a dead one.
    /// - The answer to a notification sent before its topic was held is held with it.
    ///
    /// A BadDeviceToken answer prunes its token unless it comes in a run of
    /// `tokens.bad_device_token_limit` of `source` (a campaign, the transactional lane) with none
    /// accepted or answered 410 in the environment: tokens of the other environment, which the
    /// run's prunes are restored for; from then on such an answer fails its notification with
    /// its token kept, until the run ends.
    func notForTopicVerdict(_ verdict: Verdict, sender: AppSender, topic: String, environment: PushdConfig.Environment,
                            source: NotForTopicBreaker.Source, token: @autoclosure () -> String) -> Verdict {
        switch verdict {
        case .delivered:
            sender.acceptedOnTopic(topic, environment, source: source)
            return verdict
        case .prune(_, let reason, _) where reason == APNsReason.unregistered.rawValue || reason == APNsReason.expiredToken.rawValue:
            sender.tokenKnown(environment, source: source)
            return verdict
        case .prune(let status, let reason, _) where reason == APNsReason.badDeviceToken.rawValue:
            switch sender.badDeviceToken(environment, source: source, token: token()) {
            case .counted, .heldWithMainTopic:
                return verdict
            case .tripped(let count, let restore):
                let limit = sender.badDeviceTokenLimit
                if count == limit { reportBadDeviceTokenRun(sender, environment, source: source, limit: limit, restoring: restore.count) }
                return .dead(status: status, reason: "\(reason): \(Self.badDeviceTokenRunWhy(limit: limit, environment: environment))")
            }
        case .prune(let status, let reason, _) where reason == APNsReason.deviceTokenNotForTopic.rawValue:
            let key = AppSender.topicKey(topic, environment)
            if sender.hasHolds, let hold = sender.activeHold(key) {
                return .hold(.topic, reason: hold.reason.rawValue, why: hold.why)
            }
            let mainTopic = topic == sender.app.bundleID
            switch sender.notForTopic(topic, environment, token: token(), prunes: mainTopic) {
            case .counted:
                if mainTopic { return verdict }
                return .dead(status: status, reason: "\(reason): \(Self.notAMainTopicWhy(topic: topic, bundleID: sender.app.bundleID))")
            case .tripped(let count, let restore):
                let why = Self.notForTopicRunWhy(count: count, topic: topic, bundleID: sender.app.bundleID, pruned: mainTopic)
                hold(sender, key, why: why, reason: .deviceTokenNotForTopic,
                     extra: [("count", .int(Int64(count))), ("tokens_to_restore", .int(Int64(restore.count)))])
                return .hold(.topic, reason: reason, why: why)
            case .heldWithMainTopic(let count):
                let why = Self.notForTopicWithMainTopicWhy(count: count, topic: topic, bundleID: sender.app.bundleID)
                hold(sender, key, why: why, reason: .deviceTokenNotForTopic, extra: [("main_topic_count", .int(Int64(count)))])
                return .hold(.topic, reason: reason, why: why)
            }
        default:
            return verdict
        }
    }

    // MARK: Forbidden

    /// The start of the reason of a notification failed for a 403 Forbidden answer.
    static let forbiddenReasonPrefix = "\(APNsReason.forbidden.rawValue): "

    /// What a 403 Forbidden answer to a notification of `sender` in `environment` on `lane`
    /// does, as `verdict` (the outcome policy's: failed, not retried) said: it fails its
    /// notification, with a warning line (one per app and environment a minute, counting the
    /// others), and a run of `apns.forbidden_limit` with none accepted in the environment is
    /// taken as refused credentials instead: that environment of the app is held
    /// (`ConfigurationScope.environment`, reason Forbidden), the notification kept
    /// (`ForbiddenBreaker`), while the other environment keeps sending: the run judges the
    /// credentials of its own environment only (sandbox credentials refused must not stop
    /// production). An accepted notification ends the run. Every other verdict is returned
    /// as it is.
    func forbiddenVerdict(_ verdict: Verdict, sender: AppSender, environment: PushdConfig.Environment, lane: String) -> Verdict {
        switch verdict {
        case .delivered:
            sender.acceptedIn(environment)
            return verdict
        case .dead(let status, let reason) where status == 403 && (reason.hasPrefix(Self.forbiddenReasonPrefix)
                                                                   || reason.hasSuffix(ResponseClassifier.unknownForbiddenSuffix)):
            switch sender.forbidden(environment) {
            case .counted(let count):
                let app = sender.app.name
                let now = RateLimiter.monotonicSeconds()
                guard let before = forbiddenLines.withLock({ $0.admit("\(app) \(environment.rawValue)", now: now) }) else { return verdict }
                // APNs's reason verbatim: Forbidden, or one Apple does not document, taken like it.
                let answered = String(reason.prefix { $0 != ":" })
                let known = answered == APNsReason.forbidden.rawValue
                logger.warning("APNs answered 403 \(answered) to a notification of app \(app) in \(environment.rawValue) (\(lane) lane): "
                               + (known ? "the action is not allowed" : "\(answered) is a 403 reason pushd does not know, taken like Forbidden (the action is not allowed; it is not proven to refuse the app's credentials)")
                               + ", so the notification is failed, not sent again (\(count) 403 answer(s) of Forbidden or unknown reasons in a row with none accepted; at \(sender.forbiddenLimit), apns.forbidden_limit, they are taken as the app's credentials refused in \(environment.rawValue) and sending there is held)"
                               + (before > 0 ? "; \(before) more notification(s) of app \(app) failed for such answers since the last such line" : ""),
                               ("event", "apns_forbidden"), ("app", .string(app)), ("environment", .string(environment.rawValue)),
                               ("lane", .string(lane)), ("reason", .string(answered)), ("count", .int(Int64(count))), ("unlogged", .int(Int64(before))))
                return verdict
            case .tripped:
                return .hold(.environment, reason: APNsReason.forbidden.rawValue,
                             why: Self.forbiddenRunWhy(limit: sender.forbiddenLimit, environment: environment,
                                                       otherSends: PushdConfig.Environment.allCases.allSatisfy { sender.app.hasCredentials(for: $0) }))
            }
        default:
            return verdict
        }
    }

    /// Why a run of Forbidden answers holds an environment of the app: what was seen and what to
    /// check. The same for every answer of a tripped run, so the hold says one thing however
    /// many follow. `otherSends`: whether this instance has credentials for the other
    /// environment, which keeps sending only then (a certificate app with one certificate).
    static func forbiddenRunWhy(limit: Int, environment: PushdConfig.Environment, otherSends: Bool) -> String {
        let other = PushdConfig.Environment.allCases.first { $0 != environment } ?? environment
        return "APNs answered 403 Forbidden to \(limit) notifications in a row in \(environment.rawValue) and accepted none: taken as APNs refusing the app's credentials for \(environment.rawValue), not the notifications; "
            + (otherSends ? "the other environment keeps sending"
                          : "this instance has no credentials for \(other.rawValue) either, so it sends none of the app's notifications meanwhile")
            + "; check the credentials the app uses for \(environment.rawValue) (the signing key's team and environment restriction, or the \(environment.rawValue) certificate, and the bundle id's capabilities) in the developer account"
            + (limit > 1 ? "; the first \(limit - 1) of the run were failed with reason Forbidden (pushd.dead_jobs, or the campaign's failed_by_reason)" : "")
    }

    /// The error line of a run of BadDeviceToken answers of `source` that stopped pruning in
    /// `environment`: one per app and environment a minute, counting the runs it leaves out.
    private func reportBadDeviceTokenRun(_ sender: AppSender, _ environment: PushdConfig.Environment, source: NotForTopicBreaker.Source, limit: Int, restoring: Int) {
        let app = sender.app.name
        metrics.badDeviceTokenRun(app: app, environment: environment.rawValue).increment()
        let now = RateLimiter.monotonicSeconds()
        guard let before = badDeviceTokenLines.withLock({ $0.admit("\(app) \(environment.rawValue)", now: now) }) else { return }
        let other = PushdConfig.Environment.allCases.first { $0 != environment } ?? environment
        logger.write(.error, "APNs answered BadDeviceToken to \(limit) notifications of app \(app) from \(source) in a row in \(environment.rawValue) and accepted none of them: "
                     + "taken as tokens of the other environment (\(other.rawValue)), not dead ones, so pushd stops pruning them: the tokens the run pruned are restored, "
                     + "and each such answer to \(source) in \(environment.rawValue) fails its notification with its token kept until one of its notifications there is accepted; "
                     + "check the environment the jobs or the campaign name, the environment the tokens were registered with (pushd.device_tokens.environment: "
                     + "a development build's tokens are sandbox ones, an App Store or TestFlight build's production ones) and apps[].environment "
                     + "(\(sender.app.environment.rawValue)); the failed notifications are in pushd.dead_jobs or the campaign's failed_by_reason, to send again after the fix"
                     + (before > 0 ? "; \(before) more such run(s) of app \(app) in \(environment.rawValue) since the last such line" : ""),
                     fields: [("event", "bad_device_token_run"), ("app", .string(app)), ("environment", .string(environment.rawValue)),
                              ("source", .string(source.description)), ("reason", .string(APNsReason.badDeviceToken.rawValue)), ("count", .int(Int64(limit))),
                              ("tokens_to_restore", .int(Int64(restoring))), ("unlogged", .int(Int64(before)))])
    }

    /// The reason of a notification failed for a BadDeviceToken answer of a tripped run.
    static func badDeviceTokenRunWhy(limit: Int, environment: PushdConfig.Environment) -> String {
        "the token is kept, not pruned: APNs answered BadDeviceToken to \(limit) or more notifications of the app in a row in \(environment.rawValue) with none accepted, which tokens of the other environment draw (check the environment of the jobs, the campaign or the registered tokens)"
    }

    /// Why a DeviceTokenNotForTopic answer to a topic other than the bundle id prunes nothing.
    static func notAMainTopicWhy(topic: String, bundleID: String) -> String {
        "APNs says the token is not a token of topic \(topic); it is kept, not pruned: a token of the app's main topic \(bundleID) gets this answer to a push of another type (voip pushes need the device's PushKit token, liveactivity ones a Live Activity's push token), and the registry records no push type"
    }

    /// What the breaker's hold says: what was seen and what to check.
    static func notForTopicRunWhy(count: Int, topic: String, bundleID: String, pruned: Bool) -> String {
        "APNs answered DeviceTokenNotForTopic to \(count) notifications in a row to topic \(topic) and accepted none: the topic is wrong for the app's tokens, not the tokens; check the app's bundle_id (\(bundleID)) against the bundle id the devices registered with"
            + (topic == bundleID ? "" : ", and that the jobs' push_type matches the tokens (the apns-topic is the bundle id and the push type's suffix)")
            + (pruned ? "; pruning stopped and the tokens these answers pruned are restored" : "; no token was pruned for them")
    }

    /// What the hold of another topic says while the main topic's is tripped.
    static func notForTopicWithMainTopicWhy(count: Int, topic: String, bundleID: String) -> String {
        "APNs answered DeviceTokenNotForTopic on topic \(topic) while the app's main topic \(bundleID) is held after \(count) such answers in a row with none accepted: check the app's bundle_id (\(bundleID)) against the bundle id the devices registered with; no token was pruned for them"
    }

    /// Restores the tokens runs that tripped had pruned (`AppSender.takeRestores`), one
    /// statement per app and reason, with one notice line and `pushd_tokens_restored_total`.
    /// Run outside the caller's transaction; a failure hands them back for the next call.
    func restoreTokens(on connection: PGConnection) {
        for sender in senders.values {
            let restores = sender.takeRestores()
            guard !restores.isEmpty else { continue }
            let app = sender.app.name
            var left = Dictionary(grouping: restores, by: \.reason)
            for reason in left.keys.sorted() {
                let prunes = left[reason] ?? []
                let run = reason == APNsReason.badDeviceToken.rawValue
                    ? "BadDeviceToken answers pruned before the run of them showed tokens of the other environment"
                    : "\(reason) answers pruned before the run of them held the topic"
                do {
                    let restored = try TokenStore().restore(connection, app: app, tokens: prunes.map(\.token), reason: reason)
                    left[reason] = nil
                    metrics.tokenRestored(app: app, environment: sender.environmentLabel, reason: reason).increment(by: UInt64(restored))
                    logger.notice("restored \(restored) tokens of app \(app) that \(run) (\(prunes.count) pruned by the run; a token registered again since was left as it is)",
                                  ("event", "tokens_restored"), ("app", .string(app)), ("reason", .string(reason)),
                                  ("tokens", .int(Int64(restored))))
                } catch {
                    sender.queueRestores(left.values.flatMap { $0 })
                    databaseError(error)
                    logger.warning("could not restore \(prunes.count) tokens of app \(app) that \(run) (tried again with the next batch): \(error)",
                                   ("app", .string(app)))
                    break
                }
            }
        }
    }

    /// A worker whose database session failed waits before it connects again: doubling from
    /// 0.2 s up to 30 s, with jitter so that workers cut off together do not return together.
    /// When APNs takes an app's notifications to an environment on `lane` again after an
    /// outage, what waited it out there is due at once: its backoff grew with the outage (up
    /// to 5 minutes), and nothing about it needs more waiting now that APNs answers.
    /// `makeDue` makes one app's due in one environment (the rows going there whose error says
    /// they waited for APNs; the other environment's are left to their own outage) and returns
    /// how many; each is done once per outage, by the first worker of the lane to look, with one
    /// notice (`outage_retries_due`) when there were any. Returns whether any became due.
    @discardableResult
    func makeDueAfterOutage(lane: String, what: String, _ makeDue: (OperatorLog.Target) throws -> Int) -> Bool {
        let back = operatorLog.takeAppsBack(lane: lane)
        var any = false
        for (position, target) in back.enumerated() {
            do {
                let due = try makeDue(target)
                // Another instance may have made them due first.
                guard due > 0 else { continue }
                any = true
                logger.notice("\(due) \(what) of app \(target.app) to \(target.environment) that waited out the APNs outage are due now",
                              ("app", .string(target.app)), ("environment", .string(target.environment)), ("lane", .string(lane)),
                              ("count", .int(Int64(due))), ("event", "outage_retries_due"))
            } catch {
                operatorLog.returnAppsBack(Array(back[position...]), lane: lane)
                databaseError(error)
                logger.warning("could not make the \(what) of app \(target.app) to \(target.environment) that waited out the APNs outage due (tried again on the next turn): \(error)",
                               ("app", .string(target.app)), ("environment", .string(target.environment)), ("lane", .string(lane)))
                break
            }
        }
        return any
    }

    /// The work going to `environment`, for the statements that make one environment's work
    /// due: with each app's configured environment, where a notification goes that names none
    /// and whose token is not registered (`AppSender.environment`).
    func outageEnvironment(_ environment: String) -> OutageEnvironment {
        OutageEnvironment(name: environment, home: Dictionary(config.apps.map { ($0.name, $0.environment.rawValue) },
                                                              uniquingKeysWith: { first, _ in first }))
    }

    /// While APNs is down for apps in an environment on `lane`, makes one waiting notification
    /// of each of them going there due about every `retry.outage_probe_ms` (`OutageProbe`), so
    /// that its answer can show the environment is back: `makeSoonestDue` is given the apps of
    /// one environment and the environment, and returns how many it made due (the soonest of
    /// each going there whose error says it waited for APNs). Each one counts in
    /// `pushd_apns_outage_probes_total{environment,lane}`, with one info line (`outage_probe`)
    /// per environment whose probe found any, at most one per interval, lane and environment. Nothing is
    /// read or written while the lane is up. A database error is the caller's, as a claim's
    /// would be. Returns whether any became due.
    @discardableResult
    func probeOutage(lane: String, what: String, _ makeSoonestDue: (_ apps: [String], _ environment: String) throws -> Int) throws -> Bool {
        let down = operatorLog.appsDown(lane: lane)
        let now = RateLimiter.monotonicSeconds()
        let answering = !down.isEmpty && operatorLog.isAnswering(lane: lane)
        let due = probes.withLock {
            $0.schedule.appsToProbe(lane: lane, appsDown: down, answering: answering, again: OperatorLog.answeringSecondsBeforeBack,
                                    now: now, random: &$0.random)
        }
        guard !due.isEmpty else { return false }
        // A paused app's work is not claimed here: making it due would prove nothing.
        let claimable = Set(claimableApps())
        var any = false
        for (environment, targets) in Dictionary(grouping: due.filter { claimable.contains($0.app) }, by: \.environment)
            .sorted(by: { $0.key < $1.key }) {
            let apps = targets.map(\.app)
            let count = try makeSoonestDue(apps, environment)
            guard count > 0 else { continue }
            any = true
            metrics.outageProbes(environment: environment, lane: lane).increment(by: UInt64(count))
            logger.info("APNs (\(environment)) takes no notifications of app \(apps.joined(separator: ", ")) on the \(lane) lane: the first of its waiting \(what) to \(environment) is due now (\(count) in all, one per app), so that an answer can show whether APNs is back",
                        ("app", .string(apps.joined(separator: ","))), ("environment", .string(environment)), ("lane", .string(lane)),
                        ("count", .int(Int64(count))), ("event", "outage_probe"))
        }
        return any
    }

    /// When each app, environment and lane APNs takes none of the notifications of may next get
    /// a retry that waited on its own backoff, in monotonic seconds (`holdsBackWhileDown`).
    private let downLaneRetries = Lock<[String: Double]>([:])

    /// Whether a notification claimed again after its backoff must wait for APNs instead of
    /// going: it waits because APNs was unavailable (its last error begins with one of
    /// `OutcomePolicy.unavailableReasonPrefixes`), APNs still takes none of `lane`'s
    /// notifications of `app` in `environment` with none answered since (`OperatorLog.isDown`),
    /// and one such notification went there from this instance less than ¾ of
    /// `retry.outage_probe_ms` ago. Those set aside in the first second of an outage, before it
    /// was called, wait on a backoff of their own that ends within it; they were all sent into
    /// it as they came due, thousands within seconds, where the probe (`probeOutage`) was to go
    /// alone. Whichever goes first in an interval is its probe; one held back waits as a send
    /// answered during the outage would (`OutcomePolicy.dueWhileDown`), made due when APNs
    /// answers again.
    func holdsBackWhileDown(lastError: String?, app: String, environment: String, lane: String) -> Bool {
        guard let lastError, OutcomePolicy.unavailableReasonPrefixes.contains(where: { lastError.hasPrefix($0) }),
              operatorLog.isDown(app: app, environment: environment, lane: lane) else { return false }
        let now = RateLimiter.monotonicSeconds(), key = app + "\u{0}" + environment + "\u{0}" + lane
        let interval = 0.75 * Double(config.retry.outageProbeMilliseconds) / 1000
        return downLaneRetries.withLock { next in
            if now < next[key, default: 0] { return true }
            next[key] = now + interval
            return false
        }
    }

    /// The back-off of a worker after its `failures`-th database error in a row: 0.1–0.2 s
    /// doubling up to 15–30 s. It ends early when the pipeline stops, so that shutdown does not
    /// wait out a worker that holds nothing.
    func sleepAfterDatabaseFailure(_ failures: Int) {
        let delay = min(30.0, 0.2 * pow(2.0, Double(min(failures, 8))))
        let until = RateLimiter.monotonicSeconds() + delay * Double.random(in: 0.5...1.0)
        while !isStopping {
            let left = until - RateLimiter.monotonicSeconds()
            if left <= 0 { return }
            PosixThread.sleep(seconds: min(0.1, left))
        }
    }

    func databaseError(_ error: any Error) {
        metrics.databaseError(reason: Self.databaseErrorReason(error)).increment()
    }

    /// The `reason` label of a database error: `connection` (lost, or closed here: by the stall
    /// watch, or after a loss), the SQLSTATE class, or `other` (pushd's own codes).
    static func databaseErrorReason(_ error: any Error) -> String {
        guard let error = error as? PGError else { return "other" }
        if error.code.isConnectionLoss || error.code == .connectionClosed { return "connection" }
        return error.code.raw.hasPrefix("pushd-") ? "other" : String(error.code.raw.prefix(2))
    }
}

/// Running totals of what this process did, for `pushd demo`'s report and the logs.
final class Tally: @unchecked Sendable {
    let sent = Atomic<Int>(0)
    let retried = Atomic<Int>(0)
    let dead = Atomic<Int>(0)
    let pruned = Atomic<Int>(0)
    let failed = Atomic<Int>(0)

    /// Transactional INSERT-to-accepted times in seconds, the first 100,000 kept.
    let latencies = Lock<[Double]>([])

    func add(_ counter: borrowing Atomic<Int>, _ amount: Int = 1) {
        counter.wrappingAdd(amount, ordering: .relaxed)
    }

    func recordLatency(_ seconds: Double) {
        latencies.withLock { if $0.count < 100_000 { $0.append(seconds) } }
    }

    /// The `fraction` quantile (0…1) of the recorded latencies, nil when none were recorded.
    func latencyQuantile(_ fraction: Double) -> Double? {
        let sorted = latencies.withLock { $0 }.sorted()
        guard !sorted.isEmpty else { return nil }
        return sorted[min(sorted.count - 1, Int((Double(sorted.count - 1) * fraction).rounded()))]
    }
}
