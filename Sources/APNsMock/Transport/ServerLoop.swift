#if canImport(Glibc)
import Glibc
#endif

/// One event loop with its own listening socket (SO_REUSEPORT spreads connections over loops)
/// and the connections it accepted.
///
/// Thread ownership: `connections` and the listening socket belong to the loop thread; other
/// threads reach them only through `loop.execute`.
final class ServerLoop: EventLoopHandler, @unchecked Sendable {
    let loop: EventLoop
    private let listenFD: Int32
    private let core: ServerCore
    private var connections: [UInt64: HTTP2Connection] = [:]
    private let role: ListenerRole

    init(listenFD: Int32, core: ServerCore, role: ListenerRole = .notifications) throws(MockServerError) {
        self.role = role
        self.loop = try EventLoop()
        self.listenFD = listenFD
        self.core = core
        try loop.register(fd: listenFD, handler: self)
    }

    func start() throws(MockServerError) {
        try loop.start()
    }

    /// Stops the loop thread, then closes every connection and the listener.
    func stop() {
        loop.stop()
        for connection in connections.values { connection.close() }
        connections.removeAll()
        close(listenFD)
    }

    func handleEvents(readable: Bool, writable: Bool, hangup: Bool) {
        while true {
            let fd: Int32
            switch SocketHelpers.acceptNonBlocking(listenFD) {
            case .connection(let accepted): fd = accepted
            case .none: return
            case .exhausted:
                pauseAccepting()
                return
            }
            guard let tls = core.tls.makeSession(fd: fd) else {
                close(fd)
                continue
            }
            let id = core.nextConnectionID()
            let connection = HTTP2Connection(id: id, fd: fd, tls: tls, loop: loop, core: core, role: role) { [weak self] closed in
                self?.connections[closed.id] = nil
            }
            do {
                try loop.register(fd: fd, handler: connection)
            } catch {
                close(fd)
                continue
            }
            connections[id] = connection
            connection.armHandshakeTimeout(milliseconds: UInt64(core.configuration.handshakeTimeoutMilliseconds))
            core.accounting.recordConnectionAccepted()
        }
    }

    /// Out of descriptors the listener stays readable; stop watching it for a moment instead of
    /// spinning, and let closing connections free some.
    private func pauseAccepting() {
        loop.unregister(fd: listenFD)
        loop.schedule(afterMilliseconds: 100) { [weak self] in
            guard let self else { return }
            try? self.loop.register(fd: self.listenFD, handler: self)
        }
    }

    /// Sends GOAWAY on every open connection of this loop (from the control API).
    func goawayAll() {
        loop.execute { [self] in
            for connection in connections.values { connection.goawayNow() }
        }
    }
}
