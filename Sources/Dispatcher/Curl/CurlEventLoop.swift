import APNs
internal import CCurl
import Foundation
import Glibc
import Synchronization

/// A request waiting in, or travelling through, one event loop.
struct PendingRequest: Sendable {
    var request: DispatchRequest
    var tag: UInt64
    var continuation: CheckedContinuation<DispatchResult, Never>?
    var submittedAt: UInt64
    var attempts: Int
}

/// Where a loop hands finished requests; shared by all loops of one engine.
struct CompletionSink: Sendable {
    let onResult: @Sendable (DispatchResult) -> Void
    let window: WindowGate
    let metrics: any DispatcherMetricsHook
    let counters: DispatcherCounters

    /// Reports one request exactly once; the caller returns its window slot.
    func deliver(_ pending: PendingRequest, outcome: DispatchResult.Outcome) {
        let latency = monotonicNanoseconds() &- pending.submittedAt
        let result = DispatchResult(tag: pending.tag, outcome: outcome, latencyNanoseconds: latency, attempts: pending.attempts)
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

/// One pooled easy handle with the buffers libcurl reads from and writes into while it runs.
/// Its options that never change are set once at creation and kept across reuse.
private final class CurlTransfer {
    let index: Int
    let easy: UnsafeMutableRawPointer
    let url: OpaquePointer
    /// Path and header lines of the current request, NUL-terminated, then the body.
    var buffer: UnsafeMutableRawPointer
    var bufferCapacity: Int
    /// Header list nodes pointing into `buffer`; libcurl only reads the list, so no per-request malloc.
    var nodes: UnsafeMutablePointer<curl_slist>
    var nodeCapacity: Int
    let errorBuffer: UnsafeMutablePointer<CChar>
    var method: DispatchRequest.Method = .post
    var headersAttached = true
    var freshConnect = false
    var pending: PendingRequest?
    var responseBody: [UInt8] = []
    var apnsID: UUID?
    /// From the status line, so the body of a success is never copied.
    var status = 0
    /// Times libcurl began sending this attempt; above one, it resent the request by itself.
    var sends = 0
    /// Local port of the connection libcurl last began sending this attempt on, and the first.
    var localPort: Int32 = 0
    var firstLocalPort: Int32 = 0
    let keepAlive: ConnectionKeepAlive

    init(index: Int, easy: UnsafeMutableRawPointer, url: OpaquePointer, keepAlive: ConnectionKeepAlive) {
        self.index = index
        self.easy = easy
        self.url = url
        self.keepAlive = keepAlive
        bufferCapacity = 1024
        buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferCapacity, alignment: 16)
        nodeCapacity = 16
        nodes = UnsafeMutablePointer<curl_slist>.allocate(capacity: nodeCapacity)
        nodes.initialize(repeating: curl_slist(data: nil, next: nil), count: nodeCapacity)
        errorBuffer = UnsafeMutablePointer<CChar>.allocate(capacity: Int(pushd_curl_max_errorsize()))
        errorBuffer.initialize(repeating: 0, count: Int(pushd_curl_max_errorsize()))
    }

    deinit {
        curl_easy_cleanup(easy)
        curl_url_cleanup(url)
        buffer.deallocate()
        nodes.deallocate()
        errorBuffer.deallocate()
    }

    func ensureCapacity(bytes: Int, headers: Int) {
        if bytes > bufferCapacity {
            buffer.deallocate()
            bufferCapacity = max(bytes, bufferCapacity * 2)
            buffer = UnsafeMutableRawPointer.allocate(byteCount: bufferCapacity, alignment: 16)
        }
        if headers > nodeCapacity {
            nodes.deallocate()
            nodeCapacity = max(headers, nodeCapacity * 2)
            nodes = UnsafeMutablePointer<curl_slist>.allocate(capacity: nodeCapacity)
            nodes.initialize(repeating: curl_slist(data: nil, next: nil), count: nodeCapacity)
            // The list head moved: libcurl must be told again.
            headersAttached = false
        }
    }
}

/// One event-loop thread: a multi handle driven through epoll with
/// `curl_multi_socket_action`, its own connections and its own pool of easy handles.
///
/// Thread rule: the CURLM, every CURL/CURLU handle, the transfers, the backlog and the epoll
/// descriptor are touched only on this loop's thread (after `init` returns). Other threads
/// reach the loop only through `inbox`, `stopRequested`, `outstanding` (read) and a write to
/// the eventfd.
final class CurlEventLoop: @unchecked Sendable {
    private struct Inbox {
        var items: [PendingRequest] = []
        /// Set once the loop has stopped taking requests; later ones are refused at the door.
        var closed = false
    }

    private let configuration: DispatcherConfiguration
    private let sink: CompletionSink
    private let multi: UnsafeMutableRawPointer
    private let epollFD: Int32
    private let wakeFD: Int32
    private let inbox = Mutex(Inbox())
    private let stopRequested = Atomic<Bool>(false)
    /// True while the loop is (about to be) blocked in epoll_wait; producers wake it only then.
    private let sleeping = Atomic<Bool>(false)
    /// Requests accepted and not yet reported. The dispatcher hands each chunk of window slots to
    /// the loop with the fewest: dealt out in turn, the chunks (a quarter of the window each, one
    /// per wake-up of the submitter) kept one loop's backlog full while the other's ran dry.
    let outstanding = Atomic<Int>(0)
    private var thread: pthread_t?

