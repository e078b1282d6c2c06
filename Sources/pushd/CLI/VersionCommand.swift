import APNs
import Dispatcher
import Metrics
import QueueStore

/// `pushd version`: the program's version and the C libraries it runs on.
enum VersionCommand {
    static let pushdVersion = "0.1.0"

    static func report() -> String {
        let curl = CurlRuntime.info
        let libpq = PGConnection.libpqVersion
        return """
        pushd \(pushdVersion)
        libcurl \(curl.version) (\(curl.sslVersion), nghttp2 \(curl.nghttp2Version ?? "absent"), HTTP/2 \(curl.supportsHTTP2 ? "yes" : "no"))
        libpq \(libpq / 10000).\(libpq % 10000)
        \(OpenSSLRuntime.version)
        libmicrohttpd \(HTTPServerLibrary.version)
        libyaml \(YAMLLibrary.version)
        """
    }
}
