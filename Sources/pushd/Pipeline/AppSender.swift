import APNs
import Dispatcher
import Posix
import Metrics
import Locking
import QueueStore
import Synchronization

/// Everything needed to send for one configured app: its APNs clients (a pool of connections
/// per environment and lane, made on first use, each authenticating its requests), whether it
/// is paused, and its metric children bound once.
///
/// Thread rule: immutable after init except `pause`, `holds`, `breaker` and `forbiddenRuns`
/// (each under its lock, with `holdCount` set under the holds' lock, `breakerBusy` under the
/// breaker's and `forbiddenCounting` under the runs')
/// and the client registry (which has its own); any worker thread may use it.
final class AppSender: @unchecked Sendable {
    let app: PushdConfig.App
    let factory: NotificationFactory
    /// The signing key of the app's own environment; nil for a certificate app.
    let tokenKey: ProviderTokenService.Key?
    /// The signing key of each environment (`<env>_token`, else `token`); empty for a certificate app.
    private let tokenKeys: [PushdConfig.Environment: ProviderTokenService.Key]
    /// Authenticated by client certificate: a connection ending after its TLS handshake without
    /// answering may be APNs refusing the certificate (`CertificateRefusalHint`).
    var authenticatedByCertificate: Bool { tokenKey == nil }
    let tokens: ProviderTokenService
    let environmentLabel: String
    private let pause = Lock<(until: Timestamp, reason: String)?>(nil)
    /// Scopes of the app held because APNs refused its configuration for them (TopicDisallowed,
    /// FeatureNotEnabled, CannotCreateChannelConfig) or because a run of DeviceTokenNotForTopic
    /// answers blamed a topic (`NotForTopicBreaker`), each until a time or a SIGHUP.
    private let holds = Lock<[HoldKey: Hold]>([:])
    /// How many scopes are held, read without the lock on the hot path: 0 almost always.
    private let holdCount = Atomic<Int>(0)
    private let heldGauges: [HeldGaugeKey: Gauge]
    /// Set by the heartbeat while live instances disagree on the app's configured environment
    /// (`environmentDisagreementHold`): why its work that only the configured environment
    /// routes is held. Nil almost always.
    private let disagreementHold = Lock<String?>(nil)
    /// Whether `disagreementHold` is set, read without the lock on the hot path.
    private let disagreementHeld = Atomic<Bool>(false)
    private let disagreementGauge: Gauge
    /// DeviceTokenNotForTopic answers in a row per topic, BadDeviceToken ones per environment and
    /// source, and the prunes they made.
    private let breaker: Lock<NotForTopicBreaker>
    /// Set under the breaker's lock: whether a run is counted or a tripped run left prunes to
    /// leave out. Read without it on the hot path, where it is false almost always.
    private let breakerBusy = Atomic<Bool>(false)
    /// 403 Forbidden answers in a row per environment (`ForbiddenBreaker`).
    private let forbiddenRuns: Lock<ForbiddenBreaker>
    /// Set under the runs' lock: whether a run is counted. Read without it on the hot path,
    /// where it is false almost always.
    private let forbiddenCounting = Atomic<Bool>(false)
    /// Prunes of tripped runs that were written, to restore (`takeRestores`).
    private let restores = Lock<[TokenPrune]>([])
    private let restoresWaiting = Atomic<Bool>(false)
    /// Transactional jobs and campaign targets go over separate connections, so a campaign's
    /// full window and busy streams add nothing to a transactional push's latency.
    private let clients = APNsClientRegistry<ClientKey>()
    /// The transactional client of the app's own environment, made at init.
    let transactionalClient: APNsClient
    private let makeClient: @Sendable (PushdConfig.Environment, Lane) throws -> APNsClient?
    private let pausedGauge: Gauge
    private let metrics: PushdMetrics
    private let sentCounters: [SentKey: Counter]
    private let acceptedResponses: [PushdConfig.Environment: Counter]
    private let latency: [PushdConfig.Environment: Histogram]
    /// INSERT to accepted, for transactional jobs.
    let deliveryLatency: Histogram

    /// Enums only, each hashed as one byte: counting a sent notification builds no string.
    private struct SentKey: Hashable, Sendable {
        var environment: PushdConfig.Environment
        var pushType: PushType
        var lane: Lane
    }

    /// One held scope: which, in which environment, and for which topic (the bundle id for
    /// the broadcast scopes).
    struct HoldKey: Hashable, Sendable, CustomStringConvertible {
        var scope: ConfigurationScope
        var environment: PushdConfig.Environment
        var topic: String

        /// "topic com.example.shop.voip (sandbox)".
        var description: String { "\(scope.describe(topic: topic)) (\(environment.rawValue))" }
    }

