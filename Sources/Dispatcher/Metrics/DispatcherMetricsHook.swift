import APNs

/// What the engine reports for the metrics catalog. Called on event-loop threads: keep each
/// method to a relaxed atomic update. Every method has a no-op default.
public protocol DispatcherMetricsHook: Sendable {
    /// A request finished with an HTTP answer (`status`) or a transport failure (`status` 0).
    func requestCompleted(status: Int, latencyNanoseconds: UInt64)
    /// Requests inside libcurl (in-flight streams or waiting for one) changed by `delta`.
    func inFlightChanged(by delta: Int)
    /// A connection to the server was established (TCP, the proxy tunnel and TLS: a request
    /// went on it); `reconnect` when it replaces one. A connect or handshake that failed
    /// establishes nothing: it is reported by `connectionFailed` (`.connect`, `.tls`) only.
    func connectionOpened(reconnect: Bool)
    /// A connection reported by `connectionOpened` closed.
    func connectionClosed()
    /// A connection could not be opened, or ended other than on the engine's own terms.
    /// `.reset` is reported once per batch of streams a dropped connection left unanswered,
    /// so it approximates lost connections.
    func connectionFailed(_ reason: ConnectionFailureReason)
    /// A request left unanswered by the transport (GOAWAY, refused stream, lost connection)
    /// was sent again, by the engine or by libcurl itself.
    func requestRetried()
    /// `requestRetried()` with why and libcurl's words (`TransportResend`); the engine calls
    /// this one, only for a request that went on a connection, and its default calls
    /// `requestRetried()`.
    func requestResent(_ resend: TransportResend)
    /// A response asked for a fresh connection (503, IdleTimeout, ExpiredProviderToken, …).
    func connectionReplacementRequested()
    /// A request answered `status` with `reason` (UnrelatedKeyIdInToken) was sent again by the
    /// engine on another connection; the caller never sees that answer.
    func requestResent(afterAnswer status: Int, reason: APNsReason?)
    /// A loop now lets libcurl hold `connections` connections: grown by one because requests
    /// waited for a stream, or lowered after connections closed.
    func connectionLimitChanged(to connections: Int)
    /// A loop added a connection because requests waited for a stream, and put it on trial
    /// (`connectionGrowthJudgedOverMilliseconds` > 0). Exactly one `connectionGrowthJudged`
    /// follows for it, as long as the engine runs (its shutdown included).
    func connectionGrowthStarted(_ start: ConnectionGrowthStart)
    /// A connection a loop added because requests waited for a stream was judged
    /// (`connectionGrowthJudgedOverMilliseconds`): kept because the answer rate rose with it,
    /// given up (growth held off) because it did not, or abandoned unjudged (`abandoned` says
    /// why). One per `connectionGrowthStarted`.
    func connectionGrowthJudged(_ verdict: ConnectionGrowthVerdict)
    /// A loop's limit on requests inside libcurl changed by `delta`: summed over the loops, the
    /// engine's limit (`adaptiveInFlight`, or connections × streams).
    func inFlightLimitChanged(by delta: Int)
    /// An event loop's connection failed (`cause`) after none had: it opens no connection for
    /// `delayMilliseconds`, and longer after each further failure, until answers come again.
    /// Called once per run of failures, not per attempt.
    func reconnectBackoffStarted(cause: String, delayMilliseconds: Int)
    /// `reconnectBackoffStarted(cause:delayMilliseconds:)` with what the engine knows of the
    /// failure beyond its text (`ConnectionFailureCause`); the engine calls this one, and its
    /// default calls the text-only one.
    func reconnectBackoffStarted(_ cause: ConnectionFailureCause, delayMilliseconds: Int)
    /// The run of failed connections announced by `reconnectBackoffStarted` ended after `failures`.
    func reconnectBackoffEnded(failures: Int)
    /// A loop's adaptive limit settled, or moved to half or twice the one last reported:
    /// `limit` requests gave `rate` answers per second at a mean round trip of `roundTripNanoseconds`.
    func inFlightLimitSettled(limit: Int, rate: Double, roundTripNanoseconds: UInt64)
    /// A loop took a replaced client certificate (`HTTP2Dispatcher.replaceCertificate`) and
    /// retired the `connectionsRetired` connections it had opened with the old one.
    func certificateReplaced(connectionsRetired: Int)
}

extension DispatcherMetricsHook {
    public func requestCompleted(status: Int, latencyNanoseconds: UInt64) {}
    public func inFlightChanged(by delta: Int) {}
    public func connectionOpened(reconnect: Bool) {}
    public func connectionClosed() {}
    public func connectionFailed(_ reason: ConnectionFailureReason) {}
    public func requestRetried() {}
    public func requestResent(_ resend: TransportResend) { requestRetried() }
    public func connectionReplacementRequested() {}
    public func requestResent(afterAnswer status: Int, reason: APNsReason?) {}
    public func connectionLimitChanged(to connections: Int) {}
    public func connectionGrowthStarted(_ start: ConnectionGrowthStart) {}
    public func connectionGrowthJudged(_ verdict: ConnectionGrowthVerdict) {}
    public func inFlightLimitChanged(by delta: Int) {}
    public func inFlightLimitSettled(limit: Int, rate: Double, roundTripNanoseconds: UInt64) {}
    public func reconnectBackoffStarted(cause: String, delayMilliseconds: Int) {}
    public func reconnectBackoffStarted(_ cause: ConnectionFailureCause, delayMilliseconds: Int) {
        reconnectBackoffStarted(cause: cause.text, delayMilliseconds: delayMilliseconds)
    }
    public func reconnectBackoffEnded(failures: Int) {}
    public func certificateReplaced(connectionsRetired: Int) {}
}

