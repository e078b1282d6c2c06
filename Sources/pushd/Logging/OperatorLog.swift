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

    /// APNs's 429 TooManyRequests is about one device token (too many notifications to the same
    /// device), and each one waits out its backoff quietly. When most of a lane's answers are
    /// 429 for a whole window, APNs is throttling the provider, not a few devices, and nothing
    /// gets through: the lane counts as throttled when over one window of this many seconds at
    /// least `throttledAnswersAtLeast` answers were 429 and they were at least half of its answers.
    static let throttleWindowSeconds = 10.0
    static let throttledAnswersAtLeast = 20
    /// A throttled lane is over after a window in which under a tenth of its answers were 429,
    /// or after this many seconds with no answer at all (its work gone, or all of it waiting).
    static let throttleEndsAfterSilentSeconds = 60.0

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

    /// Answers and 429s of one lane over the current window, while some came as 429 lately.
    private struct Throttling {
        var windowStart: Double
        var answers = 0
        var tooManyRequests = 0
        var lastAnswer: Double
        /// Since when the lane counts as throttled (the warning was written), nil while it does not.
        var since: Timestamp?
        /// The 429s and answers of the window that made it throttled, or of the last one.
        var lastShare = (tooManyRequests: 0, answers: 0)
        /// The first answer other than 429 since the last 429, while throttled.
        var clearSince: Double?
    }

    private struct State {
        var trouble: [Lane: Trouble] = [:]
        var throttling: [Lane: Throttling] = [:]
        /// No look at `throttling` from `tick` before this (monotonic seconds).
        var throttlingSettleDue = -Double.infinity
        var connectionErrors = 0
        var retries: [String: Int] = [:]
        /// APNs server errors (5xx) answered outside a declared outage, by reason.
        var serverErrors: [String: Int] = [:]
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

    /// Whether `app`'s last send to `environment` on `lane` failed (no answer, a 5xx, handed back
    /// unsent) with no answer since: an outage called (`isDown`), or one that may be starting,
    /// its failures not yet `failuresBeforeDown` over `failingSecondsBeforeDown`.
    func isFailing(app: String, environment: String, lane: String) -> Bool {
        state.withLock { state in
            guard !state.trouble.isEmpty, let trouble = state.trouble[Lane(app: app, environment: environment, lane: lane)] else { return false }
            return trouble.answeringSince == nil
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
        // 429 TooManyProviderTokenUpdates is about the connection's token, not throttling.
        let tooManyRequests: Bool? = if case .response(let response) = outcome {
            response.status == 429 && (response.reason == nil || response.reason == .tooManyRequests)
        } else { nil }
        var throttleLine: ThrottleLine?
        let line: (message: String, fields: [(String, LogValue)], down: Bool)? = state.withLock { state in
            if case .transportFailure = outcome { state.connectionErrors += 1 }
            // Nothing to hash while no 429 came lately, the common case; then only the lanes
            // that had one are counted (a lookup for the others).
            if let tooManyRequests, tooManyRequests || (!state.throttling.isEmpty && state.throttling[key] != nil) {
                throttleLine = countAnswer(&state, key, tooManyRequests: tooManyRequests, now: clock())
            }
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
            let down = trouble.reported || (trouble.failures >= Self.failuresBeforeDown && now - trouble.firstFailure >= Self.failingSecondsBeforeDown)
            // A 5xx among answers that go through is said in the summary (`tick`); one of an
            // outage has its own lines, and what it holds is not retried after a backoff.
            if !down, case .response = outcome { state.serverErrors[outcome.label, default: 0] += 1 }
            guard !trouble.reported, down else { return nil }
            trouble.reported = true
            return ("APNs (\(environment)) is not taking notifications of app \(app) on the \(lane) lane: \(failure); they are kept and retried",
                    [("app", .string(app)), ("environment", .string(environment)), ("lane", .string(lane)), ("error", .string(failure)),
                     ("event", "apns_down")], true)
        }
        if let line { write(line, key) }
        if let throttleLine { write(throttleLine) }
        tick()
    }

    private struct ThrottleLine {
        var key: Lane
        var message: String
        var fields: [(String, LogValue)]
        var throttled: Bool
    }

    /// The lanes APNs answers mostly 429 TooManyRequests on now, with what the window that made
    /// them so measured, by app, environment and lane.
    func throttledLanes() -> [(app: String, environment: String, lane: String, error: String)] {
        state.withLock { state in
            state.throttling.filter { $0.value.since != nil }.map { entry in
                (app: entry.key.app, environment: entry.key.environment, lane: entry.key.lane,
                 error: Self.throttleError(entry.value.lastShare))
            }
        }.sorted { ($0.app, $0.environment, $0.lane) < ($1.app, $1.environment, $1.lane) }
    }

    private static func throttleError(_ share: (tooManyRequests: Int, answers: Int)) -> String {
        "HTTP 429 TooManyRequests to \(share.tooManyRequests) of \(share.answers) answers in \(Int(throttleWindowSeconds)) s: APNs is throttling the provider, not single devices"
    }

    /// Counts one answer of `key` (a 429 or not), and judges the window when it is over.
    private func countAnswer(_ state: inout State, _ key: Lane, tooManyRequests: Bool, now: Double) -> ThrottleLine? {
        var entry = state.throttling[key] ?? Throttling(windowStart: now, lastAnswer: now)
        var line: ThrottleLine?
        if entry.windowStart + Self.throttleWindowSeconds <= now {
            let hadTooMany = entry.tooManyRequests > 0
            line = judge(&entry, key, now: now)
            // A lane not throttled whose last window had no 429 is forgotten, so that answers
            // hash nothing again.
            if entry.since == nil, !hadTooMany, !tooManyRequests {
                state.throttling.removeValue(forKey: key)
                return line
            }
        }
        entry.answers += 1
        entry.lastAnswer = now
        if tooManyRequests {
            entry.tooManyRequests += 1
            entry.clearSince = nil
        } else if entry.since != nil {
            entry.clearSince = entry.clearSince ?? now
            if line == nil { line = endIfClear(&entry, key, now: now) }
        }
        state.throttling[key] = entry
        return line
    }

    /// Judges `entry`'s window, which is over at `now`, and starts the next one.
    private func judge(_ entry: inout Throttling, _ key: Lane, now: Double) -> ThrottleLine? {
        defer {
            entry.windowStart = now
            entry.answers = 0
            entry.tooManyRequests = 0
        }
        guard entry.since != nil else {
            guard entry.tooManyRequests >= Self.throttledAnswersAtLeast, entry.tooManyRequests * 2 >= entry.answers else { return nil }
            entry.since = Timestamp()
            entry.clearSince = nil
            entry.lastShare = (entry.tooManyRequests, entry.answers)
            return ThrottleLine(key: key, message: "APNs (\(key.environment)) answered 429 TooManyRequests to \(entry.tooManyRequests) of \(entry.answers) notifications of "
                                + "app \(key.app) on the \(key.lane) lane in the last \(Int(Self.throttleWindowSeconds)) s: it is throttling this provider, not single devices "
                                + "(Apple's 429 is about one device token); they are kept and each is retried after its backoff, so little gets through until APNs "
                                + "takes them again: lower the sending rate (a campaign's rate cap) or spread the work",
                                fields: fields(key, entry) + [("event", "apns_throttling")], throttled: true)
        }
        if entry.answers == 0 {
            guard now - entry.lastAnswer >= Self.throttleEndsAfterSilentSeconds else { return nil }
            return end(&entry, key, "no notification was answered for \(Int(now - entry.lastAnswer)) s", now: now)
        }
        entry.lastShare = (entry.tooManyRequests, entry.answers)
        guard entry.tooManyRequests * 10 < entry.answers else { return nil }
        return end(&entry, key, "\(entry.tooManyRequests) of \(entry.answers) answers in the last \(Int(Self.throttleWindowSeconds)) s were 429", now: now)
    }

    /// Ends the throttling of `entry` once answers other than 429 have come for
    /// `answeringSecondsBeforeBack` with no 429 among them.
    private func endIfClear(_ entry: inout Throttling, _ key: Lane, now: Double) -> ThrottleLine? {
        guard entry.since != nil, let clear = entry.clearSince, now - clear >= Self.answeringSecondsBeforeBack else { return nil }
        return end(&entry, key, "its answers have had no 429 for \((now - clear).fixed(1)) s", now: now)
    }

    /// Ends the throttling and starts a fresh window: the 429s of the one it ended in are not
    /// judged again (they would begin it anew with none since).
    private func end(_ entry: inout Throttling, _ key: Lane, _ why: String, now: Double) -> ThrottleLine {
        let seconds = entry.since.map { Int(Timestamp().timeIntervalSince($0)) } ?? 0
        entry.since = nil
        entry.clearSince = nil
        defer {
            entry.windowStart = now
            entry.answers = 0
            entry.tooManyRequests = 0
        }
        return ThrottleLine(key: key, message: "APNs (\(key.environment)) no longer throttles app \(key.app) on the \(key.lane) lane after \(seconds) s: \(why)",
                            fields: fields(key, entry) + [("seconds", .int(Int64(seconds))), ("event", "apns_throttling_over")], throttled: false)
    }

    private func fields(_ key: Lane, _ entry: Throttling) -> [(String, LogValue)] {
        [("app", .string(key.app)), ("environment", .string(key.environment)), ("lane", .string(key.lane)),
         ("too_many_requests", .int(Int64(entry.tooManyRequests))), ("answers", .int(Int64(entry.answers)))]
    }

    /// Judges the windows that ended with no answer since (`tick`), ends the throttling of
    /// lanes whose answers have been clear long enough, and forgets the lanes with no 429 in
    /// their last window.
    private func settleThrottling(now: Double) -> [ThrottleLine] {
        state.withLock { state in
            guard !state.throttling.isEmpty, now >= state.throttlingSettleDue else { return [] }
            state.throttlingSettleDue = now + Self.throttleSettleSeconds
            var lines: [ThrottleLine] = []
            var changed: [(Lane, Throttling?)] = []
            for (key, entry) in state.throttling {
                var entry = entry
                let line = endIfClear(&entry, key, now: now)
                if let line { lines.append(line) }
                guard entry.windowStart + Self.throttleWindowSeconds <= now else {
                    if line != nil { changed.append((key, entry)) }
                    continue
                }
                let hadTooMany = entry.tooManyRequests > 0
                if let line = judge(&entry, key, now: now) { lines.append(line) }
                changed.append((key, entry.since == nil && !hadTooMany ? nil : entry))
            }
            for (key, entry) in changed { state.throttling[key] = entry }
            return lines
        }
    }

    /// How often the workers' ticks look at the throttled lanes' windows at most.
    static let throttleSettleSeconds = 0.1

    private func write(_ line: ThrottleLine) {
        metrics?.apnsThrottled(app: line.key.app, environment: line.key.environment, lane: line.key.lane).set(line.throttled ? 1 : 0)
        logger.write(line.throttled ? .warning : .notice, line.message, fields: line.fields)
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

    /// A notification goes again after `outcome`: counted by its reason.
    func retried(_ outcome: SendOutcome) {
        let reason = outcome.label
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
        for line in settleThrottling(now: now) { write(line) }
        let summary: (Int, [String: Int], [String: Int], [String: Int])? = state.withLock { state in
            guard now >= state.summaryDue else { return nil }
            state.summaryDue = now + summaryInterval
            defer {
                state.connectionErrors = 0
                state.retries.removeAll()
                state.serverErrors.removeAll()
                state.deadLetters.removeAll()
            }
            if state.connectionErrors == 0 && state.retries.isEmpty && state.serverErrors.isEmpty && state.deadLetters.isEmpty { return nil }
            return (state.connectionErrors, state.retries, state.serverErrors, state.deadLetters)
        }
        guard let (connectionErrors, retries, serverErrors, deadLetters) = summary else { return }
        func text(_ counts: [String: Int]) -> String {
            counts.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
        }
        let retryTotal = retries.values.reduce(0, +)
        let deadTotal = deadLetters.values.reduce(0, +)
        // APNs failing part of the notifications (a 5xx among its answers, too few in a row for
        // an outage) and notifications dropped for good are failures: the line is a warning
        // that says so first, once per interval while they last.
        let serverErrorTotal = serverErrors.values.reduce(0, +)
        var failures: [String] = []
        if serverErrorTotal > 0 {
            failures.append("APNs answered a server error (5xx) to \(serverErrorTotal) sends (\(text(serverErrors))), retried after a backoff unless given up")
        }
        if deadTotal > 0 {
            failures.append("\(deadTotal) notifications given up for good (\(text(deadLetters)))")
        }
        let counts = "\(connectionErrors) sends without an answer, \(retryTotal) retries, \(deadTotal) dead letters"
        let message = failures.isEmpty ? "in the last \(Int(summaryInterval)) s: \(counts)"
            : "in the last \(Int(summaryInterval)) s: \(failures.joined(separator: "; ")); in all \(counts)"
        logger.write(failures.isEmpty ? .info : .warning, message,
                     fields: [("event", "summary"), ("connection_errors", .int(Int64(connectionErrors))),
                              ("retries", .int(Int64(retryTotal))), ("retries_by_reason", .string(text(retries))),
                              ("server_errors", .int(Int64(serverErrorTotal))),
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
