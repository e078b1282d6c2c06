import Dispatcher
import Metrics
import Locking

/// Reports, for one app, the answers and events after which a connection to APNs takes no
/// new stream: TooManyProviderTokenUpdates, ExpiredProviderToken, UnrelatedKeyIdInToken (the
/// engine sends the request again on a new connection; `TransferDisposition`), 503 Shutdown and GOAWAY,
/// and pushd's own: a client certificate replaced by a reload (counted only; the reload logs it).
/// Every one is counted (`pushd_apns_connection_retirements_total`); one event reaches many
/// requests at once (every stream on the connection), so each kind is logged once, and again
/// after a quiet minute with how many came meanwhile.
///
/// Thread rule: `observe` and `record` are called on the engine's threads; the log gate is
/// under a mutex.
final class ConnectionRetirementReporter: Sendable {
    enum Cause: String, CaseIterable, Sendable {
        case tooManyProviderTokenUpdates = "TooManyProviderTokenUpdates"
        case expiredProviderToken = "ExpiredProviderToken"
        case unrelatedKeyIdInToken = "UnrelatedKeyIdInToken"
        case shutdown = "Shutdown"
        case goaway = "GOAWAY"
        case refusedStream = "REFUSED_STREAM"
        case certificateReplaced = "CertificateReplaced"

        var explanation: String {
            switch self {
            case .tooManyProviderTokenUpdates: "APNs refused a provider token change within 20 minutes of the previous one"
            case .expiredProviderToken: "APNs called the provider token expired (over 60 minutes old)"
            case .unrelatedKeyIdInToken: "APNs refused a provider token whose key is not related to the key that signed the connection's first push (UnrelatedKeyIdInToken); the request is sent again on a new connection, and an answer of it there pauses the app"
            case .shutdown: "APNs is shutting the server down (503 Shutdown)"
            case .goaway: "APNs ended the connection with GOAWAY"
            case .refusedStream: "APNs refused streams sent on a new connection before its SETTINGS were read; libcurl closed that connection and resent them"
            case .certificateReplaced: "a reload replaced the app's client certificate; connections opened with the old one are closed once their streams are answered"
            }
        }
    }

    /// The cause an APNs answer reports, if it is one of them.
    static func cause(status: Int, reason: String?) -> Cause? {
        switch (status, reason) {
        case (429, Cause.tooManyProviderTokenUpdates.rawValue?): .tooManyProviderTokenUpdates
        case (403, Cause.expiredProviderToken.rawValue?): .expiredProviderToken
        case (403, Cause.unrelatedKeyIdInToken.rawValue?): .unrelatedKeyIdInToken
        case (503, Cause.shutdown.rawValue?): .shutdown
        default: nil
        }
    }

    private let app: String
    private let environment: String
    private let counters: [Cause: Counter]
    private let gate: Lock<LogGate<Cause>>
    private let logger: Logger
    private let clock: @Sendable () -> Double

    init(app: String, environment: String, metrics: PushdMetrics, logger: Logger, quietSeconds: Double = 60,
         clock: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        self.app = app
        self.environment = environment
        counters = Dictionary(uniqueKeysWithValues: Cause.allCases.map {
            ($0, metrics.connectionRetirement(app: app, environment: environment, reason: $0.rawValue))
        })
        gate = Lock(LogGate<Cause>(quietSeconds: quietSeconds))
        self.logger = logger
        self.clock = clock
    }

    /// Looks at every engine result; only the three error statuses are parsed further.
    func observe(_ result: DispatchResult) {
        guard let response = result.response, [429, 403, 503].contains(response.status),
              let cause = Self.cause(status: response.status, reason: response.reason) else { return }
        record(cause)
    }

    /// Counts `count` retirements without a log line, for events logged where they start.
    func count(_ cause: Cause, by count: Int) {
        if count > 0 { counters[cause]?.increment(by: UInt64(count)) }
    }

    func record(_ cause: Cause) {
        counters[cause]?.increment()
        guard let unlogged = gate.withLock({ $0.admit(cause, now: clock()) }) else { return }
        logger.warning("\(cause.explanation); the connection takes no new stream",
                       ("app", .string(app)), ("environment", .string(environment)), ("reason", .string(cause.rawValue)),
                       ("unlogged_since_last", .int(Int64(unlogged))))
    }
}
