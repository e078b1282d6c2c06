import APNs
import Metrics
import Posix
import QueueStore
import Locking

/// Which work of its apps this instance can send, and what becomes of the rest. A certificate
/// reaches one environment's host, so an app configured with only `certificate` (or a rolling
/// deploy that adds `sandbox_certificate` one instance at a time) leaves an instance unable to
/// send some of the app's work; and APNs takes some work only with token authentication
/// (`PushType.tokenOnly` pushes; broadcasts and channel management requests go with a
/// certificate too), so an instance with only a certificate for the app (a move from certificates to a signing key, one instance
/// at a time) cannot send that either. Such work is left to another live instance that
/// advertises what it takes (`pushd.instances.environments`: "app/environment" and
/// "app/token"); only when none does is it dead-lettered, with one error line per app and
/// environment (or per app, for token work) a minute.
///
/// Thread rule: the configuration-derived lists are immutable; the fleet's view is written by
/// the heartbeat thread and read by the workers under its lock, and so are the log times.
final class EnvironmentCoverage: @unchecked Sendable {
    /// What a worker does with a notification this instance has no credentials for.
    enum Decision: Equatable {
        /// Another live instance can send it: back to the queue, unspent, for that one.
        case leave(retryAfterSeconds: Double)
        /// No live instance can: dead-letter it (`NoCredentialsForEnvironment`,
        /// `TokenAuthenticationRequired`).
        case deadLetter
    }

    /// How long a notification left to another instance waits before it is claimable again
    /// (by the claim that leaves it alone, it normally is not claimed here again).
    static let leaveRetrySeconds = 5.0
    /// One error line per app and environment at most this often while work is dead-lettered.
    static let logIntervalSeconds = 60.0
    /// The `reason` label of `pushd_work_left_to_other_instances` for token work.
    static let tokenReason = "TokenAuthenticationRequired"
    /// The `reason` label of `pushd_work_left_to_other_instances` for an environment's work.
    static let environmentReason = "NoCredentialsForEnvironment"

    /// "app/environment" for every environment of the configured apps this instance can send
    /// to, and "app/token" for every app it has a signing key for.
    let advertised: [String]
    /// "app/environment" and "app/token" for every one it cannot send.
    let missing: [String]
    /// App → its configured environment, for the claim.
    private let home: [String: String]
    /// Which of `missing` another live instance sends, as the last heartbeat read it; nil
    /// until one has (then nothing is known to be sent elsewhere, as before instances said).
    private let elsewhere = Lock<Set<String>?>(nil)
    /// When the heartbeat began (monotonic seconds) and when it last read the fleet; nil
    /// without a heartbeat (a pipeline that does not register, as in `pushd send`), which
    /// decides on what it has, as before.
    private let watch = Lock<(since: Double, readAt: Double?)?>(nil)
    /// A read of the fleet this long after the heartbeat began sees every instance started
    /// with this one: each registers at its own start, and the fleet is read every
    /// `InstanceStore.heartbeatSeconds`. Before it, work no instance is known to send waits
    /// instead of being dead-lettered: two instances started together, each reading the
    /// fleet before the other had registered, dead-lettered what the other could send.
    static let settleSeconds = InstanceStore.heartbeatSeconds * 1.5
    /// A fleet read older than this (the heartbeat cannot reach the database) is not trusted
    /// to say that no live instance sends some work.
    static let staleSeconds = InstanceStore.heartbeatSeconds * 3
    private let clock: @Sendable () -> Double
    private let lines = Lock(LogGate<String>(quietSeconds: EnvironmentCoverage.logIntervalSeconds))
    private let logger: Logger
    private let metrics: PushdMetrics?

    init(apps: [PushdConfig.App], logger: Logger, metrics: PushdMetrics? = nil,
         clock: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        self.clock = clock
        var advertised = [String](), missing = [String]()
        for app in apps {
            for environment in PushdConfig.Environment.allCases {
                let entry = InstanceRegistration.environmentEntry(app: app.name, environment: environment.rawValue)
                if app.credentials(for: environment) != nil { advertised.append(entry) } else { missing.append(entry) }
            }
            if case .token = app.credentials {
                advertised.append(InstanceRegistration.tokenEntry(app: app.name))
            } else {
                missing.append(InstanceRegistration.tokenEntry(app: app.name))
            }
        }
        self.advertised = advertised.sorted()
        self.missing = missing.sorted()
        home = Dictionary(uniqueKeysWithValues: apps.map { ($0.name, $0.environment.rawValue) })
        self.logger = logger
        self.metrics = metrics
        // Every gap shows from the start: 0 until a heartbeat finds another instance for it.
        for entry in self.missing { gauge(entry)?.set(0) }
    }

