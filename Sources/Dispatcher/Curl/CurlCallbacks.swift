internal import CCurl
internal import CTLSWatch
import Posix
import Glibc

// The per-transfer callbacks libcurl makes on the loop's thread while it runs a transfer.

/// libcurl wants a new connection for a transfer: the loop may refuse it during a reconnect
/// backoff (libcurl then fails the transfer as a refused connect, which the loop knows is none).
let curlOpenSocketCallback: pushd_curl_opensocket_cb = { userData, _, address in
    guard let address else { return pushd_curl_bad_socket() }
    let transfer = Unmanaged<CurlTransfer>.fromOpaque(userData!).takeUnretainedValue()
    guard let owner = transfer.loop else { return pushd_curl_bad_socket() }
    let loop = Unmanaged<CurlEventLoop>.fromOpaque(owner).takeUnretainedValue()
    guard loop.mayOpenConnection(for: transfer) else { return pushd_curl_bad_socket() }
    let fd = socket(pushd_curl_sockaddr_family(address), pushd_curl_sockaddr_socktype(address) | Int32(SOCK_CLOEXEC.rawValue),
                    pushd_curl_sockaddr_protocol(address))
    if fd >= 0 { loop.socketOpened(fd) }
    return fd >= 0 ? fd : pushd_curl_bad_socket()
}

let curlCloseSocketCallback: pushd_curl_closesocket_cb = { userData, fd in
    Unmanaged<CurlEventLoop>.fromOpaque(userData!).takeUnretainedValue().socketClosed(fd)
    return close(fd)
}

/// libcurl sets up the TLS context of a new connection, for the transfer that opens it: the
/// loop watches the messages OpenSSL writes in its handshake (certificate credentials only).
let curlSSLContextCallback: pushd_curl_ssl_ctx_cb = { easy, sslContext, loopPointer in
    guard let easy, let sslContext, let loopPointer else { return CURLE_OK }
    let loop = Unmanaged<CurlEventLoop>.fromOpaque(loopPointer).takeUnretainedValue()
    var privateData: UnsafeMutableRawPointer?
    _ = pushd_curl_easy_getinfo_ptr(easy, CURLINFO_PRIVATE, &privateData)
    guard let index = CurlTransfer.poolIndex(privateData: privateData, count: loop.transfers.count) else { return CURLE_OK }
    let transfer = loop.transfers[index]
    transfer.sentClientCertificate = false
    pushd_tls_watch_messages(sslContext, curlHandshakeMessageCallback, Unmanaged.passUnretained(transfer).toOpaque())
    return CURLE_OK
}

/// OpenSSL's message callback during a handshake: notes on the transfer that opened the
/// connection that its client certificate was written, and stops once the client wrote its
/// Finished (the end of what it sends in a handshake), so established connections pay nothing.
let curlHandshakeMessageCallback: pushd_tls_message_cb = { written, _, contentType, bytes, count, ssl, transferPointer in
    guard written == 1, contentType == Int32(pushd_tls_content_handshake), count > 0, let bytes, let transferPointer else { return }
    switch Int32(bytes.load(as: UInt8.self)) {
    case Int32(pushd_tls_handshake_certificate):
        Unmanaged<CurlTransfer>.fromOpaque(transferPointer).takeUnretainedValue().sentClientCertificate = true
    case Int32(pushd_tls_handshake_finished):
        pushd_tls_stop_watching(ssl)
    default:
        break
    }
}

/// libcurl is about to send the request on a connection: more than once for one transfer
/// means libcurl resent it by itself (refused stream, GOAWAY, dead reused connection). libcurl
/// calls it once the connection is established (TCP, proxy tunnel and TLS) or its reuse is
/// confirmed, so the loop learns here which connections were established.
let curlPrereqCallback: pushd_curl_prereq_cb = { userData, _, _, _, localPort in
    // `_withUnsafeGuaranteedRef` here and below: the loop owns its transfers and outlives
    // them, so a callback borrows them without the retain and release `takeUnretainedValue`
    // costs (several per request; docs/dispatcher-measurements.md, 2026-12-03).
    Unmanaged<CurlTransfer>.fromOpaque(userData!)._withUnsafeGuaranteedRef { transfer in
        let previous = (connection: transfer.connectionID, localPort: transfer.localPort)
        transfer.sends += 1
        transfer.localPort = localPort
        var connection: curl_off_t = -1
        // The transfer is attached to its connection here, so libcurl's id for it is current.
        if pushd_curl_easy_getinfo_off(transfer.easy, CURLINFO_CONN_ID, &connection) == CURLE_OK {
            transfer.connectionID = Int64(connection)
            if transfer.sends == 1 { transfer.firstConnectionID = Int64(connection) }
        }
        guard let owner = transfer.loop else { return }
        Unmanaged<CurlEventLoop>.fromOpaque(owner)._withUnsafeGuaranteedRef { loop in
            loop.connectionUsed(localPort: localPort, connection: transfer.connectionID)
            // Sent again, on another connection: the one it went on ended without answering it.
            if transfer.sends > 1, previous.connection >= 0, previous.connection != transfer.connectionID {
                loop.resentOffConnection(previous.connection, localPort: previous.localPort)
            }
        }
    }
    return pushd_curl_prereq_ok()
}