    struct Hold: Sendable {
        var until: Timestamp
        /// What APNs said and what to fix.
        var why: String
        /// The answer that holds the scope: its `ConfigurationScope`'s, or DeviceTokenNotForTopic
        /// for a topic the breaker holds.
        var reason: APNsReason
        /// Whether a worker has taken on putting the scope's queued jobs back for this hold
        /// (`takeSweep`), so that one statement does it rather than every worker.
        var swept = false
    }

    private struct HeldGaugeKey: Hashable, Sendable {
        var environment: PushdConfig.Environment
        var reason: APNsReason
    }

    /// The reasons a scope is held for, each a value of the held gauge's `reason` label.
    static let holdReasons = ConfigurationScope.allCases.flatMap(\.reasons) + [.deviceTokenNotForTopic]

    /// The held gauge's `reason` while live instances disagree on the app's configured
    /// environment: not an APNs answer, so not one of `holdReasons`.
    static let environmentDisagreementReason = "AppEnvironmentDisagreement"

    private struct ClientKey: Hashable, Sendable {
        var environment: PushdConfig.Environment
        var lane: Lane
    }

    /// No credentials reach an environment's host: the notification can never be sent there.
    struct NoCredentials: Error, CustomStringConvertible {
        var app: String
        var environment: PushdConfig.Environment
        /// The reason's name, for the dead-letter metric.
        var label: String { "NoCredentialsForEnvironment" }
        var description: String {
            "NoCredentialsForEnvironment: app \(app) has no certificate for \(environment.rawValue) (APNs issues a certificate for one environment); add \(environment.rawValue)_certificate to the app or send to the environment it has"
        }
    }

    /// Connections for an app and environment could not be set up (a file of the
    /// configuration unreadable now, libcurl refusing a setting): nothing was sent, so the work
    /// waits, unspent, and the failure is logged. It says nothing of the app's credentials, so
    /// it pauses nothing: the app's other lanes, whose connections are set up apart, may well
    /// be sending.
    struct ConnectionSetupFailed: Error, CustomStringConvertible {
        /// The `reason` of `pushd_retries_total` for such a wait, in every lane.
        static let label = "connection_setup"
        var message: String
        var description: String { "cannot connect: \(message)" }
    }

    /// - Parameter makeClient: a new client for an environment and lane, nil when the app has no
    ///   credentials there. The app's own environment's are made now, so a setup error stops
    ///   `run` at start.
    init(app: PushdConfig.App, tokens: ProviderTokenService, metrics: PushdMetrics, notForTopicLimit: Int = 25,
         badDeviceTokenLimit: Int = 25, forbiddenLimit: Int = 10,
         makeClient: @escaping @Sendable (PushdConfig.Environment, Lane) throws -> APNsClient?) throws {
        self.app = app
        breaker = Lock(NotForTopicBreaker(threshold: notForTopicLimit, badDeviceTokenThreshold: badDeviceTokenLimit))
        forbiddenRuns = Lock(ForbiddenBreaker(threshold: forbiddenLimit))
        self.factory = NotificationFactory(app: app)
        self.tokens = tokens
        self.metrics = metrics
        self.makeClient = makeClient
        environmentLabel = app.environment.rawValue
        var keys = [PushdConfig.Environment: ProviderTokenService.Key]()
        for environment in PushdConfig.Environment.allCases {
            if case .token(let teamID, let keyID, _) = app.credentials(for: environment) {
                keys[environment] = ProviderTokenService.Key(keyID: keyID, teamID: teamID)
            }
        }
        tokenKeys = keys
        tokenKey = keys[app.environment]
        var counters = [SentKey: Counter]()
        for environment in PushdConfig.Environment.allCases {
            for type in PushType.allCases {
                for lane in Lane.allCases {
                    counters[SentKey(environment: environment, pushType: type, lane: lane)] = metrics.sent(
                        app: app.name, environment: environment.rawValue, pushType: type.rawValue, lane: lane.rawValue)
                }
            }
        }
        sentCounters = counters
        acceptedResponses = Dictionary(uniqueKeysWithValues: PushdConfig.Environment.allCases.map {
            ($0, metrics.apnsResponse(app: app.name, environment: $0.rawValue, status: "200", reason: "none"))
        })
        latency = Dictionary(uniqueKeysWithValues: PushdConfig.Environment.allCases.map {
            ($0, metrics.requestDuration(app: app.name, environment: $0.rawValue))
        })
        deliveryLatency = metrics.deliveryLatency(app: app.name)
        pausedGauge = metrics.paused(app: app.name)
        pausedGauge.set(0)
        var held = [HeldGaugeKey: Gauge]()
        for environment in PushdConfig.Environment.allCases {
            for reason in Self.holdReasons {
                let gauge = metrics.sendingHeld(app: app.name, environment: environment.rawValue, reason: reason.rawValue)
                gauge.set(0)
                held[HeldGaugeKey(environment: environment, reason: reason)] = gauge
            }
        }
        heldGauges = held
        // At 0 from the start, so that an alert on its increase sees the first run.
        for environment in PushdConfig.Environment.allCases {
            _ = metrics.badDeviceTokenRun(app: app.name, environment: environment.rawValue)
        }
        disagreementGauge = metrics.sendingHeld(app: app.name, environment: app.environment.rawValue,
                                                reason: Self.environmentDisagreementReason)
        disagreementGauge.set(0)
        guard let own = try makeClient(app.environment, .transactional) else { throw NoCredentials(app: app.name, environment: app.environment) }
        transactionalClient = clients.client(for: ClientKey(environment: app.environment, lane: .transactional)) { own }
        _ = try client(for: app.environment, lane: .campaign)
    }

