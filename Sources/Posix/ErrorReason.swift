import Glibc

/// A failed system call: what was attempted, on which file, and the system's reason.
public struct SystemCallError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let path: String
    public let code: Int32

    public init(_ operation: String, path: String, code: Int32 = errno) {
        self.operation = operation
        self.path = path
        self.code = code
    }

    public var reason: String { String(cString: strerror(code)) }
    public var description: String { "\(operation) \(path): \(reason)" }
}

/// The operator's words for why a file operation failed: the system's reason (`strerror`)
/// when the error carries one, the error itself otherwise.
public enum ErrorReason {
    public static func of(_ error: any Error) -> String {
        if let system = error as? SystemCallError { return system.reason }
        return "\(error)"
    }
}
