internal import COpenSSL
import APNs
#if canImport(Glibc)
import Glibc
#endif

/// The server's SSL_CTX: certificate, key, ALPN `h2`, and optionally a CA that client
/// certificates must chain to (APNs's certificate-auth mode).
///
/// Immutable after init; OpenSSL allows one SSL_CTX to create sessions on several threads.
final class TLSServerContext: @unchecked Sendable {
    private let context: OpaquePointer

    /// - Parameter checksClientCertificateAfterHandshake: with a client CA, complete the handshake
    ///   whatever the client's certificate, so that OpenSSL sends no alert; the connection then
    ///   refuses it (`TLSSession.hasVerifiedPeerCertificate`) by its own means.
    /// - Parameter resetsOnRefusedCertificate: with a client CA, reset the TCP connection the
    ///   moment a client certificate fails verification, inside the handshake, so that no alert
    ///   reaches the client (`resetOnRefusal`).
    /// - Parameter maximumTLSVersion: `.tls12` leaves TLS 1.3 out.
    init(certificateChainFile: String, privateKeyFile: String, clientCAFile: String?, readAhead: Bool = false,
         checksClientCertificateAfterHandshake: Bool = false, resetsOnRefusedCertificate: Bool = false,
         maximumTLSVersion: MockTLSVersion = .tls13) throws(MockServerError) {
        OpenSSLRuntime.initialize()
        guard let context = SSL_CTX_new(TLS_server_method()) else { throw .tls("SSL_CTX_new: \(Self.lastError())") }
        self.context = context
        _ = pushd_openssl_ssl_ctx_set_min_tls12(context)
        if maximumTLSVersion == .tls12 { _ = pushd_openssl_ssl_ctx_set_max_tls12(context) }
        _ = pushd_openssl_ssl_ctx_set_options(
            context, pushd_openssl_op_no_compression() | pushd_openssl_op_no_renegotiation())
        _ = pushd_openssl_ssl_ctx_set_mode_nonblocking_writes(context)
        _ = pushd_openssl_ssl_ctx_set_session_cache_server(context)
        // A sender writes a TLS record per request (libcurl flushes each stream on its own):
        // without read-ahead OpenSSL takes each record in two reads, its 5-byte header and then
        // its body, so the mock paid two system calls per notification. With it one read brings
        // as many records as the buffer holds; `readAvailable` drains what OpenSSL keeps
        // (`SSL_has_pending`) before it waits on the socket again.
        if readAhead {
            _ = pushd_openssl_ssl_ctx_set_read_ahead(context)
            SSL_CTX_set_default_read_buffer_len(context, Self.readBufferBytes)
        }
        if SSL_CTX_use_certificate_chain_file(context, certificateChainFile) != 1 {
            throw .tls("cannot load the server certificate \(certificateChainFile): \(Self.lastError())")
        }
        if SSL_CTX_use_PrivateKey_file(context, privateKeyFile, SSL_FILETYPE_PEM) != 1 {
            throw .tls("cannot load the server key \(privateKeyFile): \(Self.lastError())")
        }
        if SSL_CTX_check_private_key(context) != 1 {
            throw .tls("the key \(privateKeyFile) does not match the certificate \(certificateChainFile)")
        }
        if let clientCAFile {
            if SSL_CTX_load_verify_locations(context, clientCAFile, nil) != 1 {
                throw .tls("cannot load the client CA \(clientCAFile): \(Self.lastError())")
            }
            if checksClientCertificateAfterHandshake {
                // The verdict stays in SSL_get_verify_result for the connection to act on.
                SSL_CTX_set_verify(context, pushd_openssl_verify_peer(), acceptForNow)
            } else if resetsOnRefusedCertificate {
                SSL_CTX_set_verify(context, pushd_openssl_verify_peer_fail_if_none(), resetOnRefusal)
            } else {
                SSL_CTX_set_verify(context, pushd_openssl_verify_peer_fail_if_none(), nil)
            }
            let sessionContext: [UInt8] = Array("apns-mock".utf8)
            _ = SSL_CTX_set_session_id_context(context, sessionContext, UInt32(sessionContext.count))
        }
        SSL_CTX_set_alpn_select_cb(context, selectH2, nil)
    }

    /// OpenSSL's read buffer per connection: about 150 requests of a campaign per read.
    static let readBufferBytes = 64 * 1024

    deinit { SSL_CTX_free(context) }

    func makeSession(fd: Int32) -> TLSSession? {
        guard let ssl = SSL_new(context) else { return nil }
        SSL_set_fd(ssl, fd)
        SSL_set_accept_state(ssl)
        return TLSSession(ssl: ssl)
    }

    static func lastError() -> String {
        var messages: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buffer = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buffer, buffer.count)
            messages.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return messages.isEmpty ? "no OpenSSL error queued" : messages.joined(separator: "; ")
    }
}

/// Lets the handshake go on whatever the chain's verification found; OpenSSL keeps the first
/// error for `SSL_get_verify_result`.
private let acceptForNow: @convention(c) (Int32, OpaquePointer?) -> Int32 = { _, _ in 1 }

