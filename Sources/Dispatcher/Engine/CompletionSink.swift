import Polling

/// A request waiting in, or travelling through, one event loop.
struct PendingRequest: Sendable {
    var request: DispatchRequest
    var tag: UInt64
    var continuation: ResultWaiter?
    var submittedAt: UInt64
    var attempts: Int
    /// An attempt of this request went on the wire (libcurl began to send it): a failure after
    /// the answer deadline is then reported as that failure, never as `notSent`.
    var wentOnWire = false
    /// An attempt of this request went on the wire and its connection ended without answering
    /// it: that attempt may have reached the server. One answered (a refusal the engine sends
    /// again, such as UnrelatedKeyIdInToken) was refused for certain, and does not set it.
    var unansweredOnWire = false
    /// After an UnrelatedKeyIdInToken answer, the newest connection of the loop then: the
    /// request went again on a new connection, and only a connection with a higher id (libcurl
    /// numbers a multi handle's connections upwards) was opened after it. `Int64.min` before.
    var unrelatedKeyConnections = Int64.min
}

/// The caller waiting in `HTTP2Dispatcher.send`, boxed. `CheckedContinuation` comes from a
/// library built for evolution, so its size is not known when this module is compiled: held
/// in `PendingRequest` itself, it made every copy and move of every request (also those with
/// no caller waiting) go through the runtime's generic value witnesses, about 1,000
/// instructions per request (docs/dispatcher-measurements.md, 2026-12-03). A reference has a
/// size known here.
final class ResultWaiter: Sendable {
    let continuation: CheckedContinuation<DispatchResult, Never>

    init(_ continuation: CheckedContinuation<DispatchResult, Never>) {
        self.continuation = continuation
    }
}

/// Where a loop hands finished requests; shared by all loops of one engine.
struct CompletionSink: Sendable {
    let onResult: @Sendable (DispatchResult) -> Void
    let window: WindowGate
    let metrics: any DispatcherMetricsHook
    let counters: DispatcherCounters

    /// Reports one request exactly once; the caller returns its window slot.
    func deliver(_ pending: PendingRequest, outcome: DispatchResult.Outcome, timings: TransferTimings? = nil) {
        let latency = monotonicNanoseconds() &- pending.submittedAt
        var result = DispatchResult(tag: pending.tag, outcome: outcome, latencyNanoseconds: latency, attempts: pending.attempts,
                                    timings: timings)
        result.earlierAttemptUnanswered = pending.unansweredOnWire
        let status: Int
        if case .response(let response) = outcome { status = response.status } else { status = 0 }
        metrics.requestCompleted(status: status, latencyNanoseconds: latency)
        counters.completed.add(1, ordering: .relaxed)
        if let waiter = pending.continuation {
            waiter.continuation.resume(returning: result)
        } else {
            onResult(result)
        }
    }
}
