import FoundationEssentials
import Glibc

/// The operator's words for why a file operation failed. FoundationEssentials has no
/// `localizedDescription`, and its file errors print as a dump of their user info; what an
/// operator acts on is the system's reason (`strerror`), which they carry underneath.
public enum ErrorReason {
    public static func of(_ error: any Error) -> String {
        if let posix = error as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
        if let cocoa = error as? CocoaError {
            if let underlying = cocoa.userInfo["NSUnderlyingError"] as? POSIXError {
                return String(cString: strerror(underlying.code.rawValue))
            }
            return "file error \(cocoa.code.rawValue)"
        }
        return "\(error)"
    }
}