    /// The key that signs for `environment`; nil for a certificate app.
    func tokenKey(for environment: PushdConfig.Environment) -> ProviderTokenService.Key? {
        tokenKeys[environment]
    }

    /// The key that signs for `environment` when it signs for no other environment of the app
    /// (`<env>_token` naming another key than the other environment's); nil when one key
    /// signs for both, or for a certificate app.
    func environmentOwnKey(_ environment: PushdConfig.Environment) -> ProviderTokenService.Key? {
        guard let key = tokenKeys[environment] else { return nil }
        return tokenKeys.contains { $0.key != environment && $0.value == key } ? nil : key
    }

    /// The app's key that `authorization` names (its `kid`), else the app's own: with a key per
    /// environment, an answer is about the key of the token it carried.
    func tokenKey(carried authorization: String?) -> ProviderTokenService.Key? {
        guard tokenKeys.count > 1, let authorization, let token = try? DecodedProviderToken(authorization: authorization) else { return tokenKey }
        return tokenKeys.values.first { $0.keyID == token.keyID && $0.teamID == token.issuer } ?? tokenKey
    }

    /// The engine of the app's own environment's transactional client, for diagnostics.
    var transactionalDispatcher: HTTP2Dispatcher { transactionalClient.dispatcher }

    /// The environment a notification goes to: its own, else its token's registered one,
    /// else the app's.
    func environment(job: String?, registered: String?) -> PushdConfig.Environment {
        job.flatMap(PushdConfig.Environment.init(rawValue:)) ?? registered.flatMap(PushdConfig.Environment.init(rawValue:)) ?? app.environment
    }

    /// Whether only the app's configured environment decides where a notification goes: it
    /// names none and its token was registered without one.
    static func routedByConfiguredEnvironment(job: String?, registered: String?) -> Bool {
        job.flatMap(PushdConfig.Environment.init(rawValue:)) == nil && registered.flatMap(PushdConfig.Environment.init(rawValue:)) == nil
    }

    /// Why a notification with environment `job`, to a token registered with `registered`,
    /// may not be sent now: live instances disagree on the app's configured environment and
    /// only that setting would route it, so the host it reached would depend on the instance
    /// that claimed it. Nil when it may go. One atomic load when the fleet agrees.
    func heldByEnvironmentDisagreement(job: String?, registered: String?) -> String? {
        guard disagreementHeld.load(ordering: .relaxed), Self.routedByConfiguredEnvironment(job: job, registered: registered) else { return nil }
        return disagreementHold.withLock { $0 }
    }

    /// Why the app's work routed by its configured environment is held now, nil when it is not.
    var environmentDisagreementHold: String? {
        guard disagreementHeld.load(ordering: .relaxed) else { return nil }
        return disagreementHold.withLock { $0 }
    }

    /// Holds (`why`) or releases (nil) the app's work routed by its configured environment.
    /// Returns true when the hold began or ended with this call, so the caller logs once.
    @discardableResult
    func holdForEnvironmentDisagreement(_ why: String?) -> Bool {
        disagreementHold.withLock { current in
            let changed = (current == nil) != (why == nil)
            current = why
            disagreementHeld.store(why != nil, ordering: .relaxed)
            disagreementGauge.set(why == nil ? 0 : 1)
            return changed
        }
    }

    /// The client for `environment` and `lane`, made on first use.
    func client(for environment: PushdConfig.Environment, lane: Lane) throws -> APNsClient {
        try clients.client(for: ClientKey(environment: environment, lane: lane)) {
            guard let made = try makeClient(environment, lane) else { throw NoCredentials(app: app.name, environment: environment) }
            return made
        }
    }

    /// Every client of `environment` (both lanes) presents `identity` from now on.
    func replaceCertificate(_ identity: ClientIdentity, environment: PushdConfig.Environment) {
        clients.forEach { key, client in
            if key.environment == environment { client.dispatcher.replaceCertificate(identity) }
        }
    }

    func shutdown(drainTimeoutMilliseconds: Int) {
        clients.shutdownAll(drainTimeoutMilliseconds: drainTimeoutMilliseconds)
    }

    // MARK: Pausing