    private var transfers: [CurlTransfer] = []
    private var freeTransfers: [Int] = []
    private var backlog = RingBuffer<PendingRequest>(capacity: 1024)
    private var drained: [PendingRequest] = []
    private var inCurl = 0
    private let inCurlLimit: Int
    private var timerDeadline = UInt64.max
    private var socketMasks: [UInt32] = []
    private var backoffUntil: UInt64 = 0
    private var consecutiveConnectFailures = 0
    private var replaceConnectionPending = false
    private var openConnections = 0
    /// A fresh-connect transfer is running and the connection limit is one above the configured count.
    private var replacing = false
    /// Connections this loop has opened; those beyond its configured count are reconnects.
    private var connectionsEverOpened = 0
    /// A connection was opened and no answer has arrived since, so its SETTINGS are unknown.
    /// Until then libcurl assumes 100 streams, while APNs starts token connections at 1 and
    /// refuses the rest; libcurl answers a refused stream by closing the whole connection and
    /// resending everything unanswered on it, which can duplicate what the server processed.
    /// So while cold, only one request at a time goes into libcurl.
    private var coldConnection = false
    private var random = SystemRandomNumberGenerator()
    private var slotsToRelease = 0
    /// Set when a completion batch held requests a dropped connection left unanswered; one
    /// lost connection fails many streams at once and is reported once.
    private var lostThisBatch = false
    private let keepAlive: ConnectionKeepAlive
    /// Connection-level failures seen in one completion batch, reported once each: a thousand
    /// streams timing out on one connection are one failed connection.
    private var failuresThisBatch: Set<ConnectionFailureReason> = []