/// A connection a loop added and put on trial (`DispatcherMetricsHook.connectionGrowthStarted`).
public struct ConnectionGrowthStart: Sendable, Equatable {
    /// Connections the loop let libcurl hold before, and with the one added.
    public var connectionsBefore: Int
    public var connections: Int
    /// Requests in the loop's queue waiting for a stream, and how long requests had waited
    /// without a break.
    public var requestsWaiting: Int
    public var waitedMilliseconds: Int
    /// Answers per second over the last window in which requests waited throughout: what the
    /// connection is judged against.
    public var ratePerSecondBefore: Double
    /// Streams the connection carries until its first step raised the rate.
    public var streamsOnTrial: Int

    public init(connectionsBefore: Int, connections: Int, requestsWaiting: Int, waitedMilliseconds: Int,
                ratePerSecondBefore: Double, streamsOnTrial: Int) {
        self.connectionsBefore = connectionsBefore
        self.connections = connections
        self.requestsWaiting = requestsWaiting
        self.waitedMilliseconds = waitedMilliseconds
        self.ratePerSecondBefore = ratePerSecondBefore
        self.streamsOnTrial = streamsOnTrial
    }
}

/// Why a trial ended before it could be judged.
public enum ConnectionGrowthAbandonment: String, Sendable, CaseIterable {
    /// A connection closed and the limit fell to what is open (libcurl let an idle one go, or
    /// one was lost): what the trial measured no longer matches the connections.
    case connectionClosed = "connection_closed"
    /// The loop had nothing in flight and nothing queued for the growth delay: no answers come
    /// to judge it by (a drain ended, or the loop's share of it).
    case workRanOut = "work_ran_out"
    /// The engine shut down.
    case stopped
}

/// How a connection added by growth was judged (`DispatcherMetricsHook.connectionGrowthJudged`).
public struct ConnectionGrowthVerdict: Sendable, Equatable {
    /// The connection stayed; false: the loop went back to the connections before it.
    public var kept: Bool
    /// Set when the trial ended unjudged: why. It holds no growth off.
    public var abandoned: ConnectionGrowthAbandonment?
    /// Connections the loop holds (lets libcurl hold) after the verdict.
    public var connections: Int
    /// Answers per second with requests waiting before the connection was added, and over the
    /// window measured after it answered.
    public var ratePerSecondBefore: Double
    public var ratePerSecondAfter: Double
    /// What the rate had to reach for the connection to be kept.
    public var ratePerSecondRequired: Double
    /// When given up: no connection is added for this long (0 when kept).
    public var growthHeldOffMilliseconds: Int

    public init(kept: Bool, abandoned: ConnectionGrowthAbandonment? = nil, connections: Int, ratePerSecondBefore: Double,
                ratePerSecondAfter: Double, ratePerSecondRequired: Double, growthHeldOffMilliseconds: Int) {
        self.kept = kept
        self.abandoned = abandoned
        self.connections = connections
        self.ratePerSecondBefore = ratePerSecondBefore
        self.ratePerSecondAfter = ratePerSecondAfter
        self.ratePerSecondRequired = ratePerSecondRequired
        self.growthHeldOffMilliseconds = growthHeldOffMilliseconds
    }
}

/// Reports nothing.
public struct NoDispatcherMetrics: DispatcherMetricsHook {
    public init() {}
}

/// Why a connection failed or ended, in the words of the metrics catalog
/// (`pushd_apns_connection_errors_total{reason}`).
public enum ConnectionFailureReason: String, Sendable, CaseIterable {
    /// Resolving, connecting or the proxy tunnel failed.
    case connect
    /// The TLS handshake failed or the server's certificate was rejected.
    case tls
    /// The server stopped taking streams on a connection in order (a GOAWAY): libcurl moved
    /// requests from it to another connection, and none failed on it. libcurl reports GOAWAY
    /// frames no more directly, and one on a connection nothing was moved from is not seen.
    case goaway
    /// libcurl moved requests off a connection they had gone on before it answered anything
    /// (its SETTINGS not yet known): the server refused those streams (a token connection
    /// allows one at first), and libcurl then closes that connection itself and resends them.
    /// A GOAWAY sent before a connection's first answer is counted here too: libcurl reports
    /// both as a refused stream.
    case refusedStream = "refused_stream"
    /// The connection dropped with requests unanswered, or a write on it failed.
    case reset
    /// A request got no answer in time.
    case timeout
}
