internal import COpenSSL

/// Process-wide OpenSSL set-up.
///
/// OpenSSL must be initialised with `OPENSSL_INIT_NO_ATEXIT` before libcurl's
/// `curl_global_init` and before any other OpenSSL call: otherwise OpenSSL's own
/// exit handler frees state that libcurl still releases at exit (a double free).
/// Every module that touches OpenSSL or libcurl calls `initialize()` first.
public enum OpenSSLRuntime {
    private static let initialized: Bool = pushd_openssl_init() == 1

    /// Initialises OpenSSL once per process; later calls do nothing. Returns false if OpenSSL refused.
    @discardableResult
    public static func initialize() -> Bool { initialized }

    /// For example "OpenSSL 3.0.17 1 Jul 2025".
    public static var version: String { String(cString: pushd_openssl_version_string()) }

    /// `OPENSSL_VERSION_NUMBER` of the library in use, for example 0x30000110.
    public static var versionNumber: UInt { UInt(pushd_openssl_version_number()) }
}