    private static func split(_ entry: String) -> (app: String, what: String) {
        let parts = entry.split(separator: "/", maxSplits: 1).map(String.init)
        return (parts[0], parts.count > 1 ? parts[1] : "")
    }

    private static func isToken(_ entry: String) -> Bool { split(entry).what == InstanceRegistration.tokenEntryName }

    /// `pushd_work_left_to_other_instances` of a missing entry.
    private func gauge(_ entry: String) -> Gauge? {
        let (app, _) = Self.split(entry)
        return metrics?.workLeftToOtherInstances(app: app, reason: Self.isToken(entry) ? Self.tokenReason : Self.environmentReason)
    }

    /// The heartbeat begins: from now on work no live instance is known to send is
    /// dead-lettered only on a fleet read that is settled and fresh (`fleetKnown`).
    func heartbeatStarts() {
        let now = clock()
        watch.withLock { $0 = (since: now, readAt: nil) }
    }

    /// Whether the last fleet read can say that no live instance sends some work: there is no
    /// heartbeat (nothing more will be known), or its last read came `settleSeconds` after it
    /// began and is less than `staleSeconds` old.
    private func fleetKnown() -> Bool {
        let now = clock()
        return watch.withLock { watch in
            guard let watch else { return true }
            guard let readAt = watch.readAt else { return false }
            return readAt - watch.since >= Self.settleSeconds && now - readAt <= Self.staleSeconds
        }
    }

    /// Records which of `missing` other live instances send, from a heartbeat.
    func update(sentElsewhere: Set<String>) {
        let now = clock()
        watch.withLock { $0?.readAt = now }
        let changed = elsewhere.withLock { current -> (left: [String], unserved: [String])? in
            let before = current
            current = sentElsewhere
            guard before != sentElsewhere else { return nil }
            return (missing.filter { sentElsewhere.contains($0) }, missing.filter { !sentElsewhere.contains($0) })
        }
        guard let changed, !missing.isEmpty else { return }
        for entry in changed.left { gauge(entry)?.set(1) }
        for entry in changed.unserved { gauge(entry)?.set(0) }
        logger.info("work this instance cannot send (\"app/environment\": no credentials for it; \"app/token\": no token key, "
                    + "which Live Activity and location pushes are sent with): left to other instances: "
                    + (changed.left.isEmpty ? "none" : changed.left.joined(separator: ", "))
                    + "; sent by no live instance (dead-lettered): " + (changed.unserved.isEmpty ? "none" : changed.unserved.joined(separator: ", ")),
                    ("event", "environment_coverage"))
    }

    /// The claim's filter: per app, the environment whose jobs other instances take, and the
    /// apps whose token-only pushes they take.
    func leaving() -> JobQueue.Leaving {
        guard !missing.isEmpty else { return JobQueue.Leaving() }
        return elsewhere.withLock { current in
            guard let current, !current.isEmpty else { return JobQueue.Leaving() }
            var environments = [String: String]()
            var tokenOnly = Set<String>()
            for entry in missing where current.contains(entry) {
                let (app, what) = Self.split(entry)
                if what == InstanceRegistration.tokenEntryName { tokenOnly.insert(app) } else { environments[app] = what }
            }
            return JobQueue.Leaving(environments: environments, home: home, tokenOnly: tokenOnly,
                                    tokenOnlyPushTypes: PushType.tokenOnly.map(\.rawValue))
        }
    }

    /// Whether another live instance takes the token work (Live Activity and location pushes)
    /// of `app`: its claims leave that work alone.
    func leavesTokenWork(of app: String) -> Bool {
        let entry = InstanceRegistration.tokenEntry(app: app)
        return elsewhere.withLock { $0?.contains(entry) ?? false }
    }

    /// "app/environment" or "app/token" of all work no live instance can send, for `/readyz`'s detail.
    func unserved() -> [String] {
        guard !missing.isEmpty else { return [] }
        return elsewhere.withLock { current in missing.filter { !(current?.contains($0) ?? false) } }
    }

    /// What to do with a notification of `app` to `environment`, which this instance has no
    /// credentials for; on `.deadLetter`, logs the error line if none was logged for the pair
    /// within `logIntervalSeconds`.
    func decide(app: String, environment: PushdConfig.Environment, lane: Lane) -> Decision {
        decide(app: app, environment: environment, lane: lane.rawValue)
    }

    /// `decide` for a lane named by its label (`broadcast`).
    func decide(app: String, environment: PushdConfig.Environment, lane: String) -> Decision {
        let entry = InstanceRegistration.environmentEntry(app: app, environment: environment.rawValue)
        if elsewhere.withLock({ $0?.contains(entry) ?? false }) {
            return .leave(retryAfterSeconds: Self.leaveRetrySeconds)
        }
        guard fleetKnown() else {
            reportWaiting(entry)
            return .leave(retryAfterSeconds: Self.leaveRetrySeconds)
        }
        reportDeadLettered(app: app, environment: environment, lane: lane)
        return .deadLetter
    }

