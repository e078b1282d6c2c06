import APNs
internal import CCurl
import Glibc

/// Process-wide libcurl set-up: OpenSSL first (with NO_ATEXIT), then `curl_global_init`, once.
public enum CurlRuntime {
    private static let initialized: Bool = {
        OpenSSLRuntime.initialize()
        // SIGPIPE is ignored process-wide: curl runs with NOSIGNAL, and a peer closing
        // a TLS connection mid-write must be an error, not a dead daemon.
        signal(SIGPIPE, SIG_IGN)
        return curl_global_init(pushd_curl_global_all()) == CURLE_OK
    }()

    /// Initialises libcurl once per process; later calls do nothing. Returns false if libcurl refused.
    @discardableResult
    public static func initialize() -> Bool { initialized }

    /// What the linked libcurl reports about itself.
    public struct Info: Sendable {
        public var version: String
        public var sslVersion: String
        public var nghttp2Version: String?
        public var supportsHTTP2: Bool
    }

    public static var info: Info {
        initialize()
        let data = pushd_curl_version_info()!
        return Info(version: String(cString: data.pointee.version),
                    sslVersion: data.pointee.ssl_version.map { String(cString: $0) } ?? "none",
                    nghttp2Version: data.pointee.nghttp2_version.map { String(cString: $0) },
                    supportsHTTP2: pushd_curl_version_has_http2(data) != 0)
    }
}
