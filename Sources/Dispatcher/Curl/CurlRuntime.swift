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
        // libcurl 8.14 gives every stream in flight a 16 KiB request chunk (and each easy
        // handle its upload buffer, 16 KiB here) and writes a few hundred bytes into each.
        // Taken from glibc's heap, calloc clears whatever it reuses and the chunks share pages
        // with their neighbours, so far more than those bytes becomes resident; mapped on its
        // own (16 KiB and up), a chunk costs only the pages written. Measured at 1 × 1,000
        // streams: about 6 KB less resident per stream (docs/dispatcher.md, Memory). libcurl
        // keeps these buffers for the life of a connection or a handle, so the mapping system
        // calls are not per request. Process-wide, like curl_global_init itself.
        _ = pushd_curl_malloc_mmap_threshold(16 * 1024)
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
