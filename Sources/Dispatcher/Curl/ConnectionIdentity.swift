import Glibc

/// The last `capacity` values inserted, for "seen before?" over an unbounded stream of ids.
struct RecentSet: Equatable {
    private var members: Set<Int64> = []
    private var order: [Int64] = []
    let capacity: Int
    /// The highest value let go to stay within `capacity` (`Int64.min` while none was).
    private(set) var forgotten = Int64.min

    init(capacity: Int) { self.capacity = capacity }

    func contains(_ value: Int64) -> Bool { members.contains(value) }

    /// True when `value` was not among the recent ones.
    mutating func insert(_ value: Int64) -> Bool {
        guard members.insert(value).inserted else { return false }
        order.append(value)
        if order.count > capacity {
            let dropped = order.removeFirst()
            members.remove(dropped)
            forgotten = max(forgotten, dropped)
        }
        return true
    }
}

enum SocketAddress {
    /// The local port `fd` is bound to, or -1.
    static func localPort(of fd: Int32) -> Int32 {
        var address = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let found = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        guard found == 0 else { return -1 }
        switch Int32(address.ss_family) {
        case AF_INET:
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int32(UInt16(bigEndian: $0.pointee.sin_port)) } }
        case AF_INET6:
            return withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int32(UInt16(bigEndian: $0.pointee.sin6_port)) } }
        default:
            return -1
        }
    }
}