    init(configuration: DispatcherConfiguration, sink: CompletionSink) throws(DispatcherConfigurationError) {
        self.configuration = configuration
        self.sink = sink
        inCurlLimit = configuration.inFlightPerThread
        // Through an HTTPS proxy the TLS session to the server runs inside the proxy's, so the
        // loop cannot write a PING on the socket; TCP keep-alive still runs.
        keepAlive = ConnectionKeepAlive(enabled: !(configuration.proxy?.hasPrefix("https://") ?? false),
                                        intervalMilliseconds: configuration.keepAliveIntervalMilliseconds,
                                        timeoutMilliseconds: configuration.keepAliveTimeoutMilliseconds,
                                        idleCloseSeconds: configuration.idleCloseSeconds,
                                        counters: sink.counters, metrics: sink.metrics)
        guard let multi = curl_multi_init() else { throw .transportRejected(setting: "curl_multi_init", message: "out of memory") }
        self.multi = multi
        epollFD = pushd_curl_epoll_create()
        wakeFD = pushd_curl_eventfd()
        // Every stored property is set from here on, so a throw below runs deinit, which
        // releases the multi handle and descriptors.
        guard epollFD >= 0, wakeFD >= 0 else {
            throw .transportRejected(setting: "epoll/eventfd", message: String(cString: strerror(errno)))
        }
        _ = pushd_curl_epoll_update(epollFD, 0, wakeFD, pushd_curl_epoll_in())

        let me = Unmanaged.passUnretained(self).toOpaque()
        _ = pushd_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, pushd_curl_pipe_multiplex())
        _ = pushd_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, configuration.connectionsPerThread)
        _ = pushd_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, configuration.connectionsPerThread + 2)
        _ = pushd_curl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, configuration.streamsPerConnection)
        _ = pushd_curl_multi_setopt_socket_cb(multi, curlSocketCallback)
        _ = pushd_curl_multi_setopt_ptr(multi, CURLMOPT_SOCKETDATA, me)
        _ = pushd_curl_multi_setopt_timer_cb(multi, curlTimerCallback)
        _ = pushd_curl_multi_setopt_ptr(multi, CURLMOPT_TIMERDATA, me)
        // The first easy handle is made now so a rejected option surfaces at start-up, not on a request.
        try freeTransfers.append(makeTransfer().index)
    }

    deinit {
        cleanup()
    }

    private func cleanup() {
        transfers.removeAll()
        keepAlive.closing = true
        curl_multi_cleanup(multi)
        if epollFD >= 0 { close(epollFD) }
        if wakeFD >= 0 { close(wakeFD) }
    }

    // MARK: - Cross-thread entry points

    func start() {
        let retained = Unmanaged.passRetained(self).toOpaque()
        var tid = pthread_t()
        pthread_create(&tid, nil, { argument in
            let loop = Unmanaged<CurlEventLoop>.fromOpaque(argument!).takeRetainedValue()
            loop.run()
            return nil
        }, retained)
        thread = tid
    }

    /// Any thread. Never blocks on the loop: a lock around an append, and an eventfd write
    /// only when the loop is asleep in epoll and this is the first request it will find — a
    /// busy loop looks at the inbox before it next waits anyway. Returns false, keeping
    /// nothing, once the loop has stopped.
    func enqueue(_ request: PendingRequest) -> Bool {
        let (accepted, first) = inbox.withLock { inbox -> (Bool, Bool) in
            guard !inbox.closed else { return (false, false) }
            inbox.items.append(request)
            outstanding.add(1, ordering: .relaxed)
            return (true, inbox.items.count == 1)
        }
        if first, sleeping.load(ordering: .sequentiallyConsistent) { wakeUp() }
        return accepted
    }

    /// `enqueue` for many requests under one lock.
    func enqueue(contentsOf requests: some Collection<PendingRequest>) -> Bool {
        let (accepted, first) = inbox.withLock { inbox -> (Bool, Bool) in
            guard !inbox.closed else { return (false, false) }
            let wasEmpty = inbox.items.isEmpty
            inbox.items.append(contentsOf: requests)
            outstanding.add(requests.count, ordering: .relaxed)
            return (true, wasEmpty)
        }
        if first, sleeping.load(ordering: .sequentiallyConsistent) { wakeUp() }
        return accepted
    }

    func stop() {
        stopRequested.store(true, ordering: .releasing)
        wakeUp()
        if let thread { pthread_join(thread, nil) }
        thread = nil
    }

    private func wakeUp() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    // MARK: - Loop

    private func run() {
        var readyFDs = [Int32](repeating: 0, count: 256)
        var readyMasks = [UInt32](repeating: 0, count: 256)
        let epollIn = pushd_curl_epoll_in() | pushd_curl_epoll_hup()
        let epollOut = pushd_curl_epoll_out()
        let epollErr = pushd_curl_epoll_err()
        var running: Int32 = 0
        while !stopRequested.load(ordering: .acquiring) {
            takeInbox()
            refill()
            let now = monotonicNanoseconds()
            if now >= keepAlive.nextDeadline {
                keepAlive.tick(now: now) { fd in Int(fd) < socketMasks.count && socketMasks[Int(fd)] != 0 }
            }
            if timerDeadline <= now {
                timerDeadline = .max
                curl_multi_socket_action(multi, pushd_curl_socket_timeout(), 0, &running)
                readCompletions()
                continue
            }
            var timeout = waitMilliseconds(now: now)
            if timeout != 0 {
                // Announce the sleep, then look once more: a request enqueued before the
                // announcement is seen here, one enqueued after it writes the eventfd.
                sleeping.store(true, ordering: .sequentiallyConsistent)
                if inbox.withLock({ !$0.items.isEmpty }) { timeout = 0 }
            }
            let ready = readyFDs.withUnsafeMutableBufferPointer { fds in
                readyMasks.withUnsafeMutableBufferPointer { masks in
                    pushd_curl_epoll_wait(epollFD, fds.baseAddress, masks.baseAddress, 256, timeout)
                }
            }
            sleeping.store(false, ordering: .sequentiallyConsistent)
            if ready > 0 {
                for slot in 0..<Int(ready) {
                    let fd = readyFDs[slot]
                    let events = readyMasks[slot]
                    if fd == wakeFD {
                        var value: UInt64 = 0
                        _ = read(wakeFD, &value, 8)
                        continue
                    }
                    var mask: Int32 = 0
                    if events & epollIn != 0 { mask |= pushd_curl_cselect_in() }
                    if events & epollOut != 0 { mask |= pushd_curl_cselect_out() }
                    if events & epollErr != 0 { mask |= pushd_curl_cselect_err() }
                    curl_multi_socket_action(multi, fd, mask, &running)
                }
            }
            if monotonicNanoseconds() >= timerDeadline {
                timerDeadline = .max
                curl_multi_socket_action(multi, pushd_curl_socket_timeout(), 0, &running)
            }
            readCompletions()
        }
        shutDownTransfers()
    }

    private func waitMilliseconds(now: UInt64) -> Int32 {
        var wait = Int64.max
        if timerDeadline != .max { wait = Int64((timerDeadline - now + 999_999) / 1_000_000) }
        if !backlog.isEmpty, backoffUntil > now { wait = min(wait, Int64((backoffUntil - now + 999_999) / 1_000_000)) }
        if keepAlive.nextDeadline != .max {
            wait = min(wait, keepAlive.nextDeadline > now ? Int64((keepAlive.nextDeadline - now + 999_999) / 1_000_000) : 0)
        }
        return wait == .max ? -1 : Int32(clamping: wait)
    }

    private func takeInbox() {
        inbox.withLock { inbox in
            if !inbox.items.isEmpty { swap(&inbox.items, &drained) }
        }
        guard !drained.isEmpty else { return }
        for request in drained { backlog.pushBack(request) }
        drained.removeAll(keepingCapacity: true)
    }

    /// One request at a time while no connection exists or the newest one has not answered yet:
    /// the first batch would otherwise be inside libcurl before the first connection opens, and
    /// libcurl would put up to 100 of them on it before the server's SETTINGS arrive.
    private var admissionLimit: Int { coldConnection || openConnections == 0 ? 1 : inCurlLimit }

    /// Moves requests from the backlog into libcurl up to the loop's in-flight limit. Called before
    /// every wait so that finished streams are replaced at once, not after the next poll.
    private func refill() {
        guard !backlog.isEmpty, inCurl < admissionLimit else { return }
        if backoffUntil != 0 {
            guard monotonicNanoseconds() >= backoffUntil else { return }
            backoffUntil = 0
        }
        var added = 0
        while inCurl < admissionLimit, !backlog.isEmpty {
            let transfer: CurlTransfer
            if let index = freeTransfers.popLast() {
                transfer = transfers[index]
            } else {
                do {
                    transfer = try makeTransfer()
                } catch {
                    break
                }
            }
            guard var request = backlog.popFront() else { break }
            request.attempts += 1
            if let failure = prepare(transfer, for: request) {
                freeTransfers.append(transfer.index)
                deliver(request, outcome: .transportFailure(failure))
                continue
            }
            transfer.pending = request
            let code = curl_multi_add_handle(multi, transfer.easy)
            if code != CURLM_OK {
                transfer.pending = nil
                freeTransfers.append(transfer.index)
                deliver(request, outcome: .transportFailure(TransportError(code: -Int(code.rawValue),
                                                                            message: String(cString: curl_multi_strerror(code)))))
                continue
            }
            inCurl += 1
            added += 1
        }
        if added > 0 { sink.metrics.inFlightChanged(by: added) }
        releaseSlots()
    }

    private func prepare(_ transfer: CurlTransfer, for pending: PendingRequest) -> TransportError? {
        let request = pending.request
        let easy = transfer.easy
        let packedCount = request.packed.count
        let bodyCount = request.body.count
        transfer.ensureCapacity(bytes: packedCount + bodyCount, headers: request.headerCount)
        let base = transfer.buffer
        request.packed.withUnsafeBytes { base.copyMemory(from: $0.baseAddress!, byteCount: packedCount) }
        if bodyCount > 0 { request.body.withUnsafeBytes { (base + packedCount).copyMemory(from: $0.baseAddress!, byteCount: bodyCount) } }

        let path = base.assumingMemoryBound(to: CChar.self)
        let urlCode = curl_url_set(transfer.url, CURLUPART_PATH, path, 0)
        if urlCode != CURLUE_OK {
            return TransportError(code: -Int(urlCode.rawValue), message: "request path rejected: \(String(cString: curl_url_strerror(urlCode)))")
        }
        var lineStart = request.pathLength + 1
        for index in 0..<request.headerCount {
            transfer.nodes[index].data = (base + lineStart).assumingMemoryBound(to: CChar.self)
            transfer.nodes[index].next = index + 1 < request.headerCount ? transfer.nodes + index + 1 : nil
            lineStart += strlen((base + lineStart).assumingMemoryBound(to: CChar.self)) + 1
        }
        if request.headerCount == 0 {
            if transfer.headersAttached {
                _ = pushd_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, nil)
                transfer.headersAttached = false
            }
        } else if !transfer.headersAttached {
            _ = pushd_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, transfer.nodes)
            transfer.headersAttached = true
        }
        if request.method != transfer.method {
            switch request.method {
            case .post:
                _ = pushd_curl_easy_setopt_long(easy, CURLOPT_POST, 1)
                _ = pushd_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, nil)
            case .get:
                _ = pushd_curl_easy_setopt_long(easy, CURLOPT_HTTPGET, 1)
                _ = pushd_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, nil)
            case .put, .delete:
                _ = pushd_curl_easy_setopt_long(easy, CURLOPT_POST, 1)
                _ = pushd_curl_easy_setopt_string(easy, CURLOPT_CUSTOMREQUEST, request.method.rawValue)
            }
            transfer.method = request.method
        }
        if request.method != .get {
            _ = pushd_curl_easy_setopt_ptr(easy, CURLOPT_POSTFIELDS, base + packedCount)
            _ = pushd_curl_easy_setopt_long(easy, CURLOPT_POSTFIELDSIZE, bodyCount)
        }
        // A replacement gets one connection slot above the configured count while it is being
        // made: at the limit, a fresh-connect transfer would wait for the old connection to go
        // idle — which, busy with other streams, it never does. One replacement at a time.
        let fresh = replaceConnectionPending && !replacing && openConnections <= configuration.connectionsPerThread
        if fresh != transfer.freshConnect {
            _ = pushd_curl_easy_setopt_long(easy, CURLOPT_FRESH_CONNECT, fresh ? 1 : 0)
            transfer.freshConnect = fresh
        }
        if fresh {
            replacing = true
            _ = pushd_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, configuration.connectionsPerThread + 1)
        }
        replaceConnectionPending = false
        transfer.errorBuffer[0] = 0
        transfer.apnsID = nil
        transfer.status = 0
        transfer.sends = 0
        return nil
    }

    private func readCompletions() {
        var remaining: Int32 = 0
        var finished = 0
        while let message = curl_multi_info_read(multi, &remaining) {
            guard pushd_curl_msg_is_done(message) != 0, let easy = message.pointee.easy_handle else { continue }
            let code = pushd_curl_msg_result(message)
            var privateData: UnsafeMutableRawPointer?
            _ = pushd_curl_easy_getinfo_ptr(easy, CURLINFO_PRIVATE, &privateData)
            var status = 0
            _ = pushd_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
            let transfer = transfers[Int(bitPattern: privateData) - 1]
            curl_multi_remove_handle(multi, easy)
            inCurl -= 1
            finished += 1
            finish(transfer, code: code, status: status)
        }
        if finished > 0 { sink.metrics.inFlightChanged(by: -finished) }
        if lostThisBatch {
            lostThisBatch = false
            // With keep-alive on, the loop classifies each of its connections as it closes.
            if !keepAlive.enabled { failuresThisBatch.insert(.reset) }
        }
        if !failuresThisBatch.isEmpty {
            for reason in failuresThisBatch { reportFailure(reason) }
            failuresThisBatch.removeAll(keepingCapacity: true)
        }
        releaseSlots()
    }

    private func finish(_ transfer: CurlTransfer, code: CURLcode, status: Int) {
        guard let pending = transfer.pending else { return }
        transfer.pending = nil
        if transfer.freshConnect { endReplacement() }
        freeTransfers.append(transfer.index)
        if transfer.sends > 1 {
            let resent = transfer.sends - 1
            sink.counters.resentByTransport.add(resent, ordering: .relaxed)
            for _ in 0..<resent { sink.metrics.requestRetried() }
            if transfer.firstLocalPort != transfer.localPort { keepAlive.requestMovedAway(fromPort: transfer.firstLocalPort) }
        }
        let curlCode = Int(code.rawValue)
        let disposition = TransferDisposition.decide(
            curlCode: curlCode, status: status,
            reason: { APNsErrorBody.parse(transfer.responseBody)?.reason?.rawValue },
            attempts: pending.attempts, maxAttempts: configuration.maxAttempts)
        if status == 0, curlCode != 0, let reason = ConnectionFailureReason(failedTransferCode: curlCode) {
            failuresThisBatch.insert(reason)
        }
        if disposition.connectFailed {
            consecutiveConnectFailures += 1
            sink.counters.connectFailures.add(1, ordering: .relaxed)
            let delay = configuration.reconnectBackoff.delayMilliseconds(afterFailures: consecutiveConnectFailures,
                                                                          unitRandom: Double.random(in: 0..<1, using: &random))
            backoffUntil = monotonicNanoseconds() + UInt64(delay) * 1_000_000
        } else if status != 0 {
            consecutiveConnectFailures = 0
            coldConnection = false
        }
        if disposition.replaceConnection {
            replaceConnectionPending = true
            sink.counters.connectionReplacements.add(1, ordering: .relaxed)
            sink.metrics.connectionReplacementRequested()
        }
        if disposition.connectFailed, consecutiveConnectFailures >= configuration.maxAttempts {
            // The server cannot be reached, after as many tries as a request gets: everything
            // waiting here would only fail one by one behind ever longer backoffs, so all of it
            // is reported now and the caller keeps it (pushd in its queue) until the server is
            // back. Later requests each probe the connection again after the backoff.
            let message = transfer.errorBuffer[0] != 0 ? String(cString: transfer.errorBuffer) : String(cString: curl_easy_strerror(code))
            let failure = TransportError(code: curlCode, message: "\(message) (\(consecutiveConnectFailures) connection attempts failed in a row)")
            transfer.responseBody.removeAll(keepingCapacity: true)
            deliver(pending, outcome: .transportFailure(failure))
            while let waiting = backlog.popFront() { deliver(waiting, outcome: .transportFailure(failure)) }
            // Transfers inside libcurl that it has not begun to send (no PREREQ call: they wait
            // for a connection) are taken back too; anything already sent stays to finish.
            var withdrawn = 0
            for other in transfers where other !== transfer && other.sends == 0 {
                guard let waiting = other.pending else { continue }
                curl_multi_remove_handle(multi, other.easy)
                other.pending = nil
                if other.freshConnect { endReplacement() }
                other.responseBody.removeAll(keepingCapacity: true)
                freeTransfers.append(other.index)
                withdrawn += 1
                deliver(waiting, outcome: .transportFailure(failure))
            }
            if withdrawn > 0 {
                inCurl -= withdrawn
                sink.metrics.inFlightChanged(by: -withdrawn)
            }
            return
        }
        if disposition.retry {
            transfer.responseBody.removeAll(keepingCapacity: true)
            sink.counters.retried.add(1, ordering: .relaxed)
            sink.metrics.requestRetried()
            if !disposition.connectFailed { lostThisBatch = true }
            backlog.pushFront(pending)
            return
        }
        let outcome: DispatchResult.Outcome
        if curlCode == 0 || status != 0 {
            let body = transfer.responseBody
            if !body.isEmpty { transfer.responseBody = [] }
            outcome = .response(Response(status: status, apnsID: transfer.apnsID, body: body))
        } else {
            let message = transfer.errorBuffer[0] != 0 ? String(cString: transfer.errorBuffer) : String(cString: curl_easy_strerror(code))
            transfer.responseBody.removeAll(keepingCapacity: true)
            outcome = .transportFailure(TransportError(code: curlCode, message: message))
        }
        deliver(pending, outcome: outcome)
    }

    /// The replacement connection exists (or failed): back to the configured count, so the old
    /// connection is not succeeded by a spare once it closes.
    private func endReplacement() {
        guard replacing else { return }
        replacing = false
        _ = pushd_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, configuration.connectionsPerThread)
    }

    private func reportFailure(_ reason: ConnectionFailureReason) {
        sink.counters.countFailure(reason)
        sink.metrics.connectionFailed(reason)
    }

    private func deliver(_ pending: PendingRequest, outcome: DispatchResult.Outcome) {
        sink.deliver(pending, outcome: outcome)
        slotsToRelease += 1
    }

    /// Returns the window slots of everything delivered since the last call, in one go.
    private func releaseSlots() {
        if slotsToRelease > 0 {
            outstanding.subtract(slotsToRelease, ordering: .relaxed)
            sink.window.release(slotsToRelease)
            slotsToRelease = 0
        }
    }

    private func shutDownTransfers() {
        for transfer in transfers {
            guard let pending = transfer.pending else { continue }
            curl_multi_remove_handle(multi, transfer.easy)
            transfer.pending = nil
            deliver(pending, outcome: .transportFailure(.engineStopped))
        }
        inbox.withLock { $0.closed = true }
        takeInbox()
        while let pending = backlog.popFront() { deliver(pending, outcome: .transportFailure(.engineStopped)) }
        releaseSlots()
    }

    // MARK: - Easy handles

    private func makeTransfer() throws(DispatcherConfigurationError) -> CurlTransfer {
        guard let easy = curl_easy_init(), let url = curl_url() else {
            throw .transportRejected(setting: "curl_easy_init", message: "out of memory")
        }
        let transfer = CurlTransfer(index: transfers.count, easy: easy, url: url, keepAlive: keepAlive)
        let config = configuration
        var failure: DispatcherConfigurationError?
        func check(_ code: CURLcode, _ setting: String) {
            if code != CURLE_OK, failure == nil {
                failure = .transportRejected(setting: setting, message: String(cString: curl_easy_strerror(code)))
            }
        }
        let urlCode = curl_url_set(url, CURLUPART_URL, "https://\(hostForURL(config.host)):\(config.port)/", 0)
        if urlCode != CURLUE_OK {
            throw .invalid(field: "host", value: config.host, expected: "a valid host (\(String(cString: curl_url_strerror(urlCode))))")
        }
        let transferPointer = Unmanaged.passUnretained(transfer).toOpaque()
        let loopPointer = Unmanaged.passUnretained(self).toOpaque()
        check(pushd_curl_easy_setopt_url(easy, url), "CURLOPT_CURLU")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_PRIVATE, UnsafeMutableRawPointer(bitPattern: transfer.index + 1)), "CURLOPT_PRIVATE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_HTTP_VERSION, pushd_curl_http_version_2tls()), "CURLOPT_HTTP_VERSION")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_PIPEWAIT, 1), "CURLOPT_PIPEWAIT")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_NOSIGNAL, 1), "CURLOPT_NOSIGNAL")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_NODELAY, 1), "CURLOPT_TCP_NODELAY")
        // Thousands of these handles are in flight at once and APNs answers in well under a
        // kilobyte: small receive and upload buffers keep memory to a few megabytes.
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_BUFFERSIZE, 4096), "CURLOPT_BUFFERSIZE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_UPLOAD_BUFFERSIZE, 16384), "CURLOPT_UPLOAD_BUFFERSIZE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1), "CURLOPT_SSL_VERIFYPEER")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2), "CURLOPT_SSL_VERIFYHOST")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_POST, 1), "CURLOPT_POST")
        check(pushd_curl_easy_setopt_slist(easy, CURLOPT_HTTPHEADER, transfer.nodes), "CURLOPT_HTTPHEADER")
        check(pushd_curl_easy_setopt_data_cb(easy, CURLOPT_WRITEFUNCTION, curlWriteCallback), "CURLOPT_WRITEFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_WRITEDATA, transferPointer), "CURLOPT_WRITEDATA")
        check(pushd_curl_easy_setopt_data_cb(easy, CURLOPT_HEADERFUNCTION, curlHeaderCallback), "CURLOPT_HEADERFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_HEADERDATA, transferPointer), "CURLOPT_HEADERDATA")
        check(pushd_curl_easy_setopt_prereq_cb(easy, curlPrereqCallback), "CURLOPT_PREREQFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_PREREQDATA, transferPointer), "CURLOPT_PREREQDATA")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_ERRORBUFFER, transfer.errorBuffer), "CURLOPT_ERRORBUFFER")
        check(pushd_curl_easy_setopt_opensocket_cb(easy, curlOpenSocketCallback), "CURLOPT_OPENSOCKETFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_OPENSOCKETDATA, loopPointer), "CURLOPT_OPENSOCKETDATA")
        check(pushd_curl_easy_setopt_closesocket_cb(easy, curlCloseSocketCallback), "CURLOPT_CLOSESOCKETFUNCTION")
        check(pushd_curl_easy_setopt_ptr(easy, CURLOPT_CLOSESOCKETDATA, loopPointer), "CURLOPT_CLOSESOCKETDATA")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_CONNECTTIMEOUT_MS, config.connectTimeoutMilliseconds), "CURLOPT_CONNECTTIMEOUT_MS")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TIMEOUT_MS, config.requestTimeoutMilliseconds), "CURLOPT_TIMEOUT_MS")
        // HTTP/2 PINGs come from ConnectionKeepAlive (libcurl 7.88's curl_easy_upkeep never
        // reaches a multi handle's connections); TCP keep-alive runs underneath.
        let keepAliveSeconds = max(1, config.keepAliveIntervalMilliseconds / 1000)
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_KEEPALIVE, 1), "CURLOPT_TCP_KEEPALIVE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_KEEPIDLE, keepAliveSeconds), "CURLOPT_TCP_KEEPIDLE")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_TCP_KEEPINTVL, keepAliveSeconds), "CURLOPT_TCP_KEEPINTVL")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_UPKEEP_INTERVAL_MS, config.keepAliveIntervalMilliseconds), "CURLOPT_UPKEEP_INTERVAL_MS")
        check(pushd_curl_easy_setopt_long(easy, CURLOPT_MAXAGE_CONN, config.idleCloseSeconds), "CURLOPT_MAXAGE_CONN")
        if let ca = config.trustedCAFile { check(pushd_curl_easy_setopt_string(easy, CURLOPT_CAINFO, ca), "CURLOPT_CAINFO") }
        if let proxy = config.proxy { check(pushd_curl_easy_setopt_string(easy, CURLOPT_PROXY, proxy), "CURLOPT_PROXY") }
        if let proxyCA = config.proxyCAFile { check(pushd_curl_easy_setopt_string(easy, CURLOPT_PROXY_CAINFO, proxyCA), "CURLOPT_PROXY_CAINFO") }
        switch config.credential {
        case .token:
            break
        case .pemCertificate(let certificate, let key, let passphrase):
            check(pushd_curl_easy_setopt_string(easy, CURLOPT_SSLCERTTYPE, "PEM"), "CURLOPT_SSLCERTTYPE")
            check(pushd_curl_easy_setopt_string(easy, CURLOPT_SSLCERT, certificate), "CURLOPT_SSLCERT")
            check(pushd_curl_easy_setopt_string(easy, CURLOPT_SSLKEYTYPE, "PEM"), "CURLOPT_SSLKEYTYPE")
            check(pushd_curl_easy_setopt_string(easy, CURLOPT_SSLKEY, key), "CURLOPT_SSLKEY")
            if let passphrase { check(pushd_curl_easy_setopt_string(easy, CURLOPT_KEYPASSWD, passphrase), "CURLOPT_KEYPASSWD") }
        case .pkcs12(let file, let password):
            check(pushd_curl_easy_setopt_string(easy, CURLOPT_SSLCERTTYPE, "P12"), "CURLOPT_SSLCERTTYPE")
            check(pushd_curl_easy_setopt_string(easy, CURLOPT_SSLCERT, file), "CURLOPT_SSLCERT")
            if let password { check(pushd_curl_easy_setopt_string(easy, CURLOPT_KEYPASSWD, password), "CURLOPT_KEYPASSWD") }
        }
        if let failure { throw failure }
        transfers.append(transfer)
        return transfer
    }

    private func hostForURL(_ host: String) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
    }

    // MARK: - Callbacks from libcurl, on this loop's thread

    fileprivate func socketChanged(_ fd: Int32, what: Int32) {
        if keepAlive.enabled { keepAlive.activity(on: fd, now: monotonicNanoseconds()) }
        let index = Int(fd)
        if index >= socketMasks.count { socketMasks += [UInt32](repeating: 0, count: index + 64 - socketMasks.count) }
        let current = socketMasks[index]
        if what == pushd_curl_poll_remove() {
            if current != 0 {
                _ = pushd_curl_epoll_update(epollFD, 2, fd, 0)
                socketMasks[index] = 0
            }
            return
        }
        var wanted: UInt32 = 0
        if what & pushd_curl_poll_in() != 0 { wanted |= pushd_curl_epoll_in() }
        if what & pushd_curl_poll_out() != 0 { wanted |= pushd_curl_epoll_out() }
        // Only a change of interest costs an epoll_ctl: most stream starts and ends leave it alone.
        guard wanted != current else { return }
        if current == 0 {
            if pushd_curl_epoll_update(epollFD, 0, fd, wanted) == EEXIST {
                _ = pushd_curl_epoll_update(epollFD, 1, fd, wanted)
            }
        } else if wanted == 0 {
            _ = pushd_curl_epoll_update(epollFD, 2, fd, 0)
        } else {
            _ = pushd_curl_epoll_update(epollFD, 1, fd, wanted)
        }
        socketMasks[index] = wanted
    }

    fileprivate func timerChanged(milliseconds: Int) {
        timerDeadline = milliseconds < 0 ? .max : monotonicNanoseconds() + UInt64(milliseconds) * 1_000_000
    }

    fileprivate func socketOpened(_ fd: Int32) {
        keepAlive.socketOpened(fd)
        openConnections += 1
        coldConnection = true
        sink.counters.connectionsOpened.add(1, ordering: .relaxed)
        sink.metrics.connectionOpened(reconnect: connectionsEverOpened >= configuration.connectionsPerThread)
        connectionsEverOpened += 1
    }

    fileprivate func socketClosed(_ fd: Int32) {
        keepAlive.socketClosed(fd)
        openConnections -= 1
        let index = Int(fd)
        if index < socketMasks.count, socketMasks[index] != 0 {
            _ = pushd_curl_epoll_update(epollFD, 2, fd, 0)
            socketMasks[index] = 0
        }
        sink.counters.connectionsClosed.add(1, ordering: .relaxed)
        sink.metrics.connectionClosed()
    }
}

