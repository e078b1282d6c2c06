/// Why an event loop's connection failed, as the engine tells its caller: libcurl's words, and
/// what the engine knows beyond them.
public struct ConnectionFailureCause: Sendable, Equatable, CustomStringConvertible {
    /// As an operator reads it: how the connection failed, libcurl's message and its code.
    public var text: String
    /// The connection completed its TLS handshake (a request went on it, or libcurl's
    /// CURLINFO_APPCONNECT_TIME_T was set) and then ended, reset or closed, before answering
    /// anything. A server going down ends connections so; so does a server that refuses the
    /// client's certificate after a TLS 1.3 handshake (which the client considers done before
    /// the server has checked its certificate) and closes the connection before the client
    /// has read its alert. The engine names neither: its caller knows how the connection
    /// authenticated and what else is failing.
    public var endedAfterHandshake: Bool
    /// The server reset the connection during the TLS handshake (libcurl error 35, the
    /// socket's error ECONNRESET or EPIPE) after the client had written its certificate
    /// (OpenSSL's message callback saw the Certificate message go out). A server going down
    /// resets connections so; so does a server that checks the client's certificate inside a
    /// TLS 1.2 handshake, refuses it and resets the connection instead of sending its alert.
    /// The engine names neither, as for `endedAfterHandshake`.
    public var endedDuringHandshakeAfterClientCertificate: Bool

    public init(_ text: String, endedAfterHandshake: Bool = false, endedDuringHandshakeAfterClientCertificate: Bool = false) {
        self.text = text
        self.endedAfterHandshake = endedAfterHandshake
        self.endedDuringHandshakeAfterClientCertificate = endedDuringHandshakeAfterClientCertificate
    }

    public var description: String { text }
}
