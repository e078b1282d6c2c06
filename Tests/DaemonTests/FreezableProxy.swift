import Foundation
import Glibc
import Locking
import PushdTestSupport
import Synchronization

/// A TCP relay on 127.0.0.1 to another local port that can be frozen: it then stops reading
/// and forwarding in both directions but keeps every socket open, as a network that drops
/// packets looks to a client whose kernel still gets acknowledgements (a stuck proxy or
/// server). New connections are taken and then left unanswered too. Thawing forwards again.
///
/// It can also lose the reply to one COMMIT (`loseCommitReply`): the COMMIT reaches the server,
/// which commits, and the client's connection is cut before the reply reaches it. The COMMIT is
/// an explicit one, or a statement's own outside a transaction block.
final class FreezableProxy: Sendable {
    let port: Int
    private let listener: Int32
    private let targetPort: Int
    private let frozen = Atomic<Bool>(false)
    private let stopped = Atomic<Bool>(false)
    /// The marker `loseCommitReply` waits for, while armed.
    private let commitMarker = Lock<[UInt8]?>(nil)
    /// How many COMMIT replies were lost.
    private let lostReplies = Atomic<Int>(0)

    init(targetPort: Int) throws {
        self.targetPort = targetPort
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0, listen(fd, 64) == 0 else { throw ProxyError(message: "proxy listener: \(String(cString: strerror(errno)))") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        listener = fd
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                Thread.detachNewThread { self.relay(client) }
            }
        }
    }

    struct ProxyError: Error { var message: String }

    func freeze() { frozen.store(true, ordering: .relaxed) }
    func thaw() { frozen.store(false, ordering: .relaxed) }

    /// Arms a lost COMMIT reply, once: on the first connection whose client sends `marker` (in
    /// a statement or a parameter of PostgreSQL's protocol, which is not encrypted here), the
    /// server's first reply after it that ends a transaction (ReadyForQuery saying the session
    /// is idle: the reply to the transaction's COMMIT, or to the marked statement itself when it
    /// ran outside a transaction block) is dropped once it has come, and both sides are cut.
    /// `commitRepliesLost` counts it.
    func loseCommitReply(after marker: String) { commitMarker.withLock { $0 = Array(marker.utf8) } }

    var commitRepliesLost: Int { lostReplies.load(ordering: .relaxed) }

    func stop() {
        stopped.store(true, ordering: .relaxed)
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func relay(_ client: Int32) {
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(targetPort).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(client)
            close(server)
            return
        }
        let done = Atomic<Int>(0)
        let finish: @Sendable () -> Void = {
            if done.add(1, ordering: .relaxed).newValue == 2 {
                close(client)
                close(server)
            }
        }
        // This connection took the armed marker. Set before the marked message is forwarded,
        // and the client sends nothing before the reply to the one before (libpq waits for it),
        // so every reply read after it answers the marked message or a later one.
        let marked = Atomic<Bool>(false)
        Thread.detachNewThread {
            self.pump(from: client, to: server) { bytes in
                if !marked.load(ordering: .relaxed) {
                    let taken = self.commitMarker.withLock { marker -> Bool in
                        guard let wanted = marker, Self.contains(bytes, wanted) else { return false }
                        marker = nil
                        return true
                    }
                    if taken { marked.store(true, ordering: .relaxed) }
                }
                return true
            }
            finish()
        }
        pump(from: server, to: client) { bytes in
            // The reply that ends the marked transaction: dropped, and the client cut.
            guard marked.load(ordering: .relaxed), Self.contains(bytes, Self.readyWhileIdle) else { return true }
            self.lostReplies.add(1, ordering: .relaxed)
            shutdown(client, Int32(SHUT_RDWR))
            shutdown(server, Int32(SHUT_RDWR))
            return false
        }
        finish()
    }

    /// PostgreSQL's ReadyForQuery message with the session idle ('Z', length 5, 'I'): the
    /// server sends it after a transaction has ended, committed or not.
    static let readyWhileIdle: [UInt8] = [0x5A, 0, 0, 0, 5, 0x49]

    static func contains(_ bytes: ArraySlice<UInt8>, _ wanted: [UInt8]) -> Bool {
        guard bytes.count >= wanted.count, let first = wanted.first else { return false }
        var index = bytes.startIndex
        while index <= bytes.endIndex - wanted.count {
            if bytes[index] == first && bytes[index..<index + wanted.count].elementsEqual(wanted) { return true }
            index += 1
        }
        return false
    }

    /// Copies bytes until either side closes, or `forward` refuses a chunk; while frozen, reads nothing.
    private func pump(from source: Int32, to destination: Int32, forward: (ArraySlice<UInt8>) -> Bool = { _ in true }) {
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while !stopped.load(ordering: .relaxed) {
            if frozen.load(ordering: .relaxed) {
                usleep(20_000)
                continue
            }
            var descriptor = pollfd(fd: source, events: Int16(POLLIN), revents: 0)
            let ready = poll(&descriptor, 1, 100)
            if ready == 0 || (ready < 0 && errno == EINTR) { continue }
            if frozen.load(ordering: .relaxed) { continue }
            let count = read(source, &buffer, buffer.count)
            if count <= 0 { break }
            guard forward(buffer[0..<count]) else { break }
            var sent = 0
            while sent < count {
                let written = buffer.withUnsafeBytes { send(destination, $0.baseAddress! + sent, count - sent, Int32(MSG_NOSIGNAL)) }
                if written <= 0 { break }
                sent += written
            }
            if sent < count { break }
        }
        shutdown(destination, Int32(SHUT_WR))
    }
}

extension FreezableProxy {
    /// A relay in front of `database`'s server, and the database's URL through it.
    static func relaying(_ database: IsolatedDatabase) throws -> (proxy: FreezableProxy, url: String) {
        guard let port = database.url.firstMatch(of: /127\.0\.0\.1:(\d+)/).flatMap({ Int($0.1) }) else {
            throw ProxyError(message: "no 127.0.0.1 port in \(database.url)")
        }
        let proxy = try FreezableProxy(targetPort: port)
        return (proxy, database.url.replacingOccurrences(of: "127.0.0.1:\(port)", with: "127.0.0.1:\(proxy.port)"))
    }

    /// Points the configuration file at `path` from `database` to `url` (the relay's), with
    /// `settings` (lines of its `database` section) added.
    static func route(config path: String, of database: IsolatedDatabase, to url: String, settings: String = "") throws {
        let yaml = try String(contentsOfFile: path, encoding: .utf8)
            .replacingOccurrences(of: "  url: \(database.url)\n", with: "  url: \(url)\n" + settings)
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
    }
}
