import APNs

/// What the engine does with a finished transfer; decided from plain values so every case
/// can be tested without a network.
struct TransferDisposition: Equatable {
    /// Send the same request again, on whatever connection libcurl picks next.
    var retry: Bool
    /// The connection that answered is retired: it takes no new stream.
    var replaceConnection: Bool
    /// Opening a connection failed: back off before starting more transfers.
    var connectFailed: Bool
    /// The retired connection failed (503 Shutdown, no answer in time): its replacement waits
    /// out a backoff, unlike one retired in order (IdleTimeout, a provider token to replace).
    var connectionFailed = false
    /// No answer came on the connection the request went on: it ended (reset, closed, a GOAWAY
    /// before this stream) or reset the stream. A failure of that connection if it never
    /// answered, or churned (`ConnectionPolicy.Event.connectionLost`).
    var connectionLost = false

    static let deliver = TransferDisposition(retry: false, replaceConnection: false, connectFailed: false)

    /// - Parameters:
    ///   - curlCode: the transfer's CURLcode.
    ///   - status: the HTTP status, 0 when no response header arrived.
    ///   - reason: the APNs reason of the answer's body, read once by the caller.
    ///   - attempts: transport attempts made so far, including this one.
    ///   - answeredOnFreshConnection: the request was answered UnrelatedKeyIdInToken before, and
    ///     this answer came on a connection opened after that one (`PendingRequest.unrelatedKeyConnections`).
    static func decide(curlCode: Int, status: Int, reason: APNsReason?, attempts: Int, maxAttempts: Int,
                       answeredOnFreshConnection: Bool = false) -> TransferDisposition {
        let canRetry = attempts < maxAttempts
        let code = CurlResultCode(curlCode)
        if code == .ok || status != 0 {
            // APNs documents these as the end of the connection's usefulness (a server
            // shutting down, an idle connection, a provider token that must be replaced). A 503
            // ServiceUnavailable is the service's state, not the connection's: APNs asks
            // providers to keep their connections open, and replacing one per answer made a
            // reconnect storm.
            if status == 503 && reason == .shutdown {
                return TransferDisposition(retry: false, replaceConnection: true, connectFailed: false, connectionFailed: true)
            }
            // APNs ties a connection to the key that signed its first push's token and refuses a
            // token of an unrelated key on it ("open a new connection"): the connection is
            // retired and the request sent again on another one. Answered so on a connection
            // opened after that, the token itself is refused: the caller gets the answer.
            if status == 403 && reason == .unrelatedKeyIdInToken {
                return TransferDisposition(retry: canRetry && !answeredOnFreshConnection, replaceConnection: true, connectFailed: false)
            }
            let retires = (status == 400 && reason == .idleTimeout)
                || (status == 403 && reason == .expiredProviderToken) || (status == 429 && reason == .tooManyProviderTokenUpdates)
            return retires ? TransferDisposition(retry: false, replaceConnection: true, connectFailed: false) : .deliver
        }
        switch code {
        case .couldntResolveProxy, .couldntResolveHost, .couldntConnect, .sslConnectError:
            return TransferDisposition(retry: canRetry, replaceConnection: false, connectFailed: true)
        case .http2, .http2Stream, .sendError, .receiveError, .gotNothing, .partialFile:
            // No response header arrived: a GOAWAY above this stream's id, a reset stream or a
            // dropped connection left the request unanswered, and HTTP/2 lets it go elsewhere.
            return TransferDisposition(retry: canRetry, replaceConnection: false, connectFailed: false, connectionLost: true)
        case .operationTimedOut:
            return TransferDisposition(retry: canRetry, replaceConnection: true, connectFailed: false, connectionFailed: true)
        default:
            return .deliver
        }
    }
}

extension ConnectionFailureReason {
    /// The connection-level failure a transfer's libcurl code (with no answer) stands for, or
    /// nil when the code says nothing about the connection.
    init?(failedTransferCode code: Int) {
        switch CurlResultCode(code) {
        case .couldntResolveProxy, .couldntResolveHost, .couldntConnect, .proxyHandshake:
            self = .connect
        case .sslConnectError, .tlsCredentialOrVerification:
            self = .tls
        case .operationTimedOut:
            self = .timeout
        default:
            return nil
        }
    }
}
