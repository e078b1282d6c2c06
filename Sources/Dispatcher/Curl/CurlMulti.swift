internal import CCurl
import Glibc
import Polling

/// A libcurl multi handle driven by one epoll loop with `curl_multi_socket_action`: libcurl's
/// socket and timer callbacks become epoll interests and a deadline, and ready descriptors and
/// the expired deadline go back to libcurl. Knows nothing of requests or transfers.
///
/// Thread rule: touched only on the loop's thread (after `init` returns).
final class CurlMulti: EpollHandler {
    let handle: UnsafeMutableRawPointer
    private unowned let loop: EpollLoop
    /// When libcurl wants `curl_multi_socket_action` with CURL_SOCKET_TIMEOUT; `.max` for never.
    private(set) var timerDeadline = UInt64.max
    private var running: Int32 = 0
    /// Set when a socket event went to libcurl; `takeSocketEvents` reads and clears it.
    private var socketEventsHandled = false
    /// Picks, for a socket with events (readable, writable, failed), the transfer that reads it
    /// in place of libcurl running every transfer attached to it (`SocketReadRoute`); nil hands
    /// the event to libcurl as it is.
    var readerForSocket: ((Int32, _ readable: Bool, _ writable: Bool, _ failed: Bool) -> UnsafeMutableRawPointer?)?
    /// Set when a transfer was asked to read its socket; `runReaders` runs it.
    private(set) var readersToRun = false

    init(loop: EpollLoop, connectionsPerHost: Int, connectionCeiling: Int, streamsPerConnection: Int) throws(DispatcherConfigurationError) {
        guard let multi = curl_multi_init() else { throw .transportRejected(setting: "curl_multi_init", message: "out of memory") }
        handle = multi
        self.loop = loop
        let me = Unmanaged.passUnretained(self).toOpaque()
        try check(pushd_curl_multi_setopt_long(multi, CURLMOPT_PIPELINING, pushd_curl_pipe_multiplex()), "CURLMOPT_PIPELINING")
        try check(pushd_curl_multi_setopt_long(multi, CURLMOPT_MAX_HOST_CONNECTIONS, connectionsPerHost), "CURLMOPT_MAX_HOST_CONNECTIONS")
        // Room for as many connections as the loop may grow to and one fresh one while a retired
        // connection whose socket was not known is replaced; more would keep idle ones.
        try check(pushd_curl_multi_setopt_long(multi, CURLMOPT_MAXCONNECTS, connectionCeiling + 1), "CURLMOPT_MAXCONNECTS")
        try check(pushd_curl_multi_setopt_long(multi, CURLMOPT_MAX_CONCURRENT_STREAMS, streamsPerConnection), "CURLMOPT_MAX_CONCURRENT_STREAMS")
        try check(pushd_curl_multi_setopt_socket_cb(multi, curlSocketCallback), "CURLMOPT_SOCKETFUNCTION")
        try check(pushd_curl_multi_setopt_ptr(multi, CURLMOPT_SOCKETDATA, me), "CURLMOPT_SOCKETDATA")
        try check(pushd_curl_multi_setopt_timer_cb(multi, curlTimerCallback), "CURLMOPT_TIMERFUNCTION")
        try check(pushd_curl_multi_setopt_ptr(multi, CURLMOPT_TIMERDATA, me), "CURLMOPT_TIMERDATA")
    }

    private var cleanedUp = false

    /// The connections libcurl may open to the host from now on (`ConnectionPolicy` grows and
    /// shrinks it); libcurl reads it whenever a transfer looks for a connection.
    func setConnectionLimit(_ connections: Int) throws(DispatcherConfigurationError) {
        try check(pushd_curl_multi_setopt_long(handle, CURLMOPT_MAX_HOST_CONNECTIONS, connections), "CURLMOPT_MAX_HOST_CONNECTIONS")
    }

    deinit {
        cleanUp()
    }

    /// Closes libcurl's connections (its close-socket callbacks run now, while their owner
    /// is still whole) and frees the multi handle.
    func cleanUp() {
        guard !cleanedUp else { return }
        cleanedUp = true
        curl_multi_cleanup(handle)
    }

    private func check(_ code: CURLMcode, _ setting: String) throws(DispatcherConfigurationError) {
        if code != CURLM_OK { throw .transportRejected(setting: setting, message: String(cString: curl_multi_strerror(code))) }
    }

    /// nil when libcurl took the handle, else its refusal.
    func add(_ easy: UnsafeMutableRawPointer) -> TransportError? {
        let code = curl_multi_add_handle(handle, easy)
        return code == CURLM_OK ? nil : TransportError(code: -Int(code.rawValue), message: String(cString: curl_multi_strerror(code)))
    }

    func remove(_ easy: UnsafeMutableRawPointer) {
        curl_multi_remove_handle(handle, easy)
    }

    /// Milliseconds until libcurl's timer is due at `now`, -1 when it has none.
    func timerWait(now: UInt64) -> Int64 {
        timerDeadline == .max ? -1 : Int64((max(timerDeadline, now) - now + 999_999) / 1_000_000)
    }

