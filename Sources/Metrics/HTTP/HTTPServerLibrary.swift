internal import CMicroHTTPD

/// The embedded HTTP server library that serves /metrics, /healthz and /readyz.
public enum HTTPServerLibrary {
    /// libmicrohttpd's version, for example "0.9.75".
    public static var version: String { String(cString: pushd_mhd_version_string()) }
}