func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

private let curlSocketCallback: pushd_curl_socket_cb = { _, fd, what, userData, _ in
    Unmanaged<CurlEventLoop>.fromOpaque(userData!).takeUnretainedValue().socketChanged(fd, what: what)
    return 0
}

private let curlTimerCallback: pushd_curl_timer_cb = { _, milliseconds, userData in
    Unmanaged<CurlEventLoop>.fromOpaque(userData!).takeUnretainedValue().timerChanged(milliseconds: milliseconds)
    return 0
}

private let curlOpenSocketCallback: pushd_curl_opensocket_cb = { userData, _, address in
    guard let address else { return pushd_curl_bad_socket() }
    let fd = socket(pushd_curl_sockaddr_family(address), pushd_curl_sockaddr_socktype(address) | Int32(SOCK_CLOEXEC.rawValue),
                    pushd_curl_sockaddr_protocol(address))
    if fd >= 0 { Unmanaged<CurlEventLoop>.fromOpaque(userData!).takeUnretainedValue().socketOpened(fd) }
    return fd >= 0 ? fd : pushd_curl_bad_socket()
}

private let curlCloseSocketCallback: pushd_curl_closesocket_cb = { userData, fd in
    Unmanaged<CurlEventLoop>.fromOpaque(userData!).takeUnretainedValue().socketClosed(fd)
    return close(fd)
}

