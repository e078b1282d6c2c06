import APNs
import Glibc
import Polling
import Locking
import Synchronization

/// Sends requests over HTTP/2 to one host with one credential, on `threads` event loops, and
/// reports each result exactly once.
///
/// Results of `submit` go to the `onResult` handler given at creation, called on an event-loop
/// thread with the caller's tag: no per-request closure, box or continuation. `send` is the
/// convenience for callers that want to await one result.
///
/// Thread rule: the public methods may be called from any thread. Each loop owns its libcurl
/// handles; this class only holds immutable references, the window semaphore and atomics.
public final class HTTP2Dispatcher: @unchecked Sendable {
    public typealias ResultHandler = @Sendable (DispatchResult) -> Void

    public let configuration: DispatcherConfiguration
    private let loops: [CurlEventLoop]
    private let sink: CompletionSink
    private let window: WindowGate
    private let counters = DispatcherCounters()
    private let nextLoop = Atomic<Int>(0)
    private let state = Lock(State.running)

    private enum State {
        case running
        case stopping
        case stopped
    }

    public init(configuration: DispatcherConfiguration, metrics: any DispatcherMetricsHook = NoDispatcherMetrics(),
                onResult: @escaping ResultHandler = { _ in }) throws(DispatcherConfigurationError) {
        try configuration.validate()
        guard CurlRuntime.initialize() else { throw .transportRejected(setting: "curl_global_init", message: "libcurl failed to initialise") }
        guard CurlRuntime.info.supportsHTTP2 else { throw .transportRejected(setting: "HTTP/2", message: "the linked libcurl lacks HTTP/2 support") }
        self.configuration = configuration
        window = WindowGate(capacity: configuration.effectiveMaxOutstanding)
        let sink = CompletionSink(onResult: onResult, window: window, metrics: metrics, counters: counters)
        self.sink = sink
        var loops: [CurlEventLoop] = []
        for _ in 0..<configuration.threads {
            loops.append(try CurlEventLoop(configuration: configuration, sink: sink))
        }
        self.loops = loops
        for (index, loop) in loops.enumerated() {
            do {
                try loop.start()
            } catch {
                for started in loops[..<index] { started.stop() }
                throw error
            }
        }
    }

    deinit {
        stopLoops()
    }

    /// Queues `request`; blocks while `maxOutstanding` requests are unfinished. The result
    /// reaches `onResult` with `tag`. After `shutdown` the result is `.engineStopped`.
    public func submit(_ request: DispatchRequest, tag: UInt64) {
        window.acquire()
        dispatch(PendingRequest(request: request, tag: tag, continuation: nil, submittedAt: monotonicNanoseconds(), attempts: 0))
    }

    /// Queues many requests with one lock per batch of free window slots; blocks while the
    /// window is full. Results arrive one by one, as for `submit(_:tag:)`.
    public func submit(contentsOf batch: [(request: DispatchRequest, tag: UInt64)]) {
        var start = 0
        var pending: [PendingRequest] = []
        pending.reserveCapacity(min(batch.count, 1024))
        while start < batch.count {
            let granted = window.acquire(upTo: min(batch.count - start, 1024))
            let now = monotonicNanoseconds()
            for (request, tag) in batch[start..<(start + granted)] {
                pending.append(PendingRequest(request: request, tag: tag, continuation: nil, submittedAt: now, attempts: 0))
            }
            counters.submitted.add(granted, ordering: .relaxed)
            enqueueSpread(pending)
            pending.removeAll(keepingCapacity: true)
            start += granted
        }
    }

    /// Deals `pending` out to the loops so that their unfinished requests even out
    /// (`LoopShares`), one inbox lock per loop that takes any: handed to one loop, a batch
    /// as large as a loop's streams left the other loop's queue to run dry.
    private func enqueueSpread(_ pending: [PendingRequest]) {
        let shares: [Int]
        if loops.count == 1 || pending.count < 2 {
            shares = []
        } else {
            let first = (nextLoop.wrappingAdd(1, ordering: .relaxed).oldValue & Int.max) % loops.count
            shares = LoopShares.split(pending.count, loads: loops.map { max(0, $0.outstanding.load(ordering: .relaxed)) }, start: first)
        }
        guard !shares.isEmpty else {
            enqueue(pending[...], on: leastLoadedLoop())
            return
        }
        var from = 0
        for (loop, share) in zip(loops, shares) where share > 0 {
            enqueue(pending[from..<(from + share)], on: loop)
            from += share
        }
    }