let curlWriteCallback: pushd_curl_data_cb = { data, size, count, userData in
    let bytes = size * count
    Unmanaged<CurlTransfer>.fromOpaque(userData!)._withUnsafeGuaranteedRef { transfer in
        // Success bodies of notifications are not APNs's business and are dropped (a channel
        // read or list, a GET, is kept); error bodies are tiny, and anything past 64 KiB is not
        // an APNs answer and is not kept.
        if bytes > 0, !(200..<300).contains(transfer.status) || transfer.keepsSuccessBody,
           transfer.responseBody.count < 65_536, let data {
            transfer.responseBody.append(contentsOf: UnsafeRawBufferPointer(start: data, count: min(bytes, 65_536 - transfer.responseBody.count)))
        }
    }
    return bytes
}

let curlHeaderCallback: pushd_curl_data_cb = { data, size, count, userData in
    let bytes = size * count
    guard bytes >= 12, let data else { return bytes }
    let line = UnsafeRawBufferPointer(start: data, count: bytes)
    Unmanaged<CurlTransfer>.fromOpaque(userData!)._withUnsafeGuaranteedRef { transfer in
        if let status = ResponseHeaderLine.status(line) {
            transfer.status = status
            if let loop = transfer.loop {
                Unmanaged<CurlEventLoop>.fromOpaque(loop)._withUnsafeGuaranteedRef { $0.answerArrived(on: transfer.connectionID) }
            }
        } else if ResponseHeaderLine.isAPNs(line) {
            if let apnsID = ResponseHeaderLine.apnsID(line) {
                transfer.apnsID = apnsID
            } else if let uniqueID = ResponseHeaderLine.uniqueID(line) {
                transfer.uniqueID = uniqueID
            } else if let channelID = ResponseHeaderLine.channelID(line) {
                transfer.channelID = channelID
            }
        }
    }
    return bytes
}

/// Reads what the engine wants from response header lines, without allocating.
enum ResponseHeaderLine {
    /// The status of "HTTP/2 200" (a status line starts every header block, also of a
    /// 100-continue), or nil for any other line.
    static func status(_ line: UnsafeRawBufferPointer) -> Int? {
        guard line.count >= 12, line[0] == UInt8(ascii: "H"), line[1] == UInt8(ascii: "T"), line[4] == UInt8(ascii: "/") else { return nil }
        var index = 5
        while index < line.count, line[index] != 0x20 { index += 1 }
        var status = 0
        var digits = 0
        index += 1
        while index < line.count, digits < 3, line[index] >= UInt8(ascii: "0"), line[index] <= UInt8(ascii: "9") {
            status = status * 10 + Int(line[index] - UInt8(ascii: "0"))
            digits += 1
            index += 1
        }
        return status
    }

    /// Whether the line's name starts with "apns-" (any case): the only lines read past the
    /// status line. The others (content-length, date, a server's own) were held against each
    /// of the three names below in turn, about 400 instructions per answer.
    static func isAPNs(_ line: UnsafeRawBufferPointer) -> Bool {
        line.count > 5 && line[0] | 0x20 == UInt8(ascii: "a") && line[1] | 0x20 == UInt8(ascii: "p")
            && line[2] | 0x20 == UInt8(ascii: "n") && line[3] | 0x20 == UInt8(ascii: "s") && line[4] == UInt8(ascii: "-")
    }

    /// The id of an "apns-id:" line (name in any case, optional blanks), or nil.
    static func apnsID(_ line: UnsafeRawBufferPointer) -> APNsID? {
        guard line.count >= 44 else { return nil }
        let name: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) = (0x61, 0x70, 0x6E, 0x73, 0x2D, 0x69, 0x64, 0x3A)
        // Setting bit 0x20 lowercases the letters and leaves '-' and ':' as they are.
        let matches = withUnsafeBytes(of: name) { expected in (0..<8).allSatisfy { line[$0] | 0x20 == expected[$0] } }
        guard matches else { return nil }
        var start = 8
        while start < line.count, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
        guard start + 36 <= line.count else { return nil }
        return APNsID(utf8: UnsafeRawBufferPointer(rebasing: line[start..<(start + 36)]))
    }

    /// "apns-unique-id:" as bytes, made once.
    private static let uniqueIDName: [UInt8] = Array("apns-unique-id:".utf8)

    /// The id of an "apns-unique-id:" line (name in any case, optional blanks), or nil.
    static func uniqueID(_ line: UnsafeRawBufferPointer) -> APNsID? {
        let name = uniqueIDName
        guard line.count >= name.count + 36, (0..<name.count).allSatisfy({ line[$0] | 0x20 == name[$0] | 0x20 }) else { return nil }
        var start = name.count
        while start < line.count, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
        guard start + 36 <= line.count else { return nil }
        return APNsID(utf8: UnsafeRawBufferPointer(rebasing: line[start..<(start + 36)]))
    }

    /// "apns-channel-id:" as bytes, made once: every header line of every answer is held
    /// against it.
    private static let channelIDName: [UInt8] = Array("apns-channel-id:".utf8)

    /// The value of an "apns-channel-id:" line (name in any case), trimmed, or nil. Only
    /// channel answers carry it, so the String is made off the notification path.
    static func channelID(_ line: UnsafeRawBufferPointer) -> String? {
        let name = channelIDName
        guard line.count > name.count, (0..<name.count).allSatisfy({ line[$0] | 0x20 == name[$0] | 0x20 }) else { return nil }
        var start = name.count
        var end = line.count
        while start < end, line[start] == 0x20 || line[start] == 0x09 { start += 1 }
        while end > start, line[end - 1] == 0x0A || line[end - 1] == 0x0D || line[end - 1] == 0x20 { end -= 1 }
        return start < end ? String(decoding: line[start..<end], as: UTF8.self) : nil
    }

}
