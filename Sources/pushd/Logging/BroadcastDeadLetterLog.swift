import Locking

/// The warning lines about dead-lettered broadcasts: one per app and reason a minute at most,
/// naming the first broadcast and carrying how many more came since the last line. A channel
/// APNs no longer knows, or a payload it refuses, dead-letters every broadcast to it; one line
/// each flooded the log. Every one is still counted (`pushd_dead_letters_total{lane="broadcast"}`)
/// and kept in `pushd.dead_jobs` with its reason.
///
/// Thread rule: every broadcast worker reports here; the gate is under its lock, and lines are
/// written after it is released.
final class BroadcastDeadLetterLog: Sendable {
    struct Key: Hashable, Sendable {
        var app: String
        /// The `reason` label of `pushd_dead_letters_total`.
        var reason: String
    }

    private let gate: Lock<LogGate<Key>>
    private let logger: Logger
    private let clock: @Sendable () -> Double

    init(logger: Logger, quietSeconds: Double = 60, clock: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        gate = Lock(LogGate<Key>(quietSeconds: quietSeconds))
        self.logger = logger
        self.clock = clock
    }

    /// Broadcast `id` to `channel` of `app` was dead-lettered for `reason` (`label`, the metric's reason).
    func deadLettered(id: Int64, channel: String, app: String, label: String, reason: String) {
        let now = clock()
        guard let before = gate.withLock({ $0.admit(Key(app: app, reason: label), now: now) }) else { return }
        logger.warning("broadcast \(id) to channel \(channel) of app \(app) dead-lettered: \(reason)"
                       + (before > 0 ? "; \(before) more broadcast(s) of app \(app) dead-lettered (\(label)) since the last such line" : ""),
                       ("event", "broadcast_dead_lettered"), ("app", .string(app)), ("reason", .string(label)),
                       ("broadcast", .int(id)), ("unlogged", .int(Int64(before))))
    }

    /// Writes the count of those not logged once their minute has passed with no line after
    /// them; broadcast workers call this on every turn of their loops.
    func flush() {
        let now = clock()
        let due = gate.withLock { $0.flush(now: now) }
        for (key, count) in due.sorted(by: { ($0.key.app, $0.key.reason) < ($1.key.app, $1.key.reason) }) {
            logger.warning("\(count) more broadcast(s) of app \(key.app) dead-lettered (\(key.reason)) since the last such line; see pushd.dead_jobs",
                           ("event", "broadcast_dead_lettered"), ("app", .string(key.app)), ("reason", .string(key.reason)),
                           ("unlogged", .int(Int64(count))))
        }
    }
}
