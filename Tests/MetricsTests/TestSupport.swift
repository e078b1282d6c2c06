import Foundation
import Synchronization

/// A shared counter for closures that escape (atomics cannot be captured directly).
final class Tally: Sendable {
    private let storage = Atomic<Int>(0)
    func next() -> Int { storage.add(1, ordering: .relaxed).newValue }
    var value: Int { storage.load(ordering: .relaxed) }
}

/// A minimal HTTP/1.1 client over a plain socket, so the tests hit the real endpoint
/// without linking an HTTP library into them.
struct RawHTTPResponse {
    var status: Int
    var headers: [String: String]
    var body: String
}

enum RawHTTP {
    struct Failure: Error, CustomStringConvertible {
        let description: String
    }

    /// Opens a connection and sends nothing on it; the caller closes it.
    static func connectIdle(port: UInt16) throws -> Int32 {
        try connected(port: port)
    }

    /// Waits until the server closes `fd` (true) or `seconds` pass (false).
    static func waitForServerClose(_ fd: Int32, seconds: Int) -> Bool {
        var timeout = timeval(tv_sec: seconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, 0)
        return count == 0 || (count < 0 && errno == ECONNRESET)
    }

    /// Opens a connection from the loopback address `source` (127.0.0.0/8 all reaches this
    /// host), so a test can play several clients; sends nothing.
    static func connectIdle(port: UInt16, from source: String) throws -> Int32 {
        try connected(port: port, source: source)
    }

    private static func connected(port: UInt16, source: String? = nil) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(String(cString: strerror(errno)))") }
        if let source {
            var local = sockaddr_in()
            local.sin_family = sa_family_t(AF_INET)
            inet_pton(AF_INET, source, &local.sin_addr)
            let bound = withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard bound == 0 else {
                let detail = String(cString: strerror(errno))
                close(fd)
                throw Failure(description: "bind to \(source): \(detail)")
            }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        inet_pton(AF_INET, "127.0.0.1", &address.sin_addr)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let detail = String(cString: strerror(errno))
            close(fd)
            throw Failure(description: "connect to 127.0.0.1:\(port): \(detail)")
        }
        return fd
    }

    static func request(port: UInt16, method: String = "GET", path: String, from source: String? = nil) throws -> RawHTTPResponse {
        let fd = try connected(port: port, source: source)
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let request = Array("\(method) \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n".utf8)
        let sent = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        guard sent == request.count else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let count = chunk.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 { throw Failure(description: "recv: \(String(cString: strerror(errno)))") }
            if count == 0 && received.isEmpty { throw Failure(description: "connection closed without a response") }
            if count == 0 { break }
            received.append(contentsOf: chunk[0..<count])
        }
        let text = String(decoding: received, as: UTF8.self)
        guard let split = text.range(of: "\r\n\r\n") else { throw Failure(description: "no header end in: \(text)") }
        let head = text[..<split.lowerBound].components(separatedBy: "\r\n")
        guard let statusLine = head.first, statusLine.split(separator: " ").count >= 2,
              let status = Int(statusLine.split(separator: " ")[1]) else {
            throw Failure(description: "bad status line in: \(text)")
        }
        var headers: [String: String] = [:]
        for line in head.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return RawHTTPResponse(status: status, headers: headers, body: String(text[split.upperBound...]))
    }
}
