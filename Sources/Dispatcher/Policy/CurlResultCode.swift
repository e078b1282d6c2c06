/// The libcurl result codes (CURLcode values, stable across releases) the engine's decisions
/// depend on; any other code is `other`.
enum CurlResultCode: Equatable {
    case ok
    case couldntResolveProxy
    case couldntResolveHost
    case couldntConnect
    case http2
    case partialFile
    case operationTimedOut
    case sslConnectError
    case gotNothing
    case sendError
    case receiveError
    case http2Stream
    case proxyHandshake
    /// A certificate, key or verification failure of the TLS handshake.
    case tlsCredentialOrVerification
    case other(Int)

    init(_ code: Int) {
        switch code {
        case 0: self = .ok
        case 5: self = .couldntResolveProxy
        case 6: self = .couldntResolveHost
        case 7: self = .couldntConnect
        case 16: self = .http2
        case 18: self = .partialFile
        case 28: self = .operationTimedOut
        case 35: self = .sslConnectError
        case 52: self = .gotNothing
        case 55: self = .sendError
        case 56: self = .receiveError
        case 92: self = .http2Stream
        case 97: self = .proxyHandshake
        // PEER_FAILED_VERIFICATION (51 before 7.62), SSL_ENGINE_NOTFOUND, SSL_ENGINE_SETFAILED,
        // SSL_CERTPROBLEM, SSL_CIPHER, PEER_FAILED_VERIFICATION, USE_SSL_FAILED,
        // SSL_ENGINE_INITFAILED, SSL_CACERT_BADFILE, SSL_SHUTDOWN_FAILED, SSL_CRL_BADFILE,
        // SSL_ISSUER_ERROR, SSL_PINNEDPUBKEYNOTMATCH, SSL_INVALIDCERTSTATUS, SSL_CLIENTCERT
        case 51, 53, 54, 58, 59, 60, 64, 66, 77, 80, 82, 83, 90, 91, 98: self = .tlsCredentialOrVerification
        default: self = .other(code)
        }
    }

    var rawValue: Int {
        switch self {
        case .ok: 0
        case .couldntResolveProxy: 5
        case .couldntResolveHost: 6
        case .couldntConnect: 7
        case .http2: 16
        case .partialFile: 18
        case .operationTimedOut: 28
        case .sslConnectError: 35
        case .gotNothing: 52
        case .sendError: 55
        case .receiveError: 56
        case .http2Stream: 92
        case .proxyHandshake: 97
        case .tlsCredentialOrVerification: 60
        case .other(let code): code
        }
    }
}
