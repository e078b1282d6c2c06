import Polling

/// A request waiting in, or travelling through, one event loop.
struct PendingRequest: Sendable {
    var request: DispatchRequest
    var tag: UInt64
    var continuation: CheckedContinuation<DispatchResult, Never>?
    var submittedAt: UInt64
    var attempts: Int
    /// An attempt of this request went on the wire (libcurl began to send it): a failure after
    /// the answer deadline is then reported as that failure, never as `notSent`.
    var wentOnWire = false
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
        let result = DispatchResult(tag: pending.tag, outcome: outcome, latencyNanoseconds: latency, attempts: pending.attempts,
                                    timings: timings)
        let status: Int
        if case .response(let response) = outcome { status = response.status } else { status = 0 }
        metrics.requestCompleted(status: status, latencyNanoseconds: latency)
        counters.completed.add(1, ordering: .relaxed)
        if let continuation = pending.continuation {
            continuation.resume(returning: result)
        } else {
            onResult(result)
        }
    }
}