    private func enqueue(_ pending: ArraySlice<PendingRequest>, on loop: CurlEventLoop) {
        if !loop.enqueue(contentsOf: pending) {
            for request in pending { sink.deliver(request, outcome: .transportFailure(.engineStopped)) }
            window.release(pending.count)
        }
    }

    /// Queues `request` unless the window is full; returns false (and does nothing) when it is.
    public func trySubmit(_ request: DispatchRequest, tag: UInt64) -> Bool {
        guard window.tryAcquire() else { return false }
        dispatch(PendingRequest(request: request, tag: tag, continuation: nil, submittedAt: monotonicNanoseconds(), attempts: 0))
        return true
    }

    /// Sends one request and waits for its result without blocking a thread; while the window is
    /// full it waits in short sleeps. Bulk senders should use `submit`.
    public func send(_ request: DispatchRequest, tag: UInt64 = 0) async -> DispatchResult {
        while !window.tryAcquire() {
            try? await Task.sleep(nanoseconds: 1_000_000)
        }
        return await withCheckedContinuation { continuation in
            dispatch(PendingRequest(request: request, tag: tag, continuation: ResultWaiter(continuation), submittedAt: monotonicNanoseconds(), attempts: 0))
        }
    }

    private func dispatch(_ pending: PendingRequest) {
        counters.submitted.add(1, ordering: .relaxed)
        if !leastLoadedLoop().enqueue(pending) {
            sink.deliver(pending, outcome: .transportFailure(.engineStopped))
            window.release(1)
        }
    }

    /// The loop with the fewest unfinished requests, so a loop that drained its share gets the next
    /// chunk and none sits idle while another's backlog waits; ties go round from a rotating start.
    private func leastLoadedLoop() -> CurlEventLoop {
        let start = (nextLoop.wrappingAdd(1, ordering: .relaxed).oldValue & Int.max) % loops.count
        var best = loops[start]
        var bestLoad = best.outstanding.load(ordering: .relaxed)
        for offset in 1..<loops.count {
            let loop = loops[(start + offset) % loops.count]
            let load = loop.outstanding.load(ordering: .relaxed)
            if load < bestLoad {
                best = loop
                bestLoad = load
            }
        }
        return best
    }

    /// Any thread: from now on the engine presents `identity` instead of the client certificate
    /// it had (a renewal), on new connections only. Each loop takes it on its next pass: its
    /// requests not yet sent wait for a connection opened with the new certificate, and the
    /// connections opened with the old one take no new stream, finish what they carry and are
    /// closed (docs/dispatcher.md, "Replacing the client certificate"). The same certificate
    /// again changes nothing. Token-authenticated engines ignore it.
    public func replaceCertificate(_ identity: ClientIdentity) {
        guard case .certificate = configuration.credential else { return }
        for loop in loops { loop.replaceCertificate(identity) }
    }

    /// Each loop's unfinished requests, in loop order (for tests).
    var loopLoads: [Int] { loops.map { $0.outstanding.load(ordering: .relaxed) } }

    /// Requests submitted and not yet reported.
    public var outstanding: Int {
        counters.submitted.load(ordering: .relaxed) - counters.completed.load(ordering: .relaxed)
    }

    public var statistics: DispatcherStatistics { counters.snapshot }

    /// Requests the loops let into libcurl now, all loops together: the streams of their
    /// connections, grown ones included (or the adaptive window's limit where it is lower);
    /// 0 until the loops have started. What is outstanding beyond it waits for a stream.
    public var streamCapacity: Int { counters.inFlightLimit.load(ordering: .relaxed) }

    /// Waits up to `drainTimeoutMilliseconds` for outstanding requests to finish, then stops the
    /// loops; whatever is still unfinished is reported as `.engineStopped`. Idempotent.
    public func shutdown(drainTimeoutMilliseconds: Int = 10_000) {
        let proceed = state.withLock { state -> Bool in
            guard case .running = state else { return false }
            state = .stopping
            return true
        }
        guard proceed else { return }
        let deadline = monotonicNanoseconds() + UInt64(max(0, drainTimeoutMilliseconds)) * 1_000_000
        while outstanding > 0, monotonicNanoseconds() < deadline {
            usleep(2000)
        }
        stopLoops()
    }

    private func stopLoops() {
        let proceed = state.withLock { state -> Bool in
            if case .stopped = state { return false }
            state = .stopped
            return true
        }
        guard proceed else { return }
        for loop in loops { loop.stop() }
    }
}
