internal import COpenSSL
import Glibc

/// HTTP/2 PING keep-alive for the connections of one event loop, and the loop's view of how
/// its connections end.
///
/// libcurl 7.88 cannot send a PING on a multi handle's connections: `curl_easy_upkeep` only
/// reaches connections of the easy interface. So the loop does it itself, on connections
/// libcurl is not using at that moment (it watches no socket of an idle connection):
/// - A connection is identified once, from a transfer running on it: libcurl's OpenSSL
///   session (`CURLINFO_TLS_SSL_PTR`, at the response's status line) and the local port libcurl
///   sent it from (`CURLOPT_PREREQFUNCTION`), which names one of the loop's sockets. An ex_data slot on the session reports when OpenSSL frees it, so a
///   closed connection is never touched.
/// - After `interval` without use, a PING frame is written through that TLS session (on a
///   socket BIO standing in for libcurl's own, which only works inside libcurl's calls).
/// - `timeout` later the answer is looked at without taking it: exactly the PING ACK asked for
///   is read and dropped, so the next PING's answer can be seen; any other frame (a GOAWAY,
///   new SETTINGS) is left for libcurl, which reads it before it next uses the connection.
///   No answer at all: the connection is dead, and its socket is shut down so that libcurl
///   finds it closed instead of sending into it.
///
/// A GOAWAY seen that way, or a connection the server closed in order (its TLS close_notify
/// had arrived when libcurl freed the session — servers close so after a GOAWAY), is counted
/// as `goaway`; libcurl itself reports neither.
///
/// Not used through an HTTPS proxy: the TLS session to APNs then runs inside the proxy's.
///
/// Thread rule: touched only on the loop's thread (OpenSSL frees a session inside a libcurl
/// call on that thread, or in `curl_multi_cleanup` after the thread has stopped).
final class ConnectionKeepAlive {
    private struct Connection {
        let ssl: OpaquePointer
        let fd: Int32
        let port: Int32
        /// Last use by libcurl or last PING: the next PING is due `interval` after it.
        var idleSince: UInt64
        /// Last use by libcurl: after `idleClose` of none the connection is closed.
        var lastUsed: UInt64
        var pingSentAt: UInt64 = 0
        var awaitingAck = false
        /// Frames other than our PING ACK wait for libcurl: no more PINGs until it has used the connection.
        var quiet = false
        var goawaySeen = false
        var dead = false
        /// libcurl sent a request first on this connection and then again elsewhere.
        var requestsMovedAway = false
    }

    let enabled: Bool
    private let interval: UInt64
    private let timeout: UInt64
    private let counters: DispatcherCounters
    private let metrics: any DispatcherMetricsHook
    private var connections: [Connection] = []
    /// Sockets opened and not yet matched with a TLS session; while any exist, transfers look
    /// up their session.
    private var unidentified: Set<Int32> = []
    private var nextPingOpaque: UInt64 = 1
    /// Local ports of the last connections libcurl closed while the server had said nothing
    /// more; a request later found resent from one of them tells that it was a GOAWAY.
    private var quietlyEnded: [Int32] = []
    /// Set while the multi handle is being cleaned up: sessions freed then are not counted.
    var closing = false

    private(set) var nextDeadline = UInt64.max

    private let idleClose: UInt64

    init(enabled: Bool, intervalMilliseconds: Int, timeoutMilliseconds: Int, idleCloseSeconds: Int,
         counters: DispatcherCounters, metrics: any DispatcherMetricsHook) {
        self.enabled = enabled
        interval = UInt64(intervalMilliseconds) * 1_000_000
        timeout = UInt64(timeoutMilliseconds) * 1_000_000
        idleClose = UInt64(idleCloseSeconds) * 1_000_000_000
        self.counters = counters
        self.metrics = metrics
    }

    var identifying: Bool { enabled && !unidentified.isEmpty }

    func socketOpened(_ fd: Int32) {
        if enabled { unidentified.insert(fd) }
    }

    func socketClosed(_ fd: Int32) {
        unidentified.remove(fd)
        // The session is normally freed (and dropped) before its socket closes; this covers
        // a socket whose session was never matched.
        connections.removeAll { $0.fd == fd }
    }

    /// A transfer that libcurl sent from `localPort` runs over `session`: if that port is an
    /// unidentified socket's, remember the pair.
    func identify(session: OpaquePointer, localPort: Int32, now: UInt64) {
        guard enabled, localPort > 0, !connections.contains(where: { $0.ssl == session }) else { return }
        for fd in unidentified where Self.localPort(of: fd) == localPort {
            unidentified.remove(fd)
            SSL_set_ex_data(session, sessionFreedIndex, Unmanaged.passUnretained(self).toOpaque())
            connections.append(Connection(ssl: session, fd: fd, port: localPort, idleSince: now, lastUsed: now))
            nextDeadline = min(nextDeadline, now + interval)
            return
        }
    }

