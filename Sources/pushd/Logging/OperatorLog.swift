import APNs
import Metrics
import Posix
import Locking

/// What an operator reads in the log: one line per change of state, never one per
/// notification. APNs stops taking an app's notifications to one environment on a lane and
/// takes them again (with the error; `pushd_apns_unavailable` is 1 meanwhile, and `/readyz` and
/// `pushd status` name the app and the environment), a summary per interval of connection
/// errors, retries and dead letters by reason (only when there was any), campaigns starting,
/// pausing and finishing.
///
/// Thread rule: every worker thread reports here; state changes under the mutex, and lines
/// are written after it is released.
final class OperatorLog: Sendable {
    /// Consecutive failed sends (no answer, or 5xx) before a lane counts as cut off from APNs:
    /// one lost stream is not an outage.
    static let failuresBeforeDown = 3
    /// ... and for this long without an answer between them. At thousands of answers a second
    /// a few 5xx answers in a row come by chance (a 1 % error rate makes three in a row about
    /// once a minute at 20,000 answers/s): an outage is APNs answering nothing for a while, not
    /// a short run of errors among its answers.
    static let failingSecondsBeforeDown = 1.0
    /// A lane in an outage is back only after answers came this long without a failure: an
    /// APNs failing and answering by turns is one outage, not a pair of lines per turn.
    static let answeringSecondsBeforeBack = 1.0

    /// Apple's production and sandbox hosts are separate services that fail apart: each
    /// environment of an app has an outage state of its own on each lane, so that a sandbox
    /// outage neither hides behind production's answers nor reports production down.
    private struct Lane: Hashable {
        var app: String
        var environment: String
        var lane: String
    }

    /// An app's environment APNs takes none of the notifications of on a lane.
    struct Target: Hashable, Comparable, Sendable {
        var app: String
        var environment: String

        static func < (lhs: Self, rhs: Self) -> Bool { (lhs.app, lhs.environment) < (rhs.app, rhs.environment) }
    }

    private struct Trouble {
        var since: Timestamp
        /// Monotonic seconds of the first failure of this run.
        var firstFailure: Double
        var error: String
        var failures: Int
        var reported: Bool
        /// The first answer since the last failure, while the outage is reported.
        var answeringSince: Double?
    }

    private struct State {
        var trouble: [Lane: Trouble] = [:]
        var connectionErrors = 0
        var retries: [String: Int] = [:]
        var deadLetters: [String: Int] = [:]
        var summaryDue: Double
        var campaignEvents = Set<String>()
        /// Lanes that came back since a worker last took them (`takeAppsBack`).
        var back = Set<Lane>()
    }

    private let logger: Logger
    private let summaryInterval: Double
    private let state: Lock<State>
    private let metrics: PushdMetrics?
    private let clock: @Sendable () -> Double

    init(logger: Logger, summaryInterval: Double, metrics: PushdMetrics? = nil,
         clock: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        self.logger = logger
        self.summaryInterval = summaryInterval
        self.metrics = metrics
        self.clock = clock
        state = Lock(State(summaryDue: clock() + summaryInterval))
    }

    /// The lanes APNs takes no notifications on now, with their last error, by app,
    /// environment and lane.
    func outages() -> [(app: String, environment: String, lane: String, error: String)] {
        state.withLock { state in
            state.trouble.filter { $0.value.reported }
                .map { (app: $0.key.app, environment: $0.key.environment, lane: $0.key.lane, error: $0.value.error) }
        }.sorted { ($0.app, $0.environment, $0.lane) < ($1.app, $1.environment, $1.lane) }
    }

    /// The apps and environments APNs takes no notifications of on `lane` now, sorted; no
    /// allocation when nothing is in trouble.
    func appsDown(lane: String) -> [Target] {
        let down: [Target] = state.withLock { state in
            guard !state.trouble.isEmpty else { return [] }
            return state.trouble.compactMap { $0.value.reported && $0.key.lane == lane ? Target(app: $0.key.app, environment: $0.key.environment) : nil }
        }
        return down.count > 1 ? down.sorted() : down
    }

