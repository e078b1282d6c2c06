internal import CNghttp2
import APNs
#if canImport(Glibc)
import Glibc
#endif

/// One client connection: TLS handshake, then an nghttp2 server session fed from the socket.
///
/// Thread ownership: created, driven and closed on one event-loop thread; nghttp2 calls back
/// into it only from inside `nghttp2_session_mem_recv`/`mem_send` on that thread.
final class HTTP2Connection: EventLoopHandler {
    private enum Phase { case handshaking, open, draining, closed }

    let id: UInt64
    private let fd: Int32
    private unowned let loop: EventLoop
    private let core: ServerCore
    private let tls: TLSSession
    private var session: OpaquePointer?
    private var phase = Phase.handshaking
    private var logic: ConnectionLogic
    private var faults: FaultView
    private var streams: [Int32: StreamState] = [:]
    /// Header and data callbacks arrive in runs for one stream; remembering the last one
    /// spares a dictionary lookup per header.
    private var recentStream: StreamState?
    private var readBuffer = [UInt8](repeating: 0, count: 32 * 1024)
    private let readsAhead: Bool
    private var output: [UInt8] = []
    private var outputOffset = 0
    private var wantsWritable = false
    /// The client ended the connection (sent GOAWAY, closed or reset its end) before the mock
    /// sent any GOAWAY.
    private var closedByClient = false
    private var streamsBegun = 0
    private var goawayLastStreamID: Int32?
    /// Timers hold the connection strongly and are cancelled on close: a weak reference would
    /// push every retain of this object, several per request, onto Swift's slow side-table path.
    private var timers: Set<EventLoop.TimerID> = []
    /// The header fields of recent requests with their bytes: a client repeats the same
    /// authorization (a ~200-byte token), topic, push type and priority on every stream, and a
    /// field made once serves them all (the validation memo then compares them by identity).
    private var recentFields: [RecentField] = []
    /// Streams that ended, kept with their buffers' capacity for the next ones: a stream
    /// object, its header list and its body were three allocations per request.
    private var spareStreams: [StreamState] = []
    /// Reused for every answer's header list.
    private var responseFields: [(String, String)] = []
    private let onClose: (HTTP2Connection) -> Void

    fileprivate final class StreamState {
        var id: Int32
        var request: IncomingRequest
        var refused = false
        var answered = false
        var responseBody: [UInt8] = []
        var responseOffset = 0
        /// The answer a delay holds back; the loop's queue holds only the stream's id, so
        /// an answer is not copied in and out of it.
        var heldAnswer: Answer?
        init(streamID: Int32) {
            id = streamID
            request = IncomingRequest(streamID: streamID)
        }

        /// Ready for another stream, keeping the capacity of its header list and body.
        func reuse(for streamID: Int32) {
            id = streamID
            request.streamID = streamID
            request.method = ""
            request.path = ""
            request.headers.removeAll(keepingCapacity: true)
            request.body.removeAll(keepingCapacity: true)
            request.bodyTruncated = false
            refused = false
            answered = false
            responseBody = []
            responseOffset = 0
            heldAnswer = nil
        }
    }

    private struct RecentField {
        let name: [UInt8]
        let value: [UInt8]
        let field: HeaderField

        func matches(name otherName: UnsafeBufferPointer<UInt8>, value otherValue: UnsafeBufferPointer<UInt8>) -> Bool {
            value.count == otherValue.count && name.count == otherName.count
                && value.withUnsafeBufferPointer { memcmp($0.baseAddress!, otherValue.baseAddress!, value.count) == 0 }
                && name.withUnsafeBufferPointer { memcmp($0.baseAddress!, otherName.baseAddress!, name.count) == 0 }
        }
    }

    init(id: UInt64, fd: Int32, tls: TLSSession, loop: EventLoop, core: ServerCore,
         role: ListenerRole = .notifications, onClose: @escaping (HTTP2Connection) -> Void) {
        self.id = id
        self.fd = fd
        self.tls = tls
        self.loop = loop
        self.core = core
        self.onClose = onClose
        self.logic = core.makeLogic(connectionID: id, role: role)
        self.faults = FaultView(store: core.faultStore)
        self.readsAhead = core.configuration.readAhead
    }