    /// Runs libcurl's timeout action when its deadline has passed; true when it ran.
    @discardableResult
    func runTimerIfDue(now: UInt64) -> Bool {
        guard timerDeadline <= now else { return false }
        timerDeadline = .max
        curl_multi_socket_action(handle, pushd_curl_socket_timeout(), 0, &running)
        return true
    }

    func handleEvents(fd: Int32, _ events: EpollEvents) {
        let readable = events.contains(.readable), writable = events.contains(.writable)
        let failed = events.contains(.hangup) || events.contains(.error)
        if let pick = readerForSocket, let easy = pick(fd, readable, writable, failed), pushd_curl_easy_run_soon(easy) == CURLE_OK {
            readersToRun = true
            socketEventsHandled = true
            return
        }
        var mask: Int32 = 0
        if events.contains(.readable) || events.contains(.hangup) { mask |= pushd_curl_cselect_in() }
        if events.contains(.writable) { mask |= pushd_curl_cselect_out() }
        if events.contains(.error) { mask |= pushd_curl_cselect_err() }
        curl_multi_socket_action(handle, fd, mask, &running)
        socketEventsHandled = true
    }

    /// Runs the transfers `handleEvents` asked to read their sockets, with libcurl's timer action
    /// (which runs them, the transfers whose frames they read, and any timer due); true when it ran.
    @discardableResult
    func runReaders() -> Bool {
        guard readersToRun else { return false }
        readersToRun = false
        timerDeadline = .max
        curl_multi_socket_action(handle, pushd_curl_socket_timeout(), 0, &running)
        return true
    }

    /// True when socket events went to libcurl since the last call.
    func takeSocketEvents() -> Bool {
        defer { socketEventsHandled = false }
        return socketEventsHandled
    }

    /// Finished transfers since the last call: (easy handle, CURLcode). All of libcurl's
    /// messages are taken before `body` sees the first: `curl_multi_remove_handle` walks the
    /// messages not yet read, looking for the handle's own (lib/multi.c at tag curl-8_14_1), so
    /// removing each handle between reads walked the rest of the batch every time, k²/2 steps
    /// for a batch of k (docs/dispatcher-measurements.md, "Streams in flight"). A handle that
    /// `body` removes before its turn (a hand-back) still comes up: the caller skips it.
    func forEachFinished(_ body: (UnsafeMutableRawPointer, CURLcode) -> Void) {
        var remaining: Int32 = 0
        var batch: [(easy: UnsafeMutableRawPointer, code: CURLcode)] = []
        swap(&batch, &finishedBatch)
        while let message = curl_multi_info_read(handle, &remaining) {
            guard pushd_curl_msg_is_done(message) != 0, let easy = message.pointee.easy_handle else { continue }
            batch.append((easy, pushd_curl_msg_result(message)))
        }
        for (easy, code) in batch { body(easy, code) }
        batch.removeAll(keepingCapacity: true)
        swap(&batch, &finishedBatch)
    }

    /// `forEachFinished`'s list, kept between calls so that a batch allocates nothing.
    private var finishedBatch: [(easy: UnsafeMutableRawPointer, code: CURLcode)] = []

    /// libcurl closes `fd`: forget it whatever libcurl last asked for.
    func socketClosing(_ fd: Int32) {
        loop.unwatch(fd: fd)
    }

    fileprivate func socketChanged(_ fd: Int32, what: Int32) {
        if what == pushd_curl_poll_remove() {
            loop.unwatch(fd: fd)
            return
        }
        var wanted: EpollEvents = []
        if what & pushd_curl_poll_in() != 0 { wanted.insert(.readable) }
        if what & pushd_curl_poll_out() != 0 { wanted.insert(.writable) }
        // Only a change of interest costs an epoll_ctl: most stream starts and ends leave it alone.
        guard loop.interest(fd: fd) != wanted else { return }
        do {
            try loop.watch(fd: fd, wanted, handler: self)
        } catch {
            // The descriptor cannot be watched: libcurl would wait on it for ever. Its timer
            // still runs, so the transfers on it end with a timeout instead of hanging.
            loop.unwatch(fd: fd)
        }
    }

    fileprivate func timerChanged(milliseconds: Int) {
        timerDeadline = milliseconds < 0 ? .max : monotonicNanoseconds() + UInt64(milliseconds) * 1_000_000
    }
}

private let curlSocketCallback: pushd_curl_socket_cb = { _, fd, what, userData, _ in
    Unmanaged<CurlMulti>.fromOpaque(userData!)._withUnsafeGuaranteedRef { $0.socketChanged(fd, what: what) }
    return 0
}

private let curlTimerCallback: pushd_curl_timer_cb = { _, milliseconds, userData in
    Unmanaged<CurlMulti>.fromOpaque(userData!)._withUnsafeGuaranteedRef { $0.timerChanged(milliseconds: milliseconds) }
    return 0
}