    private enum PeerState { case finishing, reset, silent }

    /// libcurl is closing this connection: did the server reset it, end its side in order (its
    /// FIN or close_notify racing libcurl's close after a GOAWAY), or say nothing more? Asks the
    /// kernel and looks at the raw socket without reading, so nothing is taken from TLS.
    private static func peerState(_ fd: Int32) -> PeerState {
        var info = tcp_info()
        var length = socklen_t(MemoryLayout<tcp_info>.size)
        if getsockopt(fd, Int32(IPPROTO_TCP), TCP_INFO, &info, &length) == 0 {
            switch Int32(info.tcpi_state) {
            case Int32(TCP_CLOSE): return .reset          // an RST arrived
            case Int32(TCP_CLOSE_WAIT): return .finishing // the server's FIN arrived
            default: break
            }
        }
        var byte: UInt8 = 0
        let result = recv(fd, &byte, 1, Int32(MSG_PEEK) | Int32(MSG_DONTWAIT))
        if result >= 0 { return .finishing }
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? .silent : .reset
    }

    private static func localPort(of fd: Int32) -> Int32 {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let found = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard found == 0 else { return -1 }
        switch Int32(address.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int32(UInt16(bigEndian: $0.pointee.sin_port)) } }
        case AF_INET6:
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int32(UInt16(bigEndian: $0.pointee.sin6_port)) } }
        default:
            return -1
        }
    }

    /// libcurl now watches (or stopped watching) `fd`: the connection is in use, so it is alive.
    func activity(on fd: Int32, now: UInt64) {
        guard let index = connections.firstIndex(where: { $0.fd == fd }) else { return }
        markInUse(index, now: now)
        nextDeadline = min(nextDeadline, now + interval)
    }

    /// In use means alive: no answer is awaited, and what arrived is libcurl's to read.
    private func markInUse(_ index: Int, now: UInt64) {
        connections[index].idleSince = now
        connections[index].lastUsed = now
        connections[index].awaitingAck = false
        connections[index].quiet = false
    }

    /// OpenSSL is freeing `ssl` (libcurl closed the connection).
    fileprivate func sessionFreed(_ ssl: OpaquePointer) {
        guard let index = connections.firstIndex(where: { $0.ssl == ssl }) else { return }
        let connection = connections.remove(at: index)
        guard !closing, !connection.goawaySeen, !connection.dead else { return }
        if pushd_openssl_ssl_received_shutdown(ssl) != 0 { return report(.goaway) }
        switch Self.peerState(connection.fd) {
        case .finishing: report(.goaway)
        case .reset: report(.reset)
        case .silent where connection.requestsMovedAway: report(.goaway)
        case .silent:
            // libcurl closes a connection as soon as its last stream under a GOAWAY ends, often
            // before the server's close_notify arrives; the requests it resends elsewhere tell.
            quietlyEnded.append(connection.port)
            if quietlyEnded.count > 16 { quietlyEnded.removeFirst() }
        }
    }

    /// libcurl sent a request again after first sending it on the connection from `port`,
    /// which refused it (a GOAWAY above its stream) or died.
    func requestMovedAway(fromPort port: Int32) {
        if let index = connections.firstIndex(where: { $0.port == port }) {
            connections[index].requestsMovedAway = true
        } else if let index = quietlyEnded.firstIndex(of: port) {
            quietlyEnded.remove(at: index)
            report(.goaway)
        }
    }

    /// Sends due PINGs and judges due answers. `isWatched(fd)`: libcurl has the socket in use.
    func tick(now: UInt64, isWatched: (Int32) -> Bool) {
        guard now >= nextDeadline else { return }
        var next = UInt64.max
        for index in connections.indices {
            if connections[index].dead { continue }
            if isWatched(connections[index].fd) {
                markInUse(index, now: now)
                next = min(next, now + interval)
                continue
            }
            if now >= connections[index].lastUsed + idleClose {
                // Unused for the idle-close time: PINGs must not keep it open for ever. libcurl
                // closes it when it next looks at it (before any reuse).
                connections[index].dead = true
                _ = shutdown(connections[index].fd, Int32(SHUT_RDWR))
                counters.idleClosed.add(1, ordering: .relaxed)
                continue
            }
            if connections[index].awaitingAck {
                if now >= connections[index].pingSentAt + timeout {
                    judgeAnswer(index, now: now)
                } else {
                    next = min(next, connections[index].pingSentAt + timeout)
                    continue
                }
            } else if !connections[index].quiet, now >= connections[index].idleSince + interval {
                sendPing(index, now: now)
            }
            if connections[index].dead { continue }
            next = min(next, connections[index].lastUsed + idleClose)
            if connections[index].quiet { continue }
            next = min(next, connections[index].awaitingAck ? connections[index].pingSentAt + timeout
                                                           : connections[index].idleSince + interval)
        }
        nextDeadline = next
    }

    private func sendPing(_ index: Int, now: UInt64) {
        var frame = [UInt8](repeating: 0, count: 17)
        frame[2] = 8                                   // length
        frame[3] = 6                                   // PING, no flags, stream 0
        let opaque = nextPingOpaque
        nextPingOpaque &+= 1
        for byte in 0..<8 { frame[9 + byte] = UInt8(truncatingIfNeeded: opaque >> (56 - 8 * UInt64(byte))) }
        var sslError: Int32 = 0
        let written = frame.withUnsafeMutableBytes {
            pushd_openssl_io_on_fd(connections[index].ssl, connections[index].fd, 0, $0.baseAddress, 17, &sslError)
        }
        guard written == 17 else {
            // A partial or refused write leaves the TLS stream unusable for libcurl: end it.
            markDead(index, reason: .reset)
            return
        }
        connections[index].awaitingAck = true
        connections[index].pingSentAt = now
        connections[index].idleSince = now
        counters.pingsSent.add(1, ordering: .relaxed)
    }

    private func judgeAnswer(_ index: Int, now: UInt64) {
        connections[index].awaitingAck = false
        connections[index].idleSince = now
        var buffer = [UInt8](repeating: 0, count: 512)
        var sslError: Int32 = 0
        let ssl = connections[index].ssl
        let fd = connections[index].fd
        let peeked = buffer.withUnsafeMutableBytes { pushd_openssl_io_on_fd(ssl, fd, 1, $0.baseAddress, 512, &sslError) }
        if peeked <= 0 {
            if sslError == pushd_openssl_ssl_error_want_read() || sslError == pushd_openssl_ssl_error_want_write() {
                counters.pingTimeouts.add(1, ordering: .relaxed)
                markDead(index, reason: .timeout)
            } else if sslError == pushd_openssl_ssl_error_zero_return() {
                // The server closed in order without a word to libcurl yet.
                markDead(index, reason: .goaway)
            } else {
                markDead(index, reason: .reset)
            }
            return
        }
        let frames = buffer.withUnsafeBytes { H2FrameScan(UnsafeRawBufferPointer(rebasing: $0[0..<Int(peeked)])) }
        if frames.containsGoaway {
            connections[index].goawaySeen = true
            connections[index].quiet = true
            report(.goaway)
            return
        }
        if frames.isSinglePingAck, Int(peeked) == 17 {
            var scratch = [UInt8](repeating: 0, count: 17)
            let read = scratch.withUnsafeMutableBytes { pushd_openssl_io_on_fd(ssl, fd, 2, $0.baseAddress, 17, &sslError) }
            if read == 17 {
                counters.pingsAcknowledged.add(1, ordering: .relaxed)
                return
            }
        }
        // Something else arrived: the connection is alive, and what it said is libcurl's to read.
        connections[index].quiet = true
        counters.pingsAcknowledged.add(1, ordering: .relaxed)
    }

    private func markDead(_ index: Int, reason: ConnectionFailureReason) {
        connections[index].dead = true
        // libcurl's next look at this connection (before reusing it) then finds it closed.
        _ = shutdown(connections[index].fd, Int32(SHUT_RDWR))
        report(reason)
    }

    private func report(_ reason: ConnectionFailureReason) {
        counters.countFailure(reason)
        metrics.connectionFailed(reason)
    }
}

/// Frame headers in bytes read from an HTTP/2 connection (whole frames only).
struct H2FrameScan {
    var containsGoaway = false
    var isSinglePingAck = false

    init(_ bytes: UnsafeRawBufferPointer) {
        var offset = 0
        var frames = 0
        var pingAcks = 0
        while offset + 9 <= bytes.count {
            let length = Int(bytes[offset]) << 16 | Int(bytes[offset + 1]) << 8 | Int(bytes[offset + 2])
            let type = bytes[offset + 3]
            let flags = bytes[offset + 4]
            frames += 1
            if type == 7 { containsGoaway = true }
            if type == 6, flags & 1 != 0, length == 8 { pingAcks += 1 }
            offset += 9 + length
        }
        isSinglePingAck = frames == 1 && pingAcks == 1 && offset == bytes.count
    }
}

/// The ex_data slot through which OpenSSL tells a loop's keep-alive that a session is freed.
private let sessionFreedIndex: Int32 = pushd_openssl_ssl_ex_index { parent, pointer, _, _, _, _ in
    guard let parent, let pointer else { return }
    Unmanaged<ConnectionKeepAlive>.fromOpaque(pointer).takeUnretainedValue().sessionFreed(OpaquePointer(parent))
}