    /// Stops sending for the app until `until` (or a reload): its credentials were rejected.
    /// Returns true when this call paused it, or gave the pause another reason (so the caller
    /// logs once per reason). A pause that lasts longer stands, with its reason: a 30 s one
    /// (`PipelineContext.pauseSeconds`) must not shorten a 5-minute one and take its place.
    @discardableResult
    func pauseSending(reason: String, until: Timestamp) -> Bool {
        // The gauge changes under the lock: set outside it, a reader that saw no pause yet
        // could reset it to 0 while the app stays paused.
        pause.withLock { current in
            let wasRunning = current == nil || current!.until <= Timestamp()
            if !wasRunning, let standing = current, standing.until > until { return false }
            let changed = wasRunning || current?.reason != reason
            current = (until, reason)
            pausedGauge.set(1)
            return changed
        }
    }

    func resumeSending() {
        pause.withLock { current in
            current = nil
            pausedGauge.set(0)
        }
    }

    /// Why the app is paused when it is because the APNs server's TLS certificate failed
    /// verification or could not be verified (the CA file unusable), nil otherwise. No app
    /// that dials that host can send, and no retry fixes it: unlike a pause for the app's own
    /// credentials, it makes the process not ready.
    var serverCertificateRefusal: String? {
        guard let reason = pausedReason,
              [TransportFailureKind.serverCertificateUntrusted, .trustStoreUnusable].contains(where: { reason.hasPrefix($0.explanation) })
        else { return nil }
        return reason
    }

    /// The reason the app is paused, or nil when it may send.
    var pausedReason: String? {
        pause.withLock { current -> String? in
            guard let paused = current, paused.until > Timestamp() else {
                pausedGauge.set(0)
                return nil
            }
            return paused.reason
        }
    }

    // MARK: Holding one scope

    /// The key of the topic scope a notification to `topic` in `environment` falls under.
    static func topicKey(_ topic: String, _ environment: PushdConfig.Environment) -> HoldKey {
        HoldKey(scope: .topic, environment: environment, topic: topic)
    }

    /// The key of a broadcast scope (FeatureNotEnabled, CannotCreateChannelConfig) of the app,
    /// or of the whole environment (BadEnvironmentKeyInToken).
    func broadcastKey(_ scope: ConfigurationScope, _ environment: PushdConfig.Environment) -> HoldKey {
        HoldKey(scope: scope, environment: environment, topic: app.bundleID)
    }

    /// The hold on `key`, or else the hold of its whole environment, which covers every scope
    /// of it: under the holds' lock.
    private func hold(covering key: HoldKey, in current: [HoldKey: Hold]) -> Hold? {
        if let hold = current[key] { return hold }
        guard key.scope != .environment else { return nil }
        return current[broadcastKey(.environment, key.environment)]
    }

    /// Holds `key` until `until` (or a SIGHUP). Returns true when it was not held before, so
    /// the caller logs once. A scope held already keeps its end: the answers that hold it
    /// again are those of notifications sent before the hold began, and the work put back
    /// for the hold is due when it ends.
    /// `reason` is the scope's own unless given (DeviceTokenNotForTopic for the breaker's holds).
    @discardableResult
    func hold(_ key: HoldKey, why: String, until: Timestamp, reason: APNsReason? = nil) -> Bool {
        holds.withLock { current in
            let now = Timestamp()
            if let held = current[key], held.until > now {
                current[key]?.why = why
                current[key]?.reason = reason ?? key.scope.reason
                publish(&current, now: now)
                return false
            }
            current[key] = Hold(until: until, why: why, reason: reason ?? key.scope.reason)
            publish(&current, now: now)
            return true
        }
    }

    /// Why `key` (or its whole environment) is held, or nil when it may send. One atomic load
    /// when nothing is held.
    func heldReason(_ key: HoldKey) -> String? {
        guard holdCount.load(ordering: .relaxed) > 0 else { return nil }
        return holds.withLock { current -> String? in
            guard let hold = hold(covering: key, in: current) else { return nil }
            let now = Timestamp()
            if hold.until <= now {
                publish(&current, now: now)
                return nil
            }
            return hold.why
        }
    }

    /// The hold on `key` (or its whole environment) now (why, and until when), or nil when it may send.
    func activeHold(_ key: HoldKey) -> Hold? {
        guard holdCount.load(ordering: .relaxed) > 0 else { return nil }
        return holds.withLock { current -> Hold? in
            guard let hold = hold(covering: key, in: current) else { return nil }
            let now = Timestamp()
            if hold.until <= now {
                publish(&current, now: now)
                return nil
            }
            return hold
        }
    }

    /// The hold on `key` if no worker has yet put its queued jobs back, marking that one has:
    /// the caller does it. Nil when `key` is not held or another caller took it.
    func takeSweep(_ key: HoldKey) -> Hold? {
        guard holdCount.load(ordering: .relaxed) > 0 else { return nil }
        return holds.withLock { current -> Hold? in
            guard let hold = current[key], hold.until > Timestamp(), !hold.swept else { return nil }
            current[key]?.swept = true
            return hold
        }
    }