    /// Whether APNs takes none of `app`'s notifications to `environment` on `lane` now: an
    /// outage reported and no answer since its last failure. Once APNs answers again the outage
    /// is not over (`answeringSecondsBeforeBack`), but sending resumes, so that answers can show
    /// it. No hashing while nothing is in trouble.
    func isDown(app: String, environment: String, lane: String) -> Bool {
        state.withLock { state in
            guard !state.trouble.isEmpty, let trouble = state.trouble[Lane(app: app, environment: environment, lane: lane)] else { return false }
            return trouble.reported && trouble.answeringSince == nil
        }
    }

    /// Whether some outage reported on `lane` has had an answer since its last failure: its
    /// probe is then sent again soon (`OutageProbe`), so that the second answer that ends it
    /// comes in about `answeringSecondsBeforeBack`, not a whole probe interval later.
    func isAnswering(lane: String) -> Bool {
        state.withLock { state in
            guard !state.trouble.isEmpty else { return false }
            return state.trouble.contains { $0.key.lane == lane && $0.value.reported && $0.value.answeringSince != nil }
        }
    }

    /// One send's outcome on `lane` of `app` to `environment` (the host it went to, `production`
    /// or `sandbox`): answers from a working APNs (any status but 5xx) clear a trouble of that
    /// environment only; no answer or a 5xx count towards one.
    func record(_ outcome: SendOutcome, app: String, environment: String, lane: String) {
        let key = Lane(app: app, environment: environment, lane: lane)
        let failure: String?
        switch outcome {
        case .transportFailure(let message): failure = "no answer: \(message)"
        case .notSent(let message): failure = message
        case .response(let response) where response.status >= 500:
            failure = "HTTP \(response.status)" + (response.reason.map { " \($0.rawValue)" } ?? "")
        case .response: failure = nil
        // A certificate TLS refused pauses the app, which says so in its own line.
        case .tlsRefused: return
        }
        let line: (message: String, fields: [(String, LogValue)], down: Bool)? = state.withLock { state in
            if case .transportFailure = outcome { state.connectionErrors += 1 }
            guard let failure else {
                // The common case, every answer of a working APNs: nothing to clear, no key to hash.
                guard !state.trouble.isEmpty, var trouble = state.trouble[key] else { return nil }
                guard trouble.reported else {
                    // Fewer failures in a row than an outage takes: an answer clears them.
                    state.trouble.removeValue(forKey: key)
                    return nil
                }
                let now = clock()
                guard let since = trouble.answeringSince else {
                    trouble.answeringSince = now
                    state.trouble[key] = trouble
                    return nil
                }
                guard now - since >= Self.answeringSecondsBeforeBack else { return nil }
                state.trouble.removeValue(forKey: key)
                state.back.insert(key)
                return backLine(key, trouble)
            }
            let now = clock()
            var trouble = state.trouble[key] ?? Trouble(since: Timestamp(), firstFailure: now, error: failure, failures: 0, reported: false)
            trouble.failures += 1
            trouble.error = failure
            trouble.answeringSince = nil
            defer { state.trouble[key] = trouble }
            guard !trouble.reported, trouble.failures >= Self.failuresBeforeDown,
                  now - trouble.firstFailure >= Self.failingSecondsBeforeDown else { return nil }
            trouble.reported = true
            return ("APNs (\(environment)) is not taking notifications of app \(app) on the \(lane) lane: \(failure); they are kept and retried",
                    [("app", .string(app)), ("environment", .string(environment)), ("lane", .string(lane)), ("error", .string(failure)),
                     ("event", "apns_down")], true)
        }
        if let line { write(line, key) }
        tick()
    }

    private func backLine(_ key: Lane, _ trouble: Trouble) -> (message: String, fields: [(String, LogValue)], down: Bool) {
        let seconds = Int(Timestamp().timeIntervalSince(trouble.since))
        return ("APNs (\(key.environment)) takes notifications of app \(key.app) on the \(key.lane) lane again after \(seconds) s",
                [("app", .string(key.app)), ("environment", .string(key.environment)), ("lane", .string(key.lane)), ("seconds", .int(Int64(seconds))),
                 ("failed_sends", .int(Int64(trouble.failures))), ("event", "apns_back")], false)
    }