    deinit {
        if let session { nghttp2_session_del(session) }
    }

    func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
        switch phase {
        case .handshaking: continueHandshake()
        case .open:
            if readable || hangup { readAvailable() }
            if phase == .open { flush() }
        case .draining: discardUntilEOF()
        case .closed: break
        }
    }

    // MARK: handshake

    /// A client that never finishes the TLS handshake would otherwise hold its socket forever.
    func armHandshakeTimeout(milliseconds: UInt64) {
        schedule(afterMilliseconds: milliseconds) { connection in
            if connection.phase == .handshaking { connection.close() }
        }
    }

    private func schedule(afterMilliseconds delay: UInt64, _ action: @escaping (HTTP2Connection) -> Void) {
        var id: EventLoop.TimerID?
        id = loop.schedule(afterMilliseconds: delay) { [self] in
            if let id { timers.remove(id) }
            action(self)
        }
        if let id { timers.insert(id) }
    }

    private func continueHandshake() {
        switch tls.handshake() {
        case .done:
            if tls.resumedSession { core.accounting.recordHandshakeResumed() }
            guard tls.negotiatedH2 else { return close() }
            if case .certificate = core.configuration.authentication, !tls.hasVerifiedPeerCertificate {
                core.accounting.recordRefusedCertificate()
                // Closed before anything was read or written after the handshake: the client gets
                // an RST where the alert would have been.
                return core.configuration.refusedCertificateReset ? resetConnection() : refuseHandshake()
            }
            if case .certificate = core.configuration.authentication, let subject = tls.peerCertificateSubject {
                core.accounting.recordClientCertificate(connectionID: id, subject: subject)
            }
            faults.refresh()
            guard startSession() else { return close() }
            phase = .open
            if let seconds = faults.faults.goawayAfterSeconds {
                schedule(afterMilliseconds: UInt64(seconds * 1000)) { $0.sendGoawayAfterLastProcessed() }
            }
            readAvailable()
            if phase == .open { flush() }
        case .wantRead: setWritableInterest(false)
        case .wantWrite: setWritableInterest(true)
        case .failed(let reason):
            // OpenSSL's words for a chain that did not verify or a certificate that was not sent.
            if case .certificate = core.configuration.authentication, Self.mentionsCertificate(reason) {
                core.accounting.recordRefusedCertificate()
            }
            refuseHandshake()
        }
    }

    /// The handshake failed (a client certificate refused, say) and OpenSSL has written its
    /// alert. Half-closes and reads until the client closes, as `beginDraining` does: a TLS 1.3
    /// client sends its request before it reads the server's verdict on its certificate, and
    /// closing with that request unread would send an RST that can discard the alert, leaving
    /// the client a bare "connection reset" instead of the reason.
    private func refuseHandshake() {
        guard phase == .handshaking else { return close() }
        phase = .draining
        setWritableInterest(false)
        _ = shutdown(fd, Int32(SHUT_WR))
        schedule(afterMilliseconds: 2000) { $0.close() }
        discardUntilEOF()
    }

    /// Whether OpenSSL's error text names a certificate ("certificate verify failed", "peer did
    /// not return a certificate"). A byte search: the module does without _StringProcessing.
    private static func mentionsCertificate(_ text: String) -> Bool {
        let needle = Array("certificate".utf8)
        let bytes = Array(text.utf8)
        guard bytes.count >= needle.count else { return false }
        return (0...(bytes.count - needle.count)).contains { bytes[$0..<($0 + needle.count)].elementsEqual(needle) }
    }

    private func startSession() -> Bool {
        var callbacks: OpaquePointer?
        guard nghttp2_session_callbacks_new(&callbacks) == 0, let callbacks else { return false }
        defer { nghttp2_session_callbacks_del(callbacks) }
        nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, onBeginHeaders)
        nghttp2_session_callbacks_set_on_header_callback(callbacks, onHeader)
        nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, onDataChunk)
        nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, onFrameReceived)
        nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, onStreamClose)
        var options: OpaquePointer?
        guard nghttp2_option_new(&options) == 0, let options else { return false }
        defer { nghttp2_option_del(options) }
        nghttp2_option_set_no_closed_streams(options, 1)
        // nghttp2's rapid-reset guard (CVE-2023-44487) stays at its default, as servers that
        // count client resets keep it: a client that resets answered streams loses its
        // connection here as it would there, and `clientResetsAfterAnswer` shows why.
        if faults.faults.ignorePings { nghttp2_option_set_no_auto_ping_ack(options, 1) }
        var newSession: OpaquePointer?
        let userData = Unmanaged.passUnretained(self).toOpaque()
        guard nghttp2_session_server_new2(&newSession, callbacks, userData, options) == 0, let newSession else { return false }
        session = newSession
        // APNs clients never use stream priorities; opting out spares nghttp2 its priority tree.
        var entries = [
            nghttp2_settings_entry(
                settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: UInt32(logic.initialMaxConcurrentStreams)),
            nghttp2_settings_entry(settings_id: Int32(NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES.rawValue), value: 1),
        ]
        guard nghttp2_submit_settings(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entries, entries.count) == 0 else { return false }
        // A thousand streams of small payloads outrun the 64 KiB connection window; a large one
        // keeps clients from stalling on WINDOW_UPDATE round trips.
        return nghttp2_session_set_local_window_size(newSession, UInt8(NGHTTP2_FLAG_NONE.rawValue), 0, 16 * 1024 * 1024) == 0
    }

    @discardableResult
    private func submitMaxConcurrentStreams(_ value: Int) -> Bool {
        guard let session else { return false }
        var entry = nghttp2_settings_entry(
            settings_id: Int32(NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS.rawValue), value: UInt32(value))
        return nghttp2_submit_settings(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), &entry, 1) == 0
    }

    // MARK: reading

    /// Reads at most a few buffers per wake-up so one busy client cannot starve the others;
    /// epoll is level-triggered and calls again while the socket has input. Bytes OpenSSL
    /// already holds are not visible to epoll, so those are always drained.
    private func readAvailable() {
        var reads = 0
        while phase == .open && (reads < 16 || tls.hasBufferedInput) {
            reads += 1
            switch tls.read(into: &readBuffer) {
            case .bytes(let count):
                let consumed = readBuffer.withUnsafeBufferPointer { nghttp2_session_mem_recv(session, $0.baseAddress, count) }
                if consumed < 0 { return close() }
                // With read-ahead one read of the socket takes all it holds, up to OpenSSL's
                // buffer; once OpenSSL has none of it left, the next read would only find
                // EAGAIN, a system call per wake-up for nothing. Should the socket still hold
                // more, epoll (level-triggered) reports it again.
                if readsAhead && !tls.hasBufferedInput { return }
            case .wantRead: return
            case .wantWrite: return setWritableInterest(true)
            case .closed:
                // An end of input or a reset while open is the client's doing, unless the mock had
                // asked it to go: told apart in the stats, so a client's reconnects show as such.
                closedByClient = goawayLastStreamID == nil
                return close()
            case .failed: return close()
            }
        }
    }

    // MARK: writing

    /// Answers that come due in the same pass of the loop (requests read together, with the
    /// same delay) go out in one TLS write, as they do without a delay: a write per answer
    /// cost the mock and its client a system call each, which no server answering many
    /// streams at once makes.
    private var flushQueued = false
    /// Answers of this connection the loop's `DelayedAnswers` holds.
    private var delayedAnswersHeld = 0

    /// Submits an answer whose delay is over; true when the connection is to be written
    /// once the pass has submitted every due answer (the first of the pass for it).
    func submitDelayedAnswer(_ streamID: Int32) -> Bool {
        delayedAnswersHeld -= 1
        // A stream the client reset meanwhile is gone, and its answer with it.
        guard phase == .open, let stream = lookUp(streamID), let answer = stream.heldAnswer else { return false }
        stream.heldAnswer = nil
        respond(streamID, answer)
        guard !flushQueued, phase == .open else { return false }
        flushQueued = true
        return true
    }

    func flushDelayedAnswers() {
        flushQueued = false
        guard phase == .open else { return }
        core.accounting.recordDelayedAnswerWrite()
        flush()
    }

    private func flush() {
        guard phase == .open, let session else { return }
        while true {
            if outputOffset < output.count {
                switch tls.write(output, from: outputOffset) {
                case .bytes(let written):
                    outputOffset += written
                    if outputOffset < output.count { continue }
                    output.removeAll(keepingCapacity: true)
                    outputOffset = 0
                case .wantWrite, .wantRead: return setWritableInterest(true)
                case .closed, .failed: return close()
                }
            }
            var chunk: UnsafePointer<UInt8>?
            let length = nghttp2_session_mem_send(session, &chunk)
            if length < 0 { return close() }
            if length == 0 { break }
            if let chunk { output.append(contentsOf: UnsafeBufferPointer(start: chunk, count: length)) }
            while output.count < 64 * 1024 {
                let more = nghttp2_session_mem_send(session, &chunk)
                if more < 0 { return close() }
                if more == 0 { break }
                if let chunk { output.append(contentsOf: UnsafeBufferPointer(start: chunk, count: more)) }
            }
        }
        setWritableInterest(false)
        if nghttp2_session_want_read(session) == 0 && nghttp2_session_want_write(session) == 0 {
            beginDraining()
        }
    }

    private func setWritableInterest(_ writable: Bool) {
        guard writable != wantsWritable, phase != .closed else { return }
        wantsWritable = writable
        loop.setWritableInterest(fd: fd, writable)
    }

    // MARK: requests

    fileprivate func beginStream(_ streamID: Int32) {
        guard phase == .open else { return }
        let stream: StreamState
        if let spare = spareStreams.popLast() {
            spare.reuse(for: streamID)
            stream = spare
        } else {
            stream = StreamState(streamID: streamID)
        }
        if let last = goawayLastStreamID, streamID > last { stream.refused = true }
        streams[streamID] = stream
        recentStream = stream
        guard !stream.refused else { return }
        streamsBegun += 1
        faults.refresh()
        if let limit = faults.faults.goawayAfterStreams, streamsBegun >= limit, goawayLastStreamID == nil {
            submitGoaway(lastStreamID: streamID)
        }
    }

    /// Keeps only what APNs reads (`:method`, `:path`, `authorization`, `apns-*`) and reuses
    /// the fields of earlier requests when the bytes repeat.
    fileprivate func addHeader(_ streamID: Int32, name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) {
        guard let stream = lookUp(streamID), let first = name.first, let nameStart = name.baseAddress else { return }
        if first == UInt8(ascii: ":") {
            if name.count == 7 && memcmp(nameStart, HeaderNames.method.utf8Start, 7) == 0 {
                stream.request.method = String(decoding: value, as: UTF8.self)
            } else if name.count == 5 && memcmp(nameStart, HeaderNames.path.utf8Start, 5) == 0 {
                stream.request.path = String(decoding: value, as: UTF8.self)
            }
            return
        }
        if (name.count == 13 && memcmp(nameStart, HeaderNames.authorization.utf8Start, 13) == 0)
            || (name.count > 5 && memcmp(nameStart, HeaderNames.apnsPrefix.utf8Start, 5) == 0) {
            stream.request.headers.append(recentField(name: name, value: value))
        }
    }

    private func recentField(name: UnsafeBufferPointer<UInt8>, value: UnsafeBufferPointer<UInt8>) -> HeaderField {
        for recent in recentFields where recent.matches(name: name, value: value) { return recent.field }
        let field = HeaderField(name: String(decoding: name, as: UTF8.self), value: String(decoding: value, as: UTF8.self))
        let entry = RecentField(name: Array(name), value: Array(value), field: field)
        // One entry per name: a header whose value changes on every request (apns-id) replaces
        // its own entry and leaves the repeated ones be.
        if let index = recentFields.firstIndex(where: { $0.name.elementsEqual(name) }) {
            recentFields[index] = entry
        } else if recentFields.count < Self.recentFieldLimit {
            recentFields.append(entry)
        }
        return field
    }

    /// More distinct header names than APNs defines means a client sending made-up ones; those
    /// are simply not remembered.
    private static let recentFieldLimit = 16

    private func lookUp(_ streamID: Int32) -> StreamState? {
        if let recent = recentStream, recent.id == streamID { return recent }
        let found = streams[streamID]
        recentStream = found
        return found
    }

    fileprivate func addBody(_ streamID: Int32, _ bytes: UnsafeBufferPointer<UInt8>) {
        guard let stream = lookUp(streamID) else { return }
        if stream.request.body.count + bytes.count > IncomingRequest.maximumBodyBytes {
            stream.request.bodyTruncated = true
        } else {
            stream.request.body.append(contentsOf: bytes)
        }
    }

    fileprivate func completeRequest(_ streamID: Int32) {
        // After a reset, nghttp2 may still deliver the rest of the buffer it was parsing; those
        // requests were never answered and must not be counted.
        guard phase == .open, let stream = lookUp(streamID) else { return }
        if stream.refused {
            core.accounting.recordRefusedStream()
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, NGHTTP2_REFUSED_STREAM.rawValue)
            return
        }
        core.accounting.recordRequestReceived(path: stream.request.path)
        faults.refresh()
        let checksBefore = logic.tokens.signatureChecks
        let verdict = logic.handle(stream.request, faults: faults.faults, now: ServerCore.wallClockSeconds())
        if logic.tokens.signatureChecks != checksBefore {
            core.accounting.recordTokenVerifications(logic.tokens.signatureChecks - checksBefore)
        }
        switch consume verdict {
        case .resetConnection:
            core.accounting.recordReset()
            resetConnection()
        case .resetStream(let errorCode):
            core.accounting.recordStreamReset()
            // Ended by the mock: a client's reset of it afterwards is not one of a waiting stream.
            stream.answered = true
            nghttp2_submit_rst_stream(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), streamID, errorCode)
        case .answer(let answer):
            if answer.delayMilliseconds == 0 {
                respond(streamID, answer)
            } else {
                stream.heldAnswer = answer
                delayedAnswersHeld += 1
                loop.delayedAnswers.add(streamID: streamID, on: self, delayMilliseconds: answer.delayMilliseconds)
            }
        }
    }

    fileprivate func pingReceived() { core.accounting.recordPing() }

    /// A stream no longer in the table has ended, and every stream ends with our answer or our
    /// own RST_STREAM, so a reset of it came after its answer.
    fileprivate func resetReceived(_ streamID: Int32) {
        let afterAnswer = streams[streamID].map { $0.answered || $0.refused } ?? true
        core.accounting.recordClientReset(afterAnswer: afterAnswer)
    }

    fileprivate func streamClosed(_ streamID: Int32) {
        if recentStream?.id == streamID { recentStream = nil }
        guard let stream = streams.removeValue(forKey: streamID) else { return }
        stream.heldAnswer = nil
        if spareStreams.count < Self.spareStreamLimit && stream.request.body.capacity <= Self.spareBodyCapacityLimit {
            spareStreams.append(stream)
        }
    }

    /// Enough for the bursts of a connection at a thousand streams without holding on to more.
    private static let spareStreamLimit = 256
    /// A stream that carried a large payload is let go rather than kept with its buffer, so the
    /// spares of a connection stay within a few MB.
    private static let spareBodyCapacityLimit = 8 * 1024

    private func respond(_ streamID: Int32, _ answer: Answer) {
        guard phase == .open, let stream = lookUp(streamID), let session else { return }
        if answer.status == 200 && answer.countsAsNotification {
            core.accounting.recordAccepted(answer.logEntry, token: answer.token)
        } else if let reason = answer.reason {
            core.accounting.recordRejected(status: answer.status, reason: reason, token: answer.token)
        }
        var fields = responseFields
        responseFields = []
        defer {
            fields.removeAll(keepingCapacity: true)
            responseFields = fields
        }
        fields.append((":status", answer.status == 200 ? "200" : String(answer.status)))
        if !answer.apnsID.isEmpty { fields.append(("apns-id", answer.apnsID)) }
        for header in answer.extraHeaders { fields.append((header.name, header.value)) }
        let result: Int32
        if let body = answer.body {
            fields.append(("content-type", "application/json"))
            fields.append(("content-length", String(body.count)))
            stream.responseBody = body
            stream.responseOffset = 0
            var provider = nghttp2_data_provider(source: nghttp2_data_source(ptr: nil), read_callback: readResponseBody)
            result = withHeaderList(fields) { nghttp2_submit_response(session, streamID, $0, $1, &provider) }
        } else {
            result = withHeaderList(fields) { nghttp2_submit_response(session, streamID, $0, $1, nil) }
        }
        if result != 0 { return close() }
        stream.answered = true
        if let newLimit = answer.newMaxConcurrentStreams { submitMaxConcurrentStreams(newLimit) }
    }

    fileprivate func responseBody(_ streamID: Int32, into buffer: UnsafeMutablePointer<UInt8>, capacity: Int) -> (Int, Bool) {
        guard let stream = lookUp(streamID) else { return (0, true) }
        let count = min(capacity, stream.responseBody.count - stream.responseOffset)
        if count > 0 {
            stream.responseBody.withUnsafeBufferPointer { source in
                buffer.update(from: source.baseAddress! + stream.responseOffset, count: count)
            }
        }
        stream.responseOffset += count
        return (count, stream.responseOffset == stream.responseBody.count)
    }

    // MARK: GOAWAY, reset, close

    private static let goawayReason = Array(#"{"reason":"Shutdown"}"#.utf8)

    private func submitGoaway(lastStreamID: Int32) {
        guard let session, goawayLastStreamID == nil else { return }
        goawayLastStreamID = lastStreamID
        core.accounting.recordGoaway(connectionID: id, lastStreamID: lastStreamID)
        // APNs's GOAWAY carries JSON with a reason; the mock ends connections only as a server
        // shutting down does.
        Self.goawayReason.withUnsafeBufferPointer { reason in
            _ = nghttp2_submit_goaway(session, UInt8(NGHTTP2_FLAG_NONE.rawValue), lastStreamID, NGHTTP2_NO_ERROR.rawValue,
                                      reason.baseAddress, reason.count)
        }
    }

    private func sendGoawayAfterLastProcessed() {
        guard phase == .open, let session else { return }
        submitGoaway(lastStreamID: nghttp2_session_get_last_proc_stream_id(session))
        flush()
    }

    /// Sends GOAWAY now, keeping every stream already begun (for the control API).
    func goawayNow() { sendGoawayAfterLastProcessed() }

    private func resetConnection() {
        var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
        _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
        close()
    }

    /// Half-closes and reads until the peer closes, so the last frames are not lost to an RST
    /// that closing with unread input would send.
    private func beginDraining() {
        guard phase == .open else { return }
        // The session wants nothing more although the mock sent no GOAWAY: the client did.
        if goawayLastStreamID == nil { closedByClient = true }
        phase = .draining
        tls.sendCloseNotify()
        _ = shutdown(fd, Int32(SHUT_WR))
        schedule(afterMilliseconds: 2000) { $0.close() }
        discardUntilEOF()
    }

    private func discardUntilEOF() {
        var scratch = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = scratch.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count > 0 { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) { return }
            return close()
        }
    }

    func close() {
        guard phase != .closed else { return }
        phase = .closed
        recentStream = nil
        for timer in timers { loop.cancel(timer) }
        timers.removeAll()
        if delayedAnswersHeld > 0 {
            loop.delayedAnswers.drop(for: self)
            delayedAnswersHeld = 0
        }
        loop.unregister(fd: fd)
        Glibc.close(fd)
        streams.removeAll()
        core.accounting.recordConnectionClosed(byClient: closedByClient)
        onClose(self)
    }
}