    /// The push types whose notifications this app sends to `topic`.
    func pushTypes(sentTo topic: String) -> [PushType] {
        PushType.allCases.filter { factory.topic(for: $0) == topic }
    }

    /// The push types whose queued jobs a hold of `key` keeps: every one for a whole environment.
    func pushTypes(heldBy key: HoldKey) -> [PushType] {
        key.scope == .environment ? PushType.allCases : pushTypes(sentTo: key.topic)
    }

    /// Whether any scope of the app is held (a hint: `heldReason` decides).
    var hasHolds: Bool { holdCount.load(ordering: .relaxed) > 0 }

    /// Every scope held now, with why and for which answer.
    var activeHolds: [(key: HoldKey, why: String, reason: APNsReason)] {
        guard hasHolds else { return [] }
        return holds.withLock { current in
            publish(&current, now: Timestamp())
            return current.map { (key: $0.key, why: $0.value.why, reason: $0.value.reason) }
                .sorted { $0.key.description < $1.key.description }
        }
    }

    /// Ends the holds `matching` selects; returns the ones it ended.
    @discardableResult
    func releaseHolds(matching: (HoldKey) -> Bool = { _ in true }) -> [HoldKey] {
        guard hasHolds else { return [] }
        return holds.withLock { current in
            let ended = current.keys.filter(matching)
            for key in ended { current[key] = nil }
            publish(&current, now: Timestamp())
            return ended.sorted { $0.description < $1.description }
        }
    }

    /// Drops expired holds and sets the count and the gauges; under the holds' lock, so a
    /// reader never resets a gauge while a scope stays held.
    private func publish(_ current: inout [HoldKey: Hold], now: Timestamp) {
        current = current.filter { $0.value.until > now }
        holdCount.store(current.count, ordering: .relaxed)
        var counts = [HeldGaugeKey: Int]()
        for (key, hold) in current { counts[HeldGaugeKey(environment: key.environment, reason: hold.reason), default: 0] += 1 }
        for (key, gauge) in heldGauges { gauge.set(Double(counts[key] ?? 0)) }
    }

    // MARK: DeviceTokenNotForTopic and BadDeviceToken answers in a row

    /// A notification of `source` to `topic` in `environment` was accepted: a run of
    /// DeviceTokenNotForTopic answers on the topic ends, and the source's run of BadDeviceToken
    /// answers in the environment; their prunes stand. One atomic load when none is counted.
    func acceptedOnTopic(_ topic: String, _ environment: PushdConfig.Environment, source: NotForTopicBreaker.Source) {
        guard breakerBusy.load(ordering: .relaxed) else { return }
        withBreaker { $0.accepted(NotForTopicBreaker.Key(environment: environment, topic: topic), source: source, now: RateLimiter.monotonicSeconds()) }
    }

    /// APNs answered 410 to a notification of `source` in `environment`: it knows the token, and
    /// the source's BadDeviceToken run there ends. One atomic load when none is counted.
    func tokenKnown(_ environment: PushdConfig.Environment, source: NotForTopicBreaker.Source) {
        guard breakerBusy.load(ordering: .relaxed) else { return }
        withBreaker { $0.tokenKnown(environment, source: source, now: RateLimiter.monotonicSeconds()) }
    }

    /// APNs answered BadDeviceToken for `token` of `source` in `environment` (`NotForTopicBreaker.badDeviceToken`).
    /// A trip's written prunes wait in `takeRestores`.
    func badDeviceToken(_ environment: PushdConfig.Environment, source: NotForTopicBreaker.Source, token: String) -> NotForTopicBreaker.Decision {
        let decision = withBreaker { $0.badDeviceToken(environment, source: source, token: token, now: RateLimiter.monotonicSeconds()) }
        if case .tripped(_, let restore) = decision { queueRestores(restore) }
        return decision
    }

    /// BadDeviceToken answers in a row from one source in an environment that stop pruning.
    var badDeviceTokenLimit: Int { breaker.withLock { $0.badDeviceTokenThreshold } }

    /// APNs answered DeviceTokenNotForTopic for `token` on `topic`; `prunes` says whether the
    /// caller prunes the token for it. A trip's written prunes wait in `takeRestores`.
    func notForTopic(_ topic: String, _ environment: PushdConfig.Environment, token: String, prunes: Bool) -> NotForTopicBreaker.Decision {
        let decision = withBreaker { $0.notForTopic(NotForTopicBreaker.Key(environment: environment, topic: topic), token: token, prunes: prunes) }
        if case .tripped(_, let restore) = decision { queueRestores(restore) }
        return decision
    }

    /// The prunes of `prunes` to write, and those left out: those of a run that tripped.
    func prunesToWrite(_ prunes: [TokenPrune]) -> (write: [TokenPrune], withheld: [TokenPrune]) {
        guard breakerBusy.load(ordering: .relaxed) else { return (prunes, []) }
        return withBreaker { $0.toWrite(prunes) }
    }

