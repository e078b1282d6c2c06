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
        var lines = [
            "pushd \(pushdVersion)",
            "libcurl \(curl.version) (\(curl.sslVersion), nghttp2 \(curl.nghttp2Version ?? "absent"), HTTP/2 \(curl.supportsHTTP2 ? "yes" : "no"))",
            "libpq \(libpq / 10000).\(libpq % 10000)",
            OpenSSLRuntime.version,
            "libmicrohttpd \(HTTPServerLibrary.version)",
            "libyaml \(YAMLLibrary.version)",
        ]
        if let warning = libcurlBaselineWarning(version: curl.version) { lines.append("warning: " + warning) }
        return lines.joined(separator: "\n")
    }

    /// The warning `pushd run` logs at start for the libcurl it is linked with, if any.
    static func linkedLibcurlWarning() -> String? { libcurlBaselineWarning(version: CurlRuntime.info.version) }

    /// libcurl 8 is the baseline: 7.x (Debian 12's 7.88) sends RST_STREAM after nearly every
    /// answered stream, and servers that count client resets close such connections, so
    /// answered notifications are sent again. Nil for 8 and later.
    static func libcurlBaselineWarning(version: String) -> String? {
        let major = version.split(separator: ".", maxSplits: 1).first.flatMap { Int($0) }
        if let major, major >= 8 { return nil }
        let which = major == nil ? "libcurl reports the version '\(version)', which pushd cannot read"
                                 : "libcurl \(version) is older than 8"
        return which + ": libcurl 7 sends RST_STREAM after nearly every answered stream, servers that count "
            + "client resets close such connections and answered notifications are sent again; "
            + "install libcurl 8 (on Debian 12 from bookworm-backports: scripts/install-deps.sh)"
    }
}
