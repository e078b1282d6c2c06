#if canImport(Glibc)
import Glibc
#endif

/// The few socket calls the mock makes, each failing with the call's name and errno.
enum SocketHelpers {
    /// A non-blocking IPv4 listening socket; returns the descriptor and the bound port.
    static func listen(host: String, port: UInt16, reusePort: Bool) throws(MockServerError) -> (fd: Int32, port: UInt16) {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        let numericHost = host == "localhost" ? "127.0.0.1" : host
        if inet_pton(AF_INET, numericHost, &address.sin_addr) != 1 {
            throw .configuration("listen address \(host) is not an IPv4 address")
        }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw .system("socket", errno) }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if reusePort { _ = setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        if bound != 0 {
            let code = errno
            close(fd)
            throw .system("bind \(host):\(port)", code)
        }
        if Glibc.listen(fd, 1024) != 0 {
            let code = errno
            close(fd)
            throw .system("listen", code)
        }
        var actual = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &actual) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return (fd, UInt16(bigEndian: actual.sin_port))
    }

    enum Accepted {
        case connection(Int32)
        /// Nothing pending (or the client gave up before we got to it).
        case none
        /// The process is out of descriptors or memory; retrying at once would spin.
        case exhausted(Int32)
    }

    /// Accepts one pending connection as a non-blocking socket with Nagle off.
    static func acceptNonBlocking(_ listenFD: Int32) -> Accepted {
        let fd = accept(listenFD, nil, nil)
        if fd < 0 {
            let code = errno
            switch code {
            case EMFILE, ENFILE, ENOBUFS, ENOMEM: return .exhausted(code)
            default: return .none
            }
        }
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return .connection(fd)
    }
}
