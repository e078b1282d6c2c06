internal import COpenSSL

/// Drains OpenSSL's thread-local error queue into one line, so a failure's cause is reported
/// and a stale error never leaks into the next call's report.
func takeOpenSSLErrors(default fallback: String) -> String {
    var messages = [String]()
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        let end = buffer.firstIndex(of: 0) ?? buffer.count
        messages.append(String(decoding: buffer[..<end].map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return messages.isEmpty ? fallback : messages.joined(separator: "; ")
}
