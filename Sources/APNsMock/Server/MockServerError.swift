#if canImport(Glibc)
import Glibc
#endif

/// Why the mock server could not start or could not apply a setting.
public enum MockServerError: Error, CustomStringConvertible, Equatable {
    /// A system call failed; carries the call and errno.
    case system(String, Int32)
    /// TLS set-up failed: which file or step, and OpenSSL's message.
    case tls(String)
    /// A configuration value is invalid: which setting and why.
    case configuration(String)

    public var description: String {
        switch self {
        case .system(let call, let code): "\(call) failed: \(String(cString: strerror(code))) (errno \(code))"
        case .tls(let message): "TLS: \(message)"
        case .configuration(let message): "configuration: \(message)"
        }
    }
}
