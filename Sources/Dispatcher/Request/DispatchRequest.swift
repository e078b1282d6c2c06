/// One HTTP/2 request as the engine sends it: method, path, header lines and body.
///
/// The path and header lines are packed once, at construction, into a single NUL-separated
/// byte block so the event loop can hand them to libcurl with one copy and no per-line
/// allocation; the APNs layer builds these from notifications.
public struct DispatchRequest: Sendable {
    public enum Method: String, Sendable {
        case post = "POST"
        case get = "GET"
        case put = "PUT"
        case delete = "DELETE"
    }

    public let method: Method
    /// Path, then each header line, each followed by a NUL byte.
    let packed: [UInt8]
    let pathLength: Int
    let headerCount: Int
    public let body: [UInt8]

    /// - Parameters:
    ///   - path: the request path starting with "/", as sent (already percent-encoded).
    ///   - headerLines: "name: value" lines; names are sent in lowercase by HTTP/2.
    public init(method: Method = .post, path: String, headerLines: [String], body: [UInt8]) throws(DispatchRequestError) {
        guard path.utf8.first == UInt8(ascii: "/") else { throw .pathNotAbsolute(path) }
        var packed = [UInt8]()
        packed.reserveCapacity(path.utf8.count + 1 + headerLines.reduce(0) { $0 + $1.utf8.count + 1 })
        for byte in path.utf8 {
            guard byte > 0x20, byte != 0x7F else { throw .invalidPathByte(path) }
            packed.append(byte)
        }
        packed.append(0)
        for (index, line) in headerLines.enumerated() {
            guard let colon = line.utf8.firstIndex(of: UInt8(ascii: ":")), colon != line.utf8.startIndex else {
                throw .malformedHeaderLine(index: index, line: line)
            }
            for byte in line.utf8 {
                guard byte != 0, byte != 0x0A, byte != 0x0D else { throw .malformedHeaderLine(index: index, line: line) }
                packed.append(byte)
            }
            packed.append(0)
        }
        self.method = method
        self.packed = packed
        self.pathLength = path.utf8.count
        self.headerCount = headerLines.count
        self.body = body
    }

    /// Header lines checked and packed once, for many requests that share them.
    public struct HeaderBlock: Sendable {
        let packed: [UInt8]
        let count: Int

        public init(lines: [String]) throws(DispatchRequestError) {
            let probe = try DispatchRequest(path: "/", headerLines: lines, body: [])
            packed = Array(probe.packed[2...])
            count = lines.count
        }
    }

    /// A request whose header lines were checked once in `headers`: only the path is checked
    /// and the block copied, so requests that differ only in their path cost one allocation.
    public init(method: Method = .post, path: String, headers: HeaderBlock, body: [UInt8]) throws(DispatchRequestError) {
        guard path.utf8.first == UInt8(ascii: "/") else { throw .pathNotAbsolute(path) }
        let pathLength = path.utf8.count
        var packed = [UInt8]()
        packed.reserveCapacity(pathLength + 1 + headers.packed.count)
        for byte in path.utf8 {
            guard byte > 0x20, byte != 0x7F else { throw .invalidPathByte(path) }
            packed.append(byte)
        }
        packed.append(0)
        packed.append(contentsOf: headers.packed)
        self.method = method
        self.packed = packed
        self.pathLength = pathLength
        self.headerCount = headers.count
        self.body = body
    }

    /// Convenience for header name/value pairs.
    public init(method: Method = .post, path: String, headers: [(name: String, value: String)], body: [UInt8]) throws(DispatchRequestError) {
        try self.init(method: method, path: path, headerLines: headers.map { $0.name + ": " + $0.value }, body: body)
    }

    public var path: String { String(decoding: packed[0..<pathLength], as: UTF8.self) }

    public var headerLines: [String] {
        packed[(pathLength + 1)...].split(separator: 0, omittingEmptySubsequences: false)
            .prefix(headerCount).map { String(decoding: $0, as: UTF8.self) }
    }
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
