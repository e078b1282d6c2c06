import Locking
import Metrics
import Posix

/// Reports what the metrics port refused or ended (`MetricsServer`'s `onRefusal`): each one
/// in `pushd_metrics_connections_refused_total{reason}`, and one warning line at most a
/// minute (the first at once) with how many of each reason since the previous line, so a
/// client holding the port is seen without a line per connection.
///
/// Called on the metrics server's pool and sweeper threads; the tallies sit under a lock.
final class EndpointRefusalLog: Sendable {
    static let interval = 60.0

    private let counters: [EndpointRefusal: Counter]
    private let logger: Logger
    private let state = Lock((counts: [EndpointRefusal: Int](), loggedAt: Timestamp.distantPast))

    init(metrics: PushdMetrics, logger: Logger) {
        // Bound at start-up, so each reason's series exists (at 0) before the first refusal.
        var counters = [EndpointRefusal: Counter]()
        for reason in EndpointRefusal.allCases { counters[reason] = metrics.metricsConnectionRefused(reason: reason.rawValue) }
        self.counters = counters
        self.logger = logger
    }

    func record(_ reason: EndpointRefusal, now: Timestamp = Timestamp()) {
        counters[reason]?.increment()
        let due: [EndpointRefusal: Int]? = state.withLock { state in
            state.counts[reason, default: 0] += 1
            guard now.timeIntervalSince(state.loggedAt) >= Self.interval else { return nil }
            let counts = state.counts
            state.counts = [:]
            state.loggedAt = now
            return counts
        }
        guard let due else { return }
        let total = due.values.reduce(0, +)
        let parts = EndpointRefusal.allCases.compactMap { reason in due[reason].map { "\(reason.rawValue) \($0)" } }
        logger.warning("metrics port: refused or ended \(total) connection(s) since the last such line (\(parts.joined(separator: ", "))): a client holds connections without finishing its requests or reading its answers, or one address opens too many; /healthz, /readyz and scrapes keep answering",
                       ("event", "metrics_connections_refused"), ("connections", .int(Int64(total))))
    }
}