/// Builds nghttp2's name/value array on the stack for the duration of `body`; nghttp2 copies
/// the bytes before returning.
private func withHeaderList(
    _ fields: [(String, String)], _ body: (UnsafePointer<nghttp2_nv>, Int) -> Int32
) -> Int32 {
    let total = fields.reduce(0) { $0 + $1.0.utf8.count + $1.1.utf8.count }
    return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: max(total, 1)) { bytes in
        withUnsafeTemporaryAllocation(of: nghttp2_nv.self, capacity: fields.count) { list in
            // Every apns-id is new: indexing it would only churn the HPACK table.
            let noIndex = UInt8(NGHTTP2_NV_FLAG_NO_INDEX.rawValue)
            let base = bytes.baseAddress!
            var offset = 0
            // Copied a string at a time: byte by byte through `utf8` cost ~1,900 instructions per answer.
            func copy(_ text: String) -> UnsafeMutablePointer<UInt8> {
                var text = text
                let start = base + offset
                text.withUTF8 { utf8 in
                    if let source = utf8.baseAddress { start.update(from: source, count: utf8.count) }
                    offset += utf8.count
                }
                return start
            }
            for (index, (name, value)) in fields.enumerated() {
                let nameStart = copy(name)
                let valueStart = copy(value)
                list.initializeElement(at: index, to: nghttp2_nv(
                    name: nameStart, value: valueStart, namelen: name.utf8.count, valuelen: value.utf8.count,
                    flags: name == "apns-id" ? noIndex : UInt8(NGHTTP2_NV_FLAG_NONE.rawValue)))
            }
            return body(list.baseAddress!, fields.count)
        }
    }
}

