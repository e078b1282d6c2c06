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
    /// The path, and the header lines and body unless `shared` holds them.
    let bytes: RequestBytes
    /// Header lines and body many requests send unchanged (a campaign's), laid out once; nil
    /// when they are in `bytes`. At a window of thousands of requests, a provider token and
    /// the other header lines in each request's own block were about 1.5 MB of a drain's heap.
    let shared: RequestBytes?

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

        private init() {
            packed = []
            count = 0
        }

        /// No header lines: the block of a request whose lines are shared.
        static let none = HeaderBlock()
    }

    /// A request whose header lines were checked once in `headers`: only the path is checked
    /// and the block copied, so requests that differ only in their path cost one allocation.
    public init(method: Method = .post, path: String, headers: HeaderBlock, body: [UInt8]) throws(DispatchRequestError) {
        try Self.checkPath(path)
        self.method = method
        bytes = body.withUnsafeBytes { RequestBytes(path: path, headers: headers, body: $0) }
        shared = nil
    }

    /// A request whose header lines and body are those of `shared` (made by `sharedPart`),
    /// which is not copied: the request's own block holds its path alone.
    init(method: Method = .post, path: String, shared: RequestBytes) throws(DispatchRequestError) {
        try Self.checkPath(path)
        self.method = method
        bytes = RequestBytes(path: path, headers: .none, body: UnsafeRawBufferPointer(start: nil, count: 0), listsHeaders: false)
        self.shared = shared
    }

    /// A request like `init(method:path:shared:)` whose path `writePath` writes in place,
    /// `pathLength` bytes of printable ASCII (the caller's guarantee: nothing is checked).
    init(method: Method = .post, pathLength: Int, shared: RequestBytes, writePath: (UnsafeMutableRawPointer) -> Void) {
        self.method = method
        bytes = RequestBytes(pathLength: pathLength, writePath: writePath)
        self.shared = shared
    }

    /// Header lines and a body for many requests, laid out once for `init(method:path:shared:)`.
    static func sharedPart(headers: HeaderBlock, body: [UInt8]) -> RequestBytes {
        body.withUnsafeBytes { RequestBytes(path: "", headers: headers, body: $0) }
    }

    private static func checkPath(_ path: String) throws(DispatchRequestError) {
        guard path.utf8.first == UInt8(ascii: "/") else { throw .pathNotAbsolute(path) }
        // Every request of a campaign has a path of its own: its bytes are read in place (a
        // native string's are contiguous), not through the string's index, which cost about
        // 2,300 instructions per device path.
        // libcurl sends the path as it is (the request target), so only printable ASCII passes.
        let clean = path.utf8.withContiguousStorageIfAvailable { bytes in
            !bytes.contains { $0 <= 0x20 || $0 >= 0x7F }
        } ?? !path.utf8.contains { $0 <= 0x20 || $0 >= 0x7F }
        guard clean else { throw .invalidPathByte(path) }
    }

    /// Convenience for header name/value pairs.
    public init(method: Method = .post, path: String, headers: [(name: String, value: String)], body: [UInt8]) throws(DispatchRequestError) {
        try self.init(method: method, path: path, headerLines: headers.map { $0.name + ": " + $0.value }, body: body)
    }

    public var path: String { bytes.path }

    public var headerLines: [String] { (shared ?? bytes).headerLines }

    public var body: [UInt8] { (shared ?? bytes).body }

    /// The block libcurl reads the header list and the body from.
    var headersAndBody: RequestBytes { shared ?? bytes }
}

/// Why a request could not be built; each case carries the offending text.
public enum DispatchRequestError: Error, Sendable, Equatable, CustomStringConvertible {
    case pathNotAbsolute(String)
    case invalidPathByte(String)
    case malformedHeaderLine(index: Int, line: String)

    public var description: String {
        switch self {
        case .pathNotAbsolute(let path): return "request path \"\(path)\" must start with \"/\""
        case .invalidPathByte(let path): return "request path \"\(path)\" contains a space, a control character or a byte outside ASCII"
        case .malformedHeaderLine(let index, let line):
            return "header line \(index) \"\(line)\" must be \"name: value\" without NUL, CR or LF"
        }
    }
}