    /// The transaction that left `withheld` out was committed (`NotForTopicBreaker.withheldCommitted`).
    func prunesWithheldCommitted(_ withheld: [TokenPrune]) {
        guard !withheld.isEmpty else { return }
        withBreaker { $0.withheldCommitted(withheld) }
    }

    /// Tells the breaker which prunes were written; those of a run that tripped meanwhile wait
    /// in `takeRestores`.
    func prunesWritten(_ invalidated: [TokenPrune]) {
        guard breakerBusy.load(ordering: .relaxed),
              invalidated.contains(where: { NotForTopicBreaker.runReasons.contains($0.reason) }) else { return }
        queueRestores(withBreaker { $0.written(invalidated) })
    }

    /// The written prunes of tripped runs, to restore; each is handed out once.
    func takeRestores() -> [TokenPrune] {
        guard restoresWaiting.load(ordering: .relaxed) else { return [] }
        return restores.withLock { waiting in
            defer {
                waiting.removeAll()
                restoresWaiting.store(false, ordering: .relaxed)
            }
            return waiting
        }
    }

    /// Hands restores back after the statement that was to restore them failed.
    func queueRestores(_ prunes: [TokenPrune]) {
        guard !prunes.isEmpty else { return }
        restores.withLock { waiting in
            waiting += prunes
            restoresWaiting.store(true, ordering: .relaxed)
        }
    }

    private func withBreaker<Result>(_ body: (inout NotForTopicBreaker) -> Result) -> Result {
        breaker.withLock { state in
            let result = body(&state)
            breakerBusy.store(state.counting || state.withdrawing, ordering: .relaxed)
            return result
        }
    }

    // MARK: 403 Forbidden answers in a row

    /// A notification in `environment` was accepted: a run of Forbidden answers there ends.
    /// One atomic load when none is counted.
    func acceptedIn(_ environment: PushdConfig.Environment) {
        guard forbiddenCounting.load(ordering: .relaxed) else { return }
        withForbiddenRuns { $0.accepted(environment) }
    }

    /// APNs answered 403 Forbidden to a notification in `environment`.
    func forbidden(_ environment: PushdConfig.Environment) -> ForbiddenBreaker.Decision {
        withForbiddenRuns { $0.forbidden(environment) }
    }

    /// Forbidden answers in a row that are taken as refused credentials.
    var forbiddenLimit: Int { forbiddenRuns.withLock { $0.threshold } }

    /// Forgets every run of Forbidden answers: a reload may have fixed the credentials, and a
    /// run tripped before it must not hold the environment again on its first answer.
    func resetForbiddenRuns() {
        withForbiddenRuns { $0.reset() }
    }

    private func withForbiddenRuns<Result>(_ body: (inout ForbiddenBreaker) -> Result) -> Result {
        forbiddenRuns.withLock { state in
            let result = body(&state)
            forbiddenCounting.store(state.counting, ordering: .relaxed)
            return result
        }
    }

    // MARK: Metrics

    /// What a dispatcher result means for the outcome policy; an answer's latency is observed.
    func outcome(of result: DispatchResult, environment: PushdConfig.Environment) -> SendOutcome {
        switch result.outcome {
        case .response(let response):
            latency[environment]?.observe(Double(result.latencyNanoseconds) / 1e9)
            // No apns-id string: nothing pushd does with an answer reads it.
            return .response(response.classified)
        case .transportFailure(let error):
            let kind = TransportFailureKind(error)
            if kind.isConfigurationError {
                return .tlsRefused("\(kind.explanation) (libcurl error \(error.code): \(error.message))")
            }
            return .transportFailure(CertificateRefusalHint.explain(
                error.message, hint: CertificateRefusalHint.hint(for: error, certificateApp: authenticatedByCertificate)))
        case .notSent(let notSent):
            return .notSent(CertificateRefusalHint.explain(
                notSent.description, hint: CertificateRefusalHint.hint(for: notSent, certificateApp: authenticatedByCertificate)))
        }
    }

    func countSent(pushType: String, lane: Lane, environment: PushdConfig.Environment) {
        guard let type = PushType(rawValue: pushType) else { return }
        sentCounters[SentKey(environment: environment, pushType: type, lane: lane)]?.increment()
    }

    /// Counts what a request that was not accepted got in `pushd_apns_responses_total`, in
    /// every lane and for every verdict (retried, dead, paused, held): an answer by its status
    /// and reason, a failed attempt (transport, TLS) with status "none". A request never sent
    /// is not counted: it had no answer and made no attempt.
    func countAnswer(_ outcome: SendOutcome, environment: PushdConfig.Environment) {
        switch outcome {
        case .response(let response):
            countResponse(status: response.status, reason: outcome.label, environment: environment)
        case .transportFailure, .tlsRefused:
            countResponse(status: nil, reason: outcome.label, environment: environment)
        case .notSent:
            break
        }
    }

