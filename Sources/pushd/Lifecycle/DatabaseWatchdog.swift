import Posix
import Metrics
import QueueStore
import Locking
import Synchronization

/// Whether the database has stopped answering, from the calls in flight: an event on each
/// change, for the watchdog to log. Pure: the calls, the last answer and the clock are given.
///
/// Stalled from when a call has waited longer than the limit; answering again when a call
/// comes back with its connection open after that and none in flight is over the limit.
struct DatabaseStallState {
    enum Event: Equatable {
        /// The longest call over the limit.
        case stalled(PGCall)
        /// How long the stall lasted, from the start of the call that showed it.
        case recovered(after: Duration)
    }

    let limit: Duration
    /// When the call that showed the stall started; nil while the database answers.
    private(set) var stalledSince: ContinuousClock.Instant?
    private var detectedAt: ContinuousClock.Instant?

    init(limit: Duration) {
        self.limit = limit
    }

    var isStalled: Bool { stalledSince != nil }

    mutating func observe(calls: [PGCall], lastAnswer: ContinuousClock.Instant?, now: ContinuousClock.Instant) -> Event? {
        let over = calls.filter { $0.waited > limit }.max { $0.waited < $1.waited }
        guard let since = stalledSince, let detectedAt else {
            guard let over else { return nil }
            stalledSince = now - over.waited
            detectedAt = now
            return .stalled(over)
        }
        guard over == nil, let lastAnswer, lastAnswer > detectedAt else { return nil }
        stalledSince = nil
        self.detectedAt = nil
        return .recovered(after: now - since)
    }
}

/// Watches every database call of the process (`PGCallWatch`) from a thread of its own, since
/// the threads that would notice are the ones blocked. A call over `database.stall_s`: one
/// error line naming the session and the wait, `pushd_database_stalled` 1, `/readyz` not
/// ready (through `onStall`), and the call's connection shut down, so that the call fails as
/// on a lost connection and its session reconnects (bounded by `connect_timeout`) instead of
/// waiting forever. A call answered after that: one info line, the gauge back to 0.
///
/// Thread rule: `state` is touched only by the watchdog thread; `stallDetail` is read by the
/// main loop under its lock.
final class DatabaseWatchdog: @unchecked Sendable {
    private let limitSeconds: Int
    private let metrics: PushdMetrics
    private let logger: Logger
    private let onStall: @Sendable (String) -> Void
    private var state: DatabaseStallState
    private let detail = Lock<String?>(nil)
    private let stopping = Atomic<Bool>(false)

    init(stallSeconds: Int, metrics: PushdMetrics, logger: Logger, onStall: @escaping @Sendable (String) -> Void) {
        limitSeconds = stallSeconds
        self.metrics = metrics
        self.logger = logger
        self.onStall = onStall
        state = DatabaseStallState(limit: .seconds(stallSeconds))
        metrics.databaseStalled.set(0)
        metrics.databaseCallSecondsMax.setValueSource {
            PGCallWatch.inFlight().first.map { Self.seconds($0.waited) } ?? 0
        }
    }

    /// What `/readyz` says while the database does not answer; nil while it does.
    var stallDetail: String? { detail.withLock { $0 } }

    var isStalled: Bool { stallDetail != nil }

    func start() {
        PosixThread.detach(name: "pushd-dbwatch") { [self] in
            while !stopping.load(ordering: .relaxed) {
                check()
                PosixThread.sleep(seconds: 0.25)
            }
        }
    }

    func stop() { stopping.store(true, ordering: .relaxed) }

    /// One look at the calls in flight.
    func check(now: ContinuousClock.Instant = .now) {
        let calls = PGCallWatch.inFlight(now: now)
        let event = state.observe(calls: calls, lastAnswer: PGCallWatch.lastAnswer, now: now)
        // Said before any call is ended: a health check whose call is ended here reads it.
        if case .stalled(let call)? = event { detail.withLock { $0 = stallText(call) } }
        // Every call over the limit is ended, also those of a stall already reported.
        let abandoned = PGCallWatch.abandon(waitingLongerThan: state.limit, now: now)
        switch event {
        case .stalled(let call)?:
            let others = abandoned.filter { $0.purpose != call.purpose }.map { "\($0.purpose) (\(Self.seconds($0.waited).fixed(1))s)" }
            let text = stallText(call)
            logger.error(text + "; abandoning its connection" + (others.isEmpty ? "" : " and those of \(others.joined(separator: ", "))")
                         + "; sessions reconnect, claimed work returns to the queue",
                         ("event", "database_stalled"), ("session", .string(call.purpose)),
                         ("waited_s", .double(Self.seconds(call.waited))), ("stall_s", .int(Int64(limitSeconds))))
            metrics.databaseStalled.set(1)
            onStall(text)
        case .recovered(let after)?:
            logger.info("database answering again after \(Self.seconds(after).fixed(1))s",
                        ("event", "database_recovered"), ("stalled_s", .double(Self.seconds(after))))
            metrics.databaseStalled.set(0)
            detail.withLock { $0 = nil }
        case nil:
            break
        }
    }

    private func stallText(_ call: PGCall) -> String {
        "database not answering: a call of \(call.purpose) has waited \(Self.seconds(call.waited).fixed(1))s (database.stall_s is \(limitSeconds))"
    }

    /// The calls in flight, for a log line: `pushd-jobs-0 (41.2s), pushd-stats (12.0s)`.
    static func describeInFlight() -> String {
        let calls = PGCallWatch.inFlight()
        return calls.isEmpty ? "none" : calls.map { "\($0.purpose) (\(seconds($0.waited).fixed(1))s)" }.joined(separator: ", ")
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}