    /// What to do with work of `app` that APNs takes only with token authentication, which this
    /// instance has only a certificate for; on `.deadLetter`, logs the error line if none was logged for the app within
    /// `logIntervalSeconds`.
    func decideTokenWork(app: String, lane: String) -> Decision {
        if leavesTokenWork(of: app) { return .leave(retryAfterSeconds: Self.leaveRetrySeconds) }
        guard fleetKnown() else {
            reportWaiting(InstanceRegistration.tokenEntry(app: app))
            return .leave(retryAfterSeconds: Self.leaveRetrySeconds)
        }
        reportTokenWorkDeadLettered(app: app, lane: lane)
        return .deadLetter
    }

    /// Logs, at most once per entry a minute, that work this instance cannot send waits
    /// because whether another live instance sends it is not known yet.
    private func reportWaiting(_ entry: String) {
        guard let count = dueLine("waiting " + entry) else { return }
        logger.warning("work of \(entry) that this instance cannot send waits (\(count) since the last such line): whether another live instance "
                       + "sends it is not known yet (this instance started less than \(Int(Self.settleSeconds)) s ago, or its last read of "
                       + "pushd.instances is over \(Int(Self.staleSeconds)) s old); it is dead-lettered only once a fresh read shows no instance that can",
                       ("event", "environment_coverage_unknown"), ("entry", .string(entry)), ("waiting", .int(Int64(count))))
    }

    /// The `last_error` of a notification left to another instance.
    static func leftReason(_ environment: PushdConfig.Environment) -> String {
        "NoCredentialsForEnvironment: left to an instance that has credentials for \(environment.rawValue)"
    }

    /// The `last_error` of token work left to another instance.
    static func tokenLeftReason(app: String) -> String {
        "TokenAuthenticationRequired: left to an instance that has a token key for app \(app)"
    }

    /// What a dead-lettered piece of token work's reason adds to saying a certificate cannot send it.
    static func noTokenKeyInFleet(app: String) -> String {
        "no live instance of the fleet has a token key for app \(app)"
    }

    /// Counts one more dead-lettered notification of `key`; returns how many since the last
    /// line when a line is due now (none within `logIntervalSeconds`), else nil.
    private func dueLine(_ key: String) -> Int? {
        let now = RateLimiter.monotonicSeconds()
        return lines.withLock { $0.admit(key, now: now) }.map { $0 + 1 }
    }

    /// Logs, at most once per app and environment a minute, that notifications of `app` to
    /// `environment` were dead-lettered (channel management requests: failed) for want of
    /// credentials, naming the setting to add.
    private func reportDeadLettered(app: String, environment: PushdConfig.Environment, lane: String) {
        guard let count = dueLine(InstanceRegistration.environmentEntry(app: app, environment: environment.rawValue)) else { return }
        // A channel management request is failed in its own table, not dead-lettered.
        let channels = lane == BroadcastWorker.channelsLane
        let what = channels ? "channel management request(s)" : "notification(s)"
        let outcome = channels ? "failed" : "dead-lettered"
        logger.error("app \(app) has no credentials for \(environment.rawValue) in this instance nor in any live instance: "
                     + "\(count) of its \(environment.rawValue) \(what) on the \(lane) lane \(outcome) (NoCredentialsForEnvironment) since the last such line; "
                     + "add \(environment.rawValue)_certificate to app \(app) in the configuration (APNs issues a certificate for one environment)",
                     ("event", "no_credentials_for_environment"), ("app", .string(app)),
                     ("environment", .string(environment.rawValue)), ("lane", .string(lane)),
                     ("config_key", .string("apps[\(app)].\(environment.rawValue)_certificate")),
                     (channels ? "failed" : "dead_lettered", .int(Int64(count))))
    }

    /// Logs, at most once per app a minute, that token work of `app` was dead-lettered because
    /// no instance of the fleet has a token key for it, naming the setting to add.
    private func reportTokenWorkDeadLettered(app: String, lane: String) {
        guard let count = dueLine(InstanceRegistration.tokenEntry(app: app)) else { return }
        logger.error("app \(app) uses a certificate in this instance and \(Self.noTokenKeyInFleet(app: app)): "
                     + "\(count) of its notification(s) that APNs takes only with token (JWT) authentication "
                     + "(Live Activity and location pushes) dead-lettered since the last such line, the last on the \(lane) lane; "
                     + "give app \(app) a token key (team_id, key_id, key_file) in the configuration of an instance",
                     ("event", "no_token_key_in_fleet"), ("app", .string(app)), ("lane", .string(lane)),
                     ("config_key", .string("apps[\(app)].token")), ("dead_lettered", .int(Int64(count))))
    }
}