/// Header names compared byte-wise on every request.
private enum HeaderNames {
    static let method: StaticString = ":method"
    static let path: StaticString = ":path"
    static let authorization: StaticString = "authorization"
    static let apnsPrefix: StaticString = "apns-"
}

private func connection(_ userData: UnsafeMutableRawPointer?) -> HTTP2Connection {
    Unmanaged<HTTP2Connection>.fromOpaque(userData!).takeUnretainedValue()
}

private let onBeginHeaders: nghttp2_on_begin_headers_callback = { _, frame, userData in
    guard let frame, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue),
          frame.pointee.headers.cat == NGHTTP2_HCAT_REQUEST else { return 0 }
    connection(userData).beginStream(frame.pointee.hd.stream_id)
    return 0
}

private let onHeader: nghttp2_on_header_callback = { _, frame, name, nameLength, value, valueLength, _, userData in
    guard let frame, let name, let value, frame.pointee.hd.type == UInt8(NGHTTP2_HEADERS.rawValue) else { return 0 }
    connection(userData).addHeader(
        frame.pointee.hd.stream_id,
        name: UnsafeBufferPointer(start: name, count: nameLength),
        value: UnsafeBufferPointer(start: value, count: valueLength))
    return 0
}

private let onDataChunk: nghttp2_on_data_chunk_recv_callback = { _, _, streamID, data, length, userData in
    guard let data else { return 0 }
    connection(userData).addBody(streamID, UnsafeBufferPointer(start: data, count: length))
    return 0
}

