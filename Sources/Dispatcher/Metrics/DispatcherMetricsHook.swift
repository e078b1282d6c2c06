/// What the engine reports for the metrics catalog. Called on event-loop threads: keep each
/// method to a relaxed atomic update. Every method has a no-op default.
public protocol DispatcherMetricsHook: Sendable {
    /// A request finished with an HTTP answer (`status`) or a transport failure (`status` 0).
    func requestCompleted(status: Int, latencyNanoseconds: UInt64)
    /// Requests inside libcurl (in-flight streams or waiting for one) changed by `delta`.
    func inFlightChanged(by delta: Int)
    /// A TCP connection to the server (or proxy) was opened; `reconnect` when it replaces one.
    func connectionOpened(reconnect: Bool)
    func connectionClosed()
    /// A connection went away with requests still unanswered on it (GOAWAY or reset); reported
    /// once per batch of failed streams, so a close approximation of lost connections.
    func connectionLost()
    /// A request left unanswered by the transport was sent again.
    func requestRetried()
    /// A response asked for a fresh connection (503, IdleTimeout, ExpiredProviderToken, …).
    func connectionReplacementRequested()
}

extension DispatcherMetricsHook {
    public func requestCompleted(status: Int, latencyNanoseconds: UInt64) {}
    public func inFlightChanged(by delta: Int) {}
    public func connectionOpened(reconnect: Bool) {}
    public func connectionClosed() {}
    public func connectionLost() {}
    public func requestRetried() {}
    public func connectionReplacementRequested() {}
}

/// Reports nothing.
public struct NoDispatcherMetrics: DispatcherMetricsHook {
    public init() {}
}
