/// A request the transport left unanswered and the engine (or libcurl by itself) sent again:
/// why, and libcurl's own words for it, so that a resend is never silent. Only a request that
/// went on a connection is sent *again*: one whose connect or TLS handshake failed was never
/// sent, and waiting for the next connection is no resend.
public struct TransportResend: Sendable, Equatable {
    public enum Reason: String, Sendable, CaseIterable {
        /// The server reset the request's stream (RST_STREAM, such as INTERNAL_ERROR), the
        /// connection staying up; `detail` names the HTTP/2 error code as libcurl reports it.
        case streamReset = "stream_reset"
        /// The connection ended or failed with the request unanswered: dropped, reset, timed
        /// out, or a GOAWAY that left its stream unprocessed.
        case connectionLost = "connection_lost"
        /// libcurl moved the request to another connection by itself: the one it went on
        /// refused its stream (REFUSED_STREAM) or ended in order (GOAWAY) before answering it.
        case movedByLibcurl = "moved_by_libcurl"
    }

    public var reason: Reason
    /// libcurl's message and code ("HTTP/2 stream 1 was not closed cleanly: INTERNAL_ERROR
    /// (err 2) (libcurl error 92)"), or what the engine knows when libcurl said nothing.
    public var detail: String
    /// The host the request went to.
    public var host: String

    public init(reason: Reason, detail: String, host: String) {
        self.reason = reason
        self.detail = detail
        self.host = host
    }

    /// The reason for a request that went on a connection and finished with libcurl code
    /// `curlCode` and no answer.
    static func reason(curlCode: Int) -> Reason {
        CurlResultCode(curlCode) == .http2Stream ? .streamReset : .connectionLost
    }
}
