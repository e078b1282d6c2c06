/// One HTTP/2 request as the engine sends it: method, path, header lines and body.
///
/// Everything libcurl reads is laid out once, at construction, in one immutable block
/// (`RequestBytes`): the header list nodes, the path and the header lines, NUL-terminated,
/// and the body. libcurl reads the block in place while the request is in flight, so a
/// transfer copies nothing and holds no buffer of its own; the APNs layer builds these
/// from notifications.
public struct DispatchRequest: Sendable {
    public enum Method: String, Sendable {
        case post = "POST"
        case get = "GET"
        case put = "PUT"
        case delete = "DELETE"
    }

    public let method: Method
    let bytes: RequestBytes
    /// A body shared by many requests (a campaign's payload); nil when it is in `bytes`.
    let sharedBody: RequestBytes.Body?

    /// - Parameters:
    ///   - path: the request path starting with "/", as sent (already percent-encoded).
    ///   - headerLines: "name: value" lines; names are sent in lowercase by HTTP/2.
    public init(method: Method = .post, path: String, headerLines: [String], body: [UInt8]) throws(DispatchRequestError) {
        try Self.checkPath(path)
        let headers = try HeaderBlock(lines: headerLines)
        try self.init(method: method, path: path, headers: headers, body: body)
    }

    /// Header lines checked and packed once, for many requests that share them.
    public struct HeaderBlock: Sendable {
        /// Each line followed by a NUL byte.
        let packed: [UInt8]
        let count: Int

        public init(lines: [String]) throws(DispatchRequestError) {
            var packed = [UInt8]()
            packed.reserveCapacity(lines.reduce(0) { $0 + $1.utf8.count + 1 })
            for (index, line) in lines.enumerated() {
                guard let colon = line.utf8.firstIndex(of: UInt8(ascii: ":")), colon != line.utf8.startIndex else {
                    throw .malformedHeaderLine(index: index, line: line)
                }
                for byte in line.utf8 {
                    guard byte != 0, byte != 0x0A, byte != 0x0D else { throw .malformedHeaderLine(index: index, line: line) }
                    packed.append(byte)
                }
                packed.append(0)
            }
            self.packed = packed
            count = lines.count
        }
    }

    /// A request whose header lines were checked once in `headers`: only the path is checked
    /// and the block copied, so requests that differ only in their path cost one allocation.
    public init(method: Method = .post, path: String, headers: HeaderBlock, body: [UInt8]) throws(DispatchRequestError) {
        try Self.checkPath(path)
        self.method = method
        bytes = body.withUnsafeBytes { RequestBytes(path: path, headers: headers, body: $0) }
        sharedBody = nil
    }

    /// As above with a body many requests share, which is not copied into each one.
    init(method: Method = .post, path: String, headers: HeaderBlock, sharedBody: RequestBytes.Body) throws(DispatchRequestError) {
        try Self.checkPath(path)
        self.method = method
        bytes = RequestBytes(path: path, headers: headers, body: UnsafeRawBufferPointer(start: nil, count: 0))
        self.sharedBody = sharedBody
    }

    private static func checkPath(_ path: String) throws(DispatchRequestError) {
        guard path.utf8.first == UInt8(ascii: "/") else { throw .pathNotAbsolute(path) }
        // Every request of a campaign has a path of its own: its bytes are read in place (a
        // native string's are contiguous), not through the string's index, which cost about
        // 2,300 instructions per device path.
        let clean = path.utf8.withContiguousStorageIfAvailable { bytes in
            !bytes.contains { $0 <= 0x20 || $0 == 0x7F }
        } ?? !path.utf8.contains { $0 <= 0x20 || $0 == 0x7F }
        guard clean else { throw .invalidPathByte(path) }
    }

    /// Convenience for header name/value pairs.
    public init(method: Method = .post, path: String, headers: [(name: String, value: String)], body: [UInt8]) throws(DispatchRequestError) {
        try self.init(method: method, path: path, headerLines: headers.map { $0.name + ": " + $0.value }, body: body)
    }

    public var path: String { bytes.path }

    public var headerLines: [String] { bytes.headerLines }

    public var body: [UInt8] { sharedBody?.bytes ?? bytes.body }
}

/// Why a request could not be built; each case carries the offending text.
public enum DispatchRequestError: Error, Sendable, Equatable, CustomStringConvertible {
    case pathNotAbsolute(String)
    case invalidPathByte(String)
    case malformedHeaderLine(index: Int, line: String)

    public var description: String {
        switch self {
        case .pathNotAbsolute(let path): return "request path \"\(path)\" must start with \"/\""
        case .invalidPathByte(let path): return "request path \"\(path)\" contains a space or control character"
        case .malformedHeaderLine(let index, let line):
            return "header line \(index) \"\(line)\" must be \"name: value\" without NUL, CR or LF"
        }
    }
}
