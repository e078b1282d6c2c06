import Posix
import QueueStore
import Locking

/// Which environments of its apps this instance can send to, and what becomes of the work for
/// the others. A certificate reaches one environment's host, so an app configured with only
/// `certificate` (or a rolling deploy that adds `sandbox_certificate` one instance at a time)
/// leaves an instance unable to send some of the app's work. Such work is left to another
/// live instance that advertises credentials for it (`pushd.instances.environments`); only
/// when none does is it dead-lettered, with one error line per app and environment a minute.
///
/// Thread rule: the configuration-derived lists are immutable; the fleet's view is written by
/// the heartbeat thread and read by the workers under its lock, and so are the log times.
final class EnvironmentCoverage: @unchecked Sendable {
    /// What a worker does with a notification this instance has no credentials for.
    enum Decision: Equatable {
        /// Another live instance can send it: back to the queue, unspent, for that one.
        case leave(retryAfterSeconds: Double)
        /// No live instance can: dead-letter it (`NoCredentialsForEnvironment`).
        case deadLetter
    }

    /// How long a notification left to another instance waits before it is claimable again
    /// (by the claim that leaves it alone, it normally is not claimed here again).
    static let leaveRetrySeconds = 5.0
    /// One error line per app and environment at most this often while work is dead-lettered.
    static let logIntervalSeconds = 60.0

    /// "app/environment" for every environment of the configured apps this instance can send to.
    let advertised: [String]
    /// "app/environment" for every one it cannot send to.
    let missing: [String]
    /// App → its configured environment, for the claim.
    private let home: [String: String]
    /// Which of `missing` another live instance sends, as the last heartbeat read it; nil
    /// until one has (then nothing is known to be sent elsewhere, as before instances said).
    private let elsewhere = Lock<Set<String>?>(nil)
    private let lastLogged = Lock<[String: (at: Double, since: Int)]>([:])
    private let logger: Logger

    init(apps: [PushdConfig.App], logger: Logger) {
        var advertised = [String](), missing = [String]()
        for app in apps {
            for environment in PushdConfig.Environment.allCases {
                let entry = InstanceRegistration.environmentEntry(app: app.name, environment: environment.rawValue)
                if app.credentials(for: environment) != nil { advertised.append(entry) } else { missing.append(entry) }
            }
        }
        self.advertised = advertised.sorted()
        self.missing = missing.sorted()
        home = Dictionary(uniqueKeysWithValues: apps.map { ($0.name, $0.environment.rawValue) })
        self.logger = logger
    }

    /// Records which of `missing` other live instances send, from a heartbeat.
    func update(sentElsewhere: Set<String>) {
        let changed = elsewhere.withLock { current -> (left: [String], unserved: [String])? in
            let before = current
            current = sentElsewhere
            guard before != sentElsewhere else { return nil }
            return (missing.filter { sentElsewhere.contains($0) }, missing.filter { !sentElsewhere.contains($0) })
        }
        guard let changed, !missing.isEmpty else { return }
        logger.info("environments this instance has no credentials for: left to other instances: "
                    + (changed.left.isEmpty ? "none" : changed.left.joined(separator: ", "))
                    + "; sent by no live instance (dead-lettered): " + (changed.unserved.isEmpty ? "none" : changed.unserved.joined(separator: ", ")),
                    ("event", "environment_coverage"))
    }

    /// The claim's filter: per app, the environment whose jobs other instances take.
    func leaving() -> JobQueue.Leaving {
        guard !missing.isEmpty else { return JobQueue.Leaving() }
        return elsewhere.withLock { current in
            guard let current, !current.isEmpty else { return JobQueue.Leaving() }
            var environments = [String: String]()
            for entry in missing where current.contains(entry) {
                let parts = entry.split(separator: "/", maxSplits: 1).map(String.init)
                environments[parts[0]] = parts[1]
            }
            return JobQueue.Leaving(environments: environments, home: home)
        }
    }

    /// "app/environment" of every environment no live instance can send, for `/readyz`'s detail.
    func unserved() -> [String] {
        guard !missing.isEmpty else { return [] }
        return elsewhere.withLock { current in missing.filter { !(current?.contains($0) ?? false) } }
    }

    /// What to do with a notification of `app` to `environment`, which this instance has no
    /// credentials for; on `.deadLetter`, logs the error line if none was logged for the pair
    /// within `logIntervalSeconds`.
    func decide(app: String, environment: PushdConfig.Environment, lane: Lane) -> Decision {
        let entry = InstanceRegistration.environmentEntry(app: app, environment: environment.rawValue)
        if elsewhere.withLock({ $0?.contains(entry) ?? false }) {
            return .leave(retryAfterSeconds: Self.leaveRetrySeconds)
        }
        reportDeadLettered(app: app, environment: environment, lane: lane)
        return .deadLetter
    }

    /// The `last_error` of a notification left to another instance.
    static func leftReason(_ environment: PushdConfig.Environment) -> String {
        "NoCredentialsForEnvironment: left to an instance that has credentials for \(environment.rawValue)"
    }

    /// Logs, at most once per app and environment a minute, that notifications of `app` to
    /// `environment` were dead-lettered for want of credentials, naming the setting to add.
    private func reportDeadLettered(app: String, environment: PushdConfig.Environment, lane: Lane) {
        let entry = InstanceRegistration.environmentEntry(app: app, environment: environment.rawValue)
        let now = RateLimiter.monotonicSeconds()
        let count = lastLogged.withLock { logged -> Int? in
            if let last = logged[entry], now - last.at < Self.logIntervalSeconds {
                logged[entry]!.since += 1
                return nil
            }
            let since = (logged[entry]?.since ?? 0) + 1
            logged[entry] = (now, 0)
            return since
        }
        guard let count else { return }
        logger.error("app \(app) has no credentials for \(environment.rawValue) in this instance nor in any live instance: "
                     + "\(count) of its \(environment.rawValue) notification(s) on the \(lane.rawValue) lane dead-lettered (NoCredentialsForEnvironment) since the last such line; "
                     + "add \(environment.rawValue)_certificate to app \(app) in the configuration (APNs issues a certificate for one environment)",
                     ("event", "no_credentials_for_environment"), ("app", .string(app)),
                     ("environment", .string(environment.rawValue)), ("lane", .string(lane.rawValue)),
                     ("config_key", .string("apps[\(app)].\(environment.rawValue)_certificate")),
                     ("dead_lettered", .int(Int64(count))))
    }
}