/// Refuses a client certificate that failed verification by resetting the TCP connection
/// there and then: SO_LINGER 0, then `connect` with AF_UNSPEC, which on Linux disconnects the
/// socket with an RST and leaves the descriptor open for the connection to close. The alert
/// OpenSSL then writes fails (EPIPE; SIGPIPE is ignored), so the client reads only "Connection
/// reset by peer", in the middle of its handshake with TLS 1.2.
private let resetOnRefusal: @convention(c) (Int32, OpaquePointer?) -> Int32 = { verified, store in
    guard verified != 1 else { return 1 }
    if let store, let ssl = pushd_openssl_ssl_of_store(store) {
        let fd = SSL_get_fd(ssl)
        if fd >= 0 {
            var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
            _ = setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
            var unspecified = sockaddr()
            unspecified.sa_family = sa_family_t(AF_UNSPEC)
            _ = connect(fd, &unspecified, socklen_t(MemoryLayout<sockaddr>.size))
        }
    }
    return 0
}

/// Accepts only `h2`: a client that cannot speak HTTP/2 gets no ALPN answer and is closed
/// after the handshake, as APNs does.
private let selectH2: @convention(c) (
    OpaquePointer?, UnsafeMutablePointer<UnsafePointer<UInt8>?>?, UnsafeMutablePointer<UInt8>?,
    UnsafePointer<UInt8>?, UInt32, UnsafeMutableRawPointer?
) -> Int32 = { _, out, outLength, list, listLength, _ in
    guard let list, let out, let outLength else { return pushd_openssl_tlsext_err_noack() }
    var index = 0
    let length = Int(listLength)
    while index < length {
        let entryLength = Int(list[index])
        let start = index + 1
        if start + entryLength > length { break }
        if entryLength == 2 && list[start] == UInt8(ascii: "h") && list[start + 1] == UInt8(ascii: "2") {
            out.pointee = list + start
            outLength.pointee = 2
            return pushd_openssl_tlsext_err_ok()
        }
        index = start + entryLength
    }
    return pushd_openssl_tlsext_err_noack()
}

/// One TLS connection on a non-blocking socket.
///
/// Thread ownership: used only on the event-loop thread that owns the connection.
final class TLSSession {
    enum Progress: Equatable { case done, wantRead, wantWrite, failed(String) }
    enum Transfer: Equatable { case bytes(Int), wantRead, wantWrite, closed, failed(String) }

    private let ssl: OpaquePointer

    fileprivate init(ssl: OpaquePointer) { self.ssl = ssl }

    deinit { SSL_free(ssl) }

    func handshake() -> Progress {
        ERR_clear_error()
        let result = SSL_do_handshake(ssl)
        if result == 1 { return .done }
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        default: return .failed(TLSServerContext.lastError())
        }
    }

    var negotiatedH2: Bool {
        var protocolName: UnsafePointer<UInt8>?
        var length: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &protocolName, &length)
        guard let protocolName, length == 2 else { return false }
        return protocolName[0] == UInt8(ascii: "h") && protocolName[1] == UInt8(ascii: "2")
    }

    /// Whether the handshake resumed an earlier session instead of running in full.
    var resumedSession: Bool { SSL_session_reused(ssl) == 1 }

    /// Whether the peer presented a certificate that verified (certificate-auth mode).
    var hasVerifiedPeerCertificate: Bool {
        guard let certificate = SSL_get1_peer_certificate(ssl) else { return false }
        X509_free(certificate)
        return SSL_get_verify_result(ssl) == X509_V_OK
    }

    /// The subject of the peer's certificate in OpenSSL's one-line form ("/CN=…"), nil when it
    /// sent none. A resumed session keeps the certificate of the handshake it resumes.
    var peerCertificateSubject: String? {
        guard let certificate = SSL_get1_peer_certificate(ssl) else { return nil }
        defer { X509_free(certificate) }
        guard let name = X509_get_subject_name(certificate), let text = X509_NAME_oneline(name, nil, 0) else { return nil }
        defer { pushd_openssl_free(text) }
        return String(cString: text)
    }

    /// Sends TLS close_notify once, without waiting for the peer's; enough for clients to tell a
    /// clean end from a truncation.
    func sendCloseNotify() {
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
    }

    /// Decrypted or undecrypted bytes OpenSSL holds that the socket no longer shows.
    var hasBufferedInput: Bool { SSL_has_pending(ssl) == 1 }

    func read(into buffer: inout [UInt8]) -> Transfer {
        ERR_clear_error()
        let result = buffer.withUnsafeMutableBytes { SSL_read(ssl, $0.baseAddress, Int32($0.count)) }
        if result > 0 { return .bytes(Int(result)) }
        return classify(result)
    }

    func write(_ bytes: [UInt8], from offset: Int) -> Transfer {
        ERR_clear_error()
        let result = bytes.withUnsafeBytes { raw in
            SSL_write(ssl, raw.baseAddress! + offset, Int32(raw.count - offset))
        }
        if result > 0 { return .bytes(Int(result)) }
        return classify(result)
    }

    private func classify(_ result: Int32) -> Transfer {
        switch SSL_get_error(ssl, result) {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        case SSL_ERROR_ZERO_RETURN: return .closed
        case SSL_ERROR_SYSCALL:
            let code = errno
            return code == 0 || code == ECONNRESET || code == EPIPE ? .closed : .failed(String(cString: strerror(code)))
        default: return .failed(TLSServerContext.lastError())
        }
    }
}
