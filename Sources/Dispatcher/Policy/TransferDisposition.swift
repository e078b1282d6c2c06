/// What the engine does with a finished transfer; decided from plain values so every case
/// can be tested without a network.
struct TransferDisposition: Equatable {
    /// Send the same request again, on whatever connection libcurl picks next.
    var retry: Bool
    /// The connection's server asked for (or is owed) a fresh connection.
    var replaceConnection: Bool
    /// Opening a connection failed: back off before starting more transfers.
    var connectFailed: Bool

    static let deliver = TransferDisposition(retry: false, replaceConnection: false, connectFailed: false)

    /// libcurl result codes the decision depends on (CURLcode values, stable across releases).
    enum Code {
        static let ok = 0
        static let couldntResolveProxy = 5
        static let couldntResolveHost = 6
        static let couldntConnect = 7
        static let http2 = 16
        static let partialFile = 18
        static let operationTimedOut = 28
        static let sslConnectError = 35
        static let gotNothing = 52
        static let sendError = 55
        static let receiveError = 56
        static let http2Stream = 92
    }

    /// - Parameters:
    ///   - curlCode: the transfer's CURLcode.
    ///   - status: the HTTP status, 0 when no response header arrived.
    ///   - reason: reads the APNs reason from the body; called only for statuses that need it.
    ///   - attempts: transport attempts made so far, including this one.
    static func decide(curlCode: Int, status: Int, reason: () -> String?, attempts: Int, maxAttempts: Int) -> TransferDisposition {
        let canRetry = attempts < maxAttempts
        if curlCode == Code.ok || status != 0 {
            switch status {
            case 503:
                return TransferDisposition(retry: false, replaceConnection: true, connectFailed: false)
            case 400, 403, 429:
                switch reason() {
                case "IdleTimeout", "ExpiredProviderToken", "TooManyProviderTokenUpdates":
                    return TransferDisposition(retry: false, replaceConnection: true, connectFailed: false)
                default:
                    return .deliver
                }
            default:
                return .deliver
            }
        }
        switch curlCode {
        case Code.couldntResolveProxy, Code.couldntResolveHost, Code.couldntConnect, Code.sslConnectError:
            return TransferDisposition(retry: canRetry, replaceConnection: false, connectFailed: true)
        case Code.http2, Code.http2Stream, Code.sendError, Code.receiveError, Code.gotNothing, Code.partialFile:
            // No response header arrived: a GOAWAY above this stream's id, a reset stream or a
            // dropped connection left the request unanswered, and HTTP/2 lets it go elsewhere.
            return TransferDisposition(retry: canRetry, replaceConnection: false, connectFailed: false)
        case Code.operationTimedOut:
            return TransferDisposition(retry: canRetry, replaceConnection: true, connectFailed: false)
        default:
            return .deliver
        }
    }
}

extension ConnectionFailureReason {
    /// The connection-level failure a transfer's libcurl code (with no answer) stands for, or
    /// nil when the code says nothing about the connection.
    init?(failedTransferCode code: Int) {
        switch code {
        case 5, 6, 7, 97:
            // couldn't resolve proxy/host, couldn't connect, proxy handshake
            self = .connect
        case 35, 51, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91, 98:
            // SSL connect error and the certificate, key and verification failures
            self = .tls
        case TransferDisposition.Code.operationTimedOut:
            self = .timeout
        default:
            return nil
        }
    }
}
