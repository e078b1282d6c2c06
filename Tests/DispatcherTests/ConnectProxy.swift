import Foundation
import Glibc
import Locking
import Synchronization

/// A minimal HTTP CONNECT proxy on 127.0.0.1: reads the CONNECT line, dials the target on
/// 127.0.0.1, answers 200 and relays bytes both ways. Counts the tunnels it opened.
final class ConnectProxy: Sendable {
    let port: Int
    private let listener: Int32
    let tunnels = Atomic<Int>(0)
    let targets = Lock<[String]>([])

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) } }
        guard bound == 0, listen(fd, 16) == 0 else { throw TestServerError.launchFailed("proxy listener: \(String(cString: strerror(errno)))") }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        port = Int(UInt16(bigEndian: address.sin_port))
        listener = fd
        Thread.detachNewThread { [self] in
            while true {
                let client = accept(fd, nil, nil)
                if client < 0 { return }
                Thread.detachNewThread { self.serve(client) }
            }
        }
    }

    func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(_ client: Int32) {
        var request = [UInt8]()
        var byte: UInt8 = 0
        while !request.suffix(4).elementsEqual([13, 10, 13, 10]) {
            guard read(client, &byte, 1) == 1, request.count < 8192 else { close(client); return }
            request.append(byte)
        }
        let line = String(decoding: request.prefix { $0 != 13 }, as: UTF8.self)
        let parts = line.split(separator: " ")
        guard parts.count == 3, parts[0] == "CONNECT", let portText = parts[1].split(separator: ":").last, let port = UInt16(portText) else {
            _ = "HTTP/1.1 400 Bad Request\r\n\r\n".withCString { write(client, $0, strlen($0)) }
            close(client)
            return
        }
        targets.withLock { $0.append(String(parts[1])) }
        let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = port.bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            _ = "HTTP/1.1 502 Bad Gateway\r\n\r\n".withCString { write(client, $0, strlen($0)) }
            close(client)
            close(upstream)
            return
        }
        tunnels.add(1, ordering: .relaxed)
        _ = "HTTP/1.1 200 Connection established\r\n\r\n".withCString { write(client, $0, strlen($0)) }
        var fds = [pollfd(fd: client, events: Int16(POLLIN), revents: 0), pollfd(fd: upstream, events: Int16(POLLIN), revents: 0)]
        var buffer = [UInt8](repeating: 0, count: 65_536)
        relay: while poll(&fds, 2, -1) > 0 {
            for (index, entry) in fds.enumerated() where entry.revents != 0 {
                let count = read(entry.fd, &buffer, buffer.count)
                if count <= 0 { break relay }
                let target = index == 0 ? upstream : client
                var sent = 0
                while sent < count {
                    let written = buffer[sent..<count].withUnsafeBytes { write(target, $0.baseAddress, $0.count) }
                    if written <= 0 { break relay }
                    sent += written
                }
            }
        }
        close(client)
        close(upstream)
    }
}