private let curlPrereqCallback: pushd_curl_prereq_cb = { userData, _, _, _, localPort in
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userData!).takeUnretainedValue()
    transfer.sends += 1
    transfer.localPort = localPort
    if transfer.sends == 1 { transfer.firstLocalPort = localPort }
    return pushd_curl_prereq_ok()
}

private let curlWriteCallback: pushd_curl_data_cb = { data, size, count, userData in
    let bytes = size * count
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userData!).takeUnretainedValue()
    // Success bodies are not APNs's business and are dropped; error bodies are tiny, and
    // anything past 64 KiB is not an APNs answer and is not kept.
    if bytes > 0, !(200..<300).contains(transfer.status), transfer.responseBody.count < 65_536, let data {
        transfer.responseBody.append(contentsOf: UnsafeRawBufferPointer(start: data, count: min(bytes, 65_536 - transfer.responseBody.count)))
    }
    return bytes
}

private let curlHeaderCallback: pushd_curl_data_cb = { data, size, count, userData in
    let bytes = size * count
    guard bytes >= 12, let data else { return bytes }
    let line = UnsafeRawBufferPointer(start: data, count: bytes)
    // "HTTP/2 200": a status line starts every header block (also of a 100-continue).
    if line[0] == UInt8(ascii: "H"), line[1] == UInt8(ascii: "T"), line[4] == UInt8(ascii: "/") {
        var index = 5
        while index < bytes, line[index] != 0x20 { index += 1 }
        var status = 0
        var digits = 0
        index += 1
        while index < bytes, digits < 3, line[index] >= UInt8(ascii: "0"), line[index] <= UInt8(ascii: "9") {
            status = status * 10 + Int(line[index] - UInt8(ascii: "0"))
            digits += 1
            index += 1
        }
        let transfer = Unmanaged<CurlTransfer>.fromOpaque(userData!).takeUnretainedValue()
        transfer.status = status
        if transfer.keepAlive.identifying, let session = pushd_curl_easy_tls_ssl(transfer.easy) {
            // A connection not yet identified may be this one: its TLS session is at hand only
            // while a transfer runs on it, and the local port names its socket.
            transfer.keepAlive.identify(session: OpaquePointer(session), localPort: transfer.localPort, now: monotonicNanoseconds())
        }
        return bytes
    }
    guard bytes >= 44 else { return bytes }
    // "apns-id:" in any case, then optional spaces and a 36-character UUID.
    let name: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0x61, 0x70, 0x6E, 0x73, 0x2D, 0x69, 0x64, 0x3A)
    // Setting bit 0x20 lowercases the letters and leaves '-' and ':' as they are.
    let matches = withUnsafeBytes(of: name) { expected in (0..<8).allSatisfy { line[$0] | 0x20 == expected[$0] } }
    guard matches else { return bytes }
    var start = 8
    while start < bytes, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
    guard start + 36 <= bytes else { return bytes }
    Unmanaged<CurlTransfer>.fromOpaque(userData!).takeUnretainedValue().apnsID = parseUUID(UnsafeRawBufferPointer(rebasing: line[start..<(start + 36)]))
    return bytes
}

private func parseUUID(_ text: UnsafeRawBufferPointer) -> UUID? {
    var uuid: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    let complete = withUnsafeMutableBytes(of: &uuid) { bytes -> Bool in
        var out = 0
        var high: UInt8?
        for (position, character) in text.enumerated() {
            if position == 8 || position == 13 || position == 18 || position == 23 {
                guard character == UInt8(ascii: "-") else { return false }
                continue
            }
            let nibble: UInt8
            switch character {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = character - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = character - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = character - UInt8(ascii: "A") + 10
            default: return false
            }
            if let value = high {
                bytes[out] = value << 4 | nibble
                out += 1
                high = nil
            } else {
                high = nibble
            }
        }
        return out == 16
    }
    return complete ? UUID(uuid: uuid) : nil
}

func usleepMilliseconds(_ milliseconds: Int) {
    usleep(UInt32(milliseconds * 1000))
}
