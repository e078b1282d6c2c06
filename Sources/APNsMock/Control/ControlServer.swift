internal import CNghttp2
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// A plain HTTP/1.1 endpoint on 127.0.0.1 for reading stats and changing faults while the
/// mock runs. Control traffic is rare and tiny, so one blocking thread serves it, one request
/// per connection.
///
/// Thread ownership: the listening socket and eventfd are used by the control thread; `stop()`
/// only writes the eventfd and joins.
final class ControlServer: @unchecked Sendable {
    let port: UInt16
    private let listenFD: Int32
    private let wakeFD: Int32
    private var thread: LoopThread?

    init(port: UInt16, server: APNsMockServer) throws(MockServerError) {
        let listener = try SocketHelpers.listen(host: "127.0.0.1", port: port, reusePort: false)
        listenFD = listener.fd
        self.port = listener.port
        wakeFD = pushd_nghttp2_eventfd()
        if wakeFD < 0 {
            let code = errno
            close(listenFD)
            throw .system("eventfd", code)
        }
        let router = ControlRouter(server: server)
        let listenFD = self.listenFD
        let wakeFD = self.wakeFD
        thread = try LoopThread {
            ControlServer.serve(listenFD: listenFD, wakeFD: wakeFD, router: router)
        }
    }

    func stop() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
        thread?.join()
        thread = nil
        close(listenFD)
        close(wakeFD)
    }

    private static func serve(listenFD: Int32, wakeFD: Int32, router: ControlRouter) {
        var fds = [pollfd(fd: listenFD, events: Int16(POLLIN), revents: 0), pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
        while true {
            if poll(&fds, 2, -1) < 0 && errno != EINTR { return }
            if fds[1].revents != 0 { return }
            guard fds[0].revents != 0 else { continue }
            switch SocketHelpers.acceptNonBlocking(listenFD) {
            case .connection(let client):
                handle(client: client, router: router)
                close(client)
            case .none: continue
            case .exhausted: usleep(100_000)
            }
        }
    }

    private static func handle(client: Int32, router: ControlRouter) {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        var request: HTTPRequestHead?
        while received.count < 4 * 1024 * 1024 {
            var pfd = pollfd(fd: client, events: Int16(POLLIN), revents: 0)
            if poll(&pfd, 1, 2000) <= 0 { return }
            let count = chunk.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
            if count <= 0 { break }
            received.append(contentsOf: chunk[0..<count])
            if request == nil { request = HTTPRequestHead.parse(received) }
            if let head = request, received.count >= head.bodyOffset + head.contentLength { break }
        }
        let response: ControlResponse
        if let head = request {
            let end = min(received.count, head.bodyOffset + head.contentLength)
            response = router.route(method: head.method, path: head.path, body: Array(received[head.bodyOffset..<end]))
        } else {
            response = ControlResponse(status: 400, contentType: "text/plain", body: "malformed HTTP request\n")
        }
        var bytes = Array(response.serialized.utf8)
        var sent = 0
        while sent < bytes.count {
            var pfd = pollfd(fd: client, events: Int16(POLLOUT), revents: 0)
            if poll(&pfd, 1, 2000) <= 0 { return }
            let count = bytes.withUnsafeMutableBytes { send(client, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if count <= 0 { return }
            sent += count
        }
    }
}

/// Request line and the body's position, parsed once the blank line has arrived.
struct HTTPRequestHead: Equatable {
    var method: String
    var path: String
    var contentLength: Int
    var bodyOffset: Int

    static func parse(_ bytes: [UInt8]) -> HTTPRequestHead? {
        let separator: [UInt8] = [13, 10, 13, 10]
        guard bytes.count >= 4 else { return nil }
        var end: Int?
        for index in 0...(bytes.count - 4) where Array(bytes[index..<index + 4]) == separator {
            end = index
            break
        }
        guard let end else { return nil }
        let head = String(decoding: bytes[0..<end], as: UTF8.self)
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let requestLine = lines.first?.split(separator: " ") ?? []
        guard requestLine.count >= 2 else { return nil }
        var length = 0
        for line in lines.dropFirst() {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2, parts[0].lowercased() == "content-length" {
                length = Int(parts[1].trimmingCharacters(in: " \t")) ?? 0
            }
        }
        return HTTPRequestHead(method: String(requestLine[0]), path: String(requestLine[1]),
                               contentLength: max(0, length), bodyOffset: end + 4)
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in set: String) -> Substring {
        var text = self
        while let first = text.first, set.contains(first) { text = text.dropFirst() }
        while let last = text.last, set.contains(last) { text = text.dropLast() }
        return text
    }
}