    func countResponse(status: Int?, reason: String, environment: PushdConfig.Environment) {
        if status == 200 {
            acceptedResponses[environment]?.increment()
            return
        }
        metrics.apnsResponse(app: app.name, environment: environment.rawValue,
                             status: status.map(String.init) ?? "none", reason: reason).increment()
    }
}

/// Feeds the dispatcher's engine events into one app's metric children and, at `debug`, one
/// log line per connection opened, failed, asked to be replaced or closed (the engine names
/// no reason for a close; a failure or replacement line before it says why). The hook runs on
/// the engine thread: a disabled level costs one comparison.
struct AppDispatcherMetrics: DispatcherMetricsHook {
    let inFlight: Gauge
    let connections: Gauge
    /// The campaign lane's limit on notifications inside libcurl; nil for the other lanes.
    let inFlightLimit: Gauge?
    let errors: [ConnectionFailureReason: Counter]
    let resent: TransportResendLog
    let reconnects: Counter
    let backoffs: Counter
    let growthsStarted: Counter
    let growthsKept: Counter
    let growthsGivenUp: Counter
    let growthsAbandoned: Counter
    /// Shared by the client's event loops, so a run of failures they see together is one line.
    let backoffRuns: ReconnectBackoffAnnouncer
    let retirements: ConnectionRetirementReporter?
    let logger: Logger?
    let label: String
    /// The app authenticates by client certificate (`CertificateRefusalHint`).
    let authenticatedByCertificate: Bool

    init(app: String, environment: String, lane: String? = nil, metrics: PushdMetrics,
         retirements: ConnectionRetirementReporter? = nil, logger: Logger? = nil, authenticatedByCertificate: Bool = false) {
        self.retirements = retirements
        self.authenticatedByCertificate = authenticatedByCertificate
        inFlight = metrics.streamsInFlight(app: app, environment: environment)
        connections = metrics.connections(app: app, environment: environment)
        inFlightLimit = lane == Lane.campaign.rawValue ? metrics.inFlightLimit(app: app, environment: environment) : nil
        errors = Dictionary(uniqueKeysWithValues: ConnectionFailureReason.allCases.map {
            ($0, metrics.connectionError(app: app, environment: environment, reason: $0.rawValue))
        })
        reconnects = metrics.reconnects(app: app, environment: environment)
        backoffs = metrics.reconnectBackoffs(app: app, environment: environment)
        growthsStarted = metrics.connectionGrowths(app: app, environment: environment, result: "started")
        growthsKept = metrics.connectionGrowths(app: app, environment: environment, result: "kept")
        growthsGivenUp = metrics.connectionGrowths(app: app, environment: environment, result: "given_up")
        growthsAbandoned = metrics.connectionGrowths(app: app, environment: environment, result: "abandoned")
        backoffRuns = ReconnectBackoffAnnouncer()
        label = "app \(app), \(environment)" + (lane.map { ", \($0) lane" } ?? "")
        self.logger = logger.map { logger in
            var fields: [(String, LogValue)] = [("app", .string(app)), ("environment", .string(environment))]
            if let lane { fields.append(("lane", .string(lane))) }
            var copy = logger
            copy.baseFields += fields
            return copy
        }
        resent = TransportResendLog(app: app, environment: environment, label: label, metrics: metrics, logger: self.logger)
    }

