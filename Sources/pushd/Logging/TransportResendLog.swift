import Dispatcher
import Locking
import Metrics

/// Requests of one app, environment and lane that the transport left unanswered after they
/// went on a connection, and that were sent again (`TransportResend`): each is counted in
/// `pushd_apns_requests_resent_total{reason}`, and each reason logged at once with libcurl's
/// words (the HTTP/2 error code of a reset stream) and the host, then again after a quiet
/// minute with how many came meanwhile. A server resetting every stream was resent against
/// in silence before.
///
/// Thread rule: `record` is called on the engine's threads; the log gate is under a mutex.
final class TransportResendLog: Sendable {
    /// The `reason` of an answer that asked for another connection (UnrelatedKeyIdInToken):
    /// the request is sent again, but the transport lost nothing.
    static let newConnectionAsked = "new_connection_asked"

    private let counters: [String: Counter]
    private let gate: Lock<LogGate<TransportResend.Reason>>
    private let logger: Logger?
    private let label: String
    private let clock: @Sendable () -> Double

    init(app: String, environment: String, label: String, metrics: PushdMetrics, logger: Logger?, quietSeconds: Double = 60,
         clock: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        // Bound now, so each reason's series exists (at 0) before the first resend.
        counters = Dictionary(uniqueKeysWithValues: (TransportResend.Reason.allCases.map(\.rawValue) + [Self.newConnectionAsked]).map {
            ($0, metrics.requestsResent(app: app, environment: environment, reason: $0))
        })
        gate = Lock(LogGate(quietSeconds: quietSeconds))
        self.logger = logger
        self.label = label
        self.clock = clock
    }

    func record(_ resend: TransportResend) {
        counters[resend.reason.rawValue]?.increment()
        guard let logger, let unlogged = gate.withLock({ $0.admit(resend.reason, now: clock()) }) else { return }
        let what = switch resend.reason {
        case .streamReset: "APNs (\(resend.host)) reset the stream of a notification of \(label) instead of answering"
        case .connectionLost: "a connection to APNs (\(resend.host)) of \(label) ended with a notification on it unanswered"
        case .movedByLibcurl: "a connection to APNs (\(resend.host)) of \(label) refused a notification's stream or ended before answering it"
        }
        logger.warning("\(what) (\(resend.detail)); it is sent again"
                       + (unlogged > 0 ? "; \(unlogged) more resent for this reason since the last such line" : ""),
                       ("event", "apns_request_resent"), ("reason", .string(resend.reason.rawValue)), ("host", .string(resend.host)),
                       ("detail", .string(resend.detail)), ("unlogged", .int(Int64(unlogged))))
    }

    func recordNewConnectionAsked() {
        counters[Self.newConnectionAsked]?.increment()
    }
}
