internal import CNghttp2

/// The HTTP/2 library the mock server is built on.
public enum HTTP2Library {
    /// nghttp2's version, for example "1.52.0".
    public static var version: String { String(cString: pushd_nghttp2_version_string()) }
}