    func inFlightChanged(by delta: Int) { inFlight.add(Double(delta)) }
    func connectionOpened(reconnect: Bool) {
        connections.increment()
        if reconnect { reconnects.increment() }
        logger?.debug("opened a connection to APNs for \(label)\(reconnect ? ", replacing one" : "")",
                      ("event", "connection_opened"), ("reconnect", .bool(reconnect)))
    }
    func connectionClosed() {
        connections.decrement()
        logger?.debug("closed a connection to APNs for \(label)", ("event", "connection_closed"))
    }
    func connectionFailed(_ reason: ConnectionFailureReason) {
        errors[reason]?.increment()
        if reason == .goaway { retirements?.record(.goaway) }
        if reason == .refusedStream { retirements?.record(.refusedStream) }
        logger?.debug("a connection to APNs for \(label) failed or ended: \(reason.rawValue)",
                      ("event", "connection_failed"), ("reason", .string(reason.rawValue)))
    }
    func requestResent(_ resend: TransportResend) { resent.record(resend) }
    func requestResent(afterAnswer status: Int, reason: APNsReason?) {
        resent.recordNewConnectionAsked()
        if let cause = ConnectionRetirementReporter.cause(status: status, reason: reason?.rawValue) { retirements?.record(cause) }
    }
    func reconnectBackoffStarted(_ failure: ConnectionFailureCause, delayMilliseconds: Int) {
        backoffs.increment()
        guard backoffRuns.started(), let logger else { return }
        let cause = CertificateRefusalHint.explain(failure, certificateApp: authenticatedByCertificate)
        logger.warning("a connection to APNs for \(label) failed (\(cause)); reconnecting after a backoff of \(delayMilliseconds) ms, doubling to 4 s while connections keep failing; from the third failure in a row, notifications waiting for a connection go back to the queue unsent",
                       ("event", "apns_reconnect_backoff"), ("cause", .string(cause)), ("delay_ms", .int(Int64(delayMilliseconds))))
    }
    func reconnectBackoffEnded(failures: Int) {
        guard backoffRuns.ended(), let logger else { return }
        logger.info("connections to APNs for \(label) answer again after \(failures) failed in a row",
                    ("event", "apns_reconnect_backoff_ended"), ("failures", .int(Int64(failures))))
    }
    func connectionGrowthStarted(_ start: ConnectionGrowthStart) {
        growthsStarted.increment()
        logger?.write(.info, "\(start.requestsWaiting) notifications for \(label) waited for a stream (\(start.waitedMilliseconds) ms without a break, the event loop idle part of that time): it adds a connection to APNs (\(start.connectionsBefore) → \(start.connections)), on trial with \(start.streamsOnTrial) streams against \(Int(start.ratePerSecondBefore)) answers/s before it", fields: [
            ("event", "connection_growth"), ("result", "started"), ("trigger", "requests_waiting_for_a_stream"),
            ("requests_waiting", .int(Int64(start.requestsWaiting))), ("waited_ms", .int(Int64(start.waitedMilliseconds))),
            ("connections_before", .int(Int64(start.connectionsBefore))), ("connections", .int(Int64(start.connections))),
            ("rate_before", .int(Int64(start.ratePerSecondBefore))), ("streams_on_trial", .int(Int64(start.streamsOnTrial))),
        ])
    }
    func connectionGrowthJudged(_ verdict: ConnectionGrowthVerdict) {
        (verdict.abandoned != nil ? growthsAbandoned : verdict.kept ? growthsKept : growthsGivenUp).increment()
        guard let logger else { return }
        let rates = "\(Int(verdict.ratePerSecondBefore)) answers/s before it, \(Int(verdict.ratePerSecondAfter)) after, \(Int(verdict.ratePerSecondRequired)) needed"
        var fields: [(String, LogValue)] = [
            ("event", "connection_growth"), ("result", .string(verdict.abandoned != nil ? "abandoned" : verdict.kept ? "kept" : "given_up")),
            ("connections", .int(Int64(verdict.connections))), ("rate_before", .int(Int64(verdict.ratePerSecondBefore))),
            ("rate_after", .int(Int64(verdict.ratePerSecondAfter))), ("rate_needed", .int(Int64(verdict.ratePerSecondRequired))),
            ("held_off_ms", .int(Int64(verdict.growthHeldOffMilliseconds))),
        ]
        if let reason = verdict.abandoned {
            fields.append(("reason", .string(reason.rawValue)))
            let why = switch reason {
            case .connectionClosed: "a connection closed and the limit fell to the connections open"
            case .workRanOut: "the event loop ran out of notifications to send, so no answers come to judge it by"
            case .stopped: "pushd is stopping"
            }
            logger.write(.info, "an added connection to APNs for \(label) was not judged: \(why); the event loop goes back to \(verdict.connections) and may add one again without a hold-off", fields: fields)
        } else if verdict.kept {
            logger.write(.info, "an added connection to APNs for \(label) raised the answer rate and stays (\(rates)); an event loop holds \(verdict.connections)", fields: fields)
        } else {
            logger.write(.info, "an added connection to APNs for \(label) did not raise the answer rate (\(rates)): the host's CPU or the server sets the pace, not the streams; the event loop goes back to \(verdict.connections) and adds none for \(verdict.growthHeldOffMilliseconds / 1000) s", fields: fields)
        }
    }
    func inFlightLimitChanged(by delta: Int) { inFlightLimit?.add(Double(delta)) }
    func inFlightLimitSettled(limit: Int, rate: Double, roundTripNanoseconds: UInt64) {
        logger?.info("the limit on notifications in flight for \(label) is now \(limit) on one of its event loops: "
                     + "\(Int(rate)) answers/s at a mean round trip of \(roundTripNanoseconds / 1_000_000) ms",
                     ("event", "in_flight_limit"), ("limit", .int(Int64(limit))), ("rate", .int(Int64(rate))),
                     ("round_trip_ms", .int(Int64(roundTripNanoseconds / 1_000_000))))
    }

    func certificateReplaced(connectionsRetired: Int) {
        retirements?.count(.certificateReplaced, by: connectionsRetired)
    }

    func connectionReplacementRequested() {
        logger?.debug("retiring a connection to APNs for \(label): an answer asked for a fresh one",
                      ("event", "connection_retiring"))
    }
}