    private func write(_ line: (message: String, fields: [(String, LogValue)], down: Bool), _ key: Lane) {
        metrics?.apnsUnavailable(app: key.app, environment: key.environment, lane: key.lane).set(line.down ? 1 : 0)
        logger.write(line.down ? .warning : .notice, line.message, fields: line.fields)
    }

    /// Lanes whose answers have come for long enough with no send since are back: a lane
    /// that had its last answers in its second of proof is not left in an outage.
    private func settleQuietLanes(now: Double) {
        let back: [(Lane, Trouble)] = state.withLock { state in
            guard !state.trouble.isEmpty else { return [] }
            let due = state.trouble.filter { entry in
                entry.value.reported && entry.value.answeringSince.map { now - $0 >= Self.answeringSecondsBeforeBack } == true
            }
            for (key, _) in due {
                state.trouble.removeValue(forKey: key)
                state.back.insert(key)
            }
            return due.map { ($0.key, $0.value) }
        }
        for (key, trouble) in back { write(backLine(key, trouble), key) }
    }

    /// The apps and environments whose `lane` came back from an outage since the last call,
    /// once each: the caller makes the notifications of that environment that waited the
    /// outage out due (`JobQueue.makeDue`).
    func takeAppsBack(lane: String) -> [Target] {
        state.withLock { state in
            guard !state.back.isEmpty else { return [] }
            let back = state.back.filter { $0.lane == lane }
            state.back.subtract(back)
            return back.map { Target(app: $0.app, environment: $0.environment) }.sorted()
        }
    }

    /// Gives back what `takeAppsBack` returned whose notifications could not be made due (a
    /// database error), so that the next call returns them again.
    func returnAppsBack(_ targets: [Target], lane: String) {
        state.withLock { state in
            for target in targets { state.back.insert(Lane(app: target.app, environment: target.environment, lane: lane)) }
        }
    }

    func retried(reason: String) {
        state.withLock { $0.retries[reason, default: 0] += 1 }
    }

    func deadLettered(reason: String) {
        state.withLock { $0.deadLetters[reason, default: 0] += 1 }
    }

    /// Writes the summary when its interval has passed and something happened in it.
    /// Workers call this on every turn of their loops.
    func tick(now: Double? = nil) {
        let now = now ?? clock()
        settleQuietLanes(now: now)
        let summary: (Int, [String: Int], [String: Int])? = state.withLock { state in
            guard now >= state.summaryDue else { return nil }
            state.summaryDue = now + summaryInterval
            defer {
                state.connectionErrors = 0
                state.retries.removeAll()
                state.deadLetters.removeAll()
            }
            if state.connectionErrors == 0 && state.retries.isEmpty && state.deadLetters.isEmpty { return nil }
            return (state.connectionErrors, state.retries, state.deadLetters)
        }
        guard let (connectionErrors, retries, deadLetters) = summary else { return }
        func text(_ counts: [String: Int]) -> String {
            counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        }
        let retryTotal = retries.values.reduce(0, +)
        let deadTotal = deadLetters.values.reduce(0, +)
        logger.write(.info, "in the last \(Int(summaryInterval)) s: \(connectionErrors) sends without an answer, \(retryTotal) retries, \(deadTotal) dead letters",
                     fields: [("event", "summary"), ("connection_errors", .int(Int64(connectionErrors))),
                              ("retries", .int(Int64(retryTotal))), ("retries_by_reason", .string(text(retries))),
                              ("dead_letters", .int(Int64(deadTotal))), ("dead_letters_by_reason", .string(text(deadLetters)))])
    }

    /// A campaign changed state; `once` lines are written once per campaign and event by this
    /// process (every worker sees a pause at its next checkpoint).
    func campaign(_ id: Int64, _ event: String, _ message: String, _ fields: [(String, LogValue)] = [], once: Bool = true) {
        if once {
            let fresh = state.withLock { $0.campaignEvents.insert("\(id)/\(event)").inserted }
            guard fresh else { return }
        }
        logger.write(.info, message, fields: [("event", .string("campaign_\(event)")), ("campaign", .int(id))] + fields)
    }

    /// A worker is sending `id` again: a later pause is news again.
    func campaignSending(_ id: Int64) {
        state.withLock { state in
            if !state.campaignEvents.isEmpty { state.campaignEvents.remove("\(id)/paused") }
        }
    }
}