private let onFrameReceived: nghttp2_on_frame_recv_callback = { _, frame, userData in
    guard let frame else { return 0 }
    let type = frame.pointee.hd.type
    let endsStream = frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_END_STREAM.rawValue) != 0
    if endsStream && (type == UInt8(NGHTTP2_HEADERS.rawValue) || type == UInt8(NGHTTP2_DATA.rawValue)) {
        connection(userData).completeRequest(frame.pointee.hd.stream_id)
    } else if type == UInt8(NGHTTP2_PING.rawValue), frame.pointee.hd.flags & UInt8(NGHTTP2_FLAG_ACK.rawValue) == 0 {
        connection(userData).pingReceived()
    } else if type == UInt8(NGHTTP2_RST_STREAM.rawValue) {
        connection(userData).resetReceived(frame.pointee.hd.stream_id)
    }
    return 0
}

private let onStreamClose: nghttp2_on_stream_close_callback = { _, streamID, _, userData in
    connection(userData).streamClosed(streamID)
    return 0
}

private let readResponseBody: nghttp2_data_source_read_callback = { _, streamID, buffer, length, flags, _, userData in
    guard let buffer, let flags else { return 0 }
    let (count, finished) = connection(userData).responseBody(streamID, into: buffer, capacity: length)
    if finished { flags.pointee |= UInt32(NGHTTP2_DATA_FLAG_EOF.rawValue) }
    return count
}
