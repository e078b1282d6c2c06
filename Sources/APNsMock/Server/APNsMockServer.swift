import APNs
import Locking
#if canImport(Glibc)
import Glibc
#endif

/// An APNs look-alike HTTP/2 server.
///
/// `start()` returns once the listening sockets are bound, so a test can connect at once to
/// `port`; `stop()` closes every connection and joins the loop threads. Faults can be changed
/// and stats read from any thread while it runs.
public final class APNsMockServer: Sendable {
    private struct Running {
        var loops: [ServerLoop]
        var port: UInt16
        var control: ControlServer?
        var channelManagementPort: UInt16?
    }

    private let core: ServerCore
    private let running = Lock<Running?>(nil)

    public init(configuration: MockConfiguration) throws(MockServerError) {
        core = try ServerCore(configuration: configuration.validated())
    }

    /// Binds, starts the loop threads and returns the port clients should connect to.
    @discardableResult
    public func start() throws(MockServerError) -> UInt16 {
        if let port = running.withLock({ $0?.port }) { return port }
        // OpenSSL writes with plain write(2): a client that resets mid-answer would otherwise
        // kill the whole process with SIGPIPE instead of failing one connection with EPIPE.
        signal(SIGPIPE, SIG_IGN)
        let configuration = core.configuration
        var loops: [ServerLoop] = []
        var port = configuration.port
        do {
            for _ in 0..<configuration.loopThreads {
                let listener = try SocketHelpers.listen(
                    host: configuration.host, port: port, reusePort: configuration.loopThreads > 1)
                port = listener.port
                let loop = try ServerLoop(listenFD: listener.fd, core: core)
                loops.append(loop)
                try loop.start()
            }
            var managementPort: UInt16?
            if let wanted = configuration.channelManagementPort {
                let listener = try SocketHelpers.listen(host: configuration.host, port: wanted, reusePort: false)
                let loop = try ServerLoop(listenFD: listener.fd, core: core, role: .channelManagement)
                loops.append(loop)
                try loop.start()
                managementPort = listener.port
            }
            var control: ControlServer?
            if let controlPort = configuration.controlPort {
                control = try ControlServer(port: controlPort, server: self)
            }
            let state = Running(loops: loops, port: port, control: control, channelManagementPort: managementPort)
            running.withLock { $0 = state }
            return port
        } catch {
            for loop in loops { loop.stop() }
            throw error
        }
    }

    /// Closes every connection and waits for the loop threads to end.
    public func stop() {
        guard let state = running.withLock({ current -> Running? in
            let taken = current
            current = nil
            return taken
        }) else { return }
        state.control?.stop()
        for loop in state.loops { loop.stop() }
    }

    deinit { stop() }

    /// The port the server listens on; 0 before `start()`.
    public var port: UInt16 { running.withLock { $0?.port ?? 0 } }

    /// The channel management listener's port, when it runs.
    public var channelManagementPort: UInt16? { running.withLock { $0?.channelManagementPort } }

    /// The control endpoint's port, when it runs.
    public var controlPort: UInt16? { running.withLock { $0?.control?.port } }

    public var faults: FaultConfiguration { core.faultStore.snapshot }

    /// Replaces the faults; new requests see them at once.
    public func setFaults(_ faults: FaultConfiguration) throws(MockServerError) {
        core.faultStore.replace(try faults.validated())
    }

    public var stats: MockStats {
        var stats = core.accounting.stats
        core.channels.fill(&stats)
        return stats
    }

    /// Accepted notifications in answer order (empty unless `logsAccepted`).
    public var acceptedLog: [AcceptedNotification] { core.accounting.acceptedLog }

    /// Stats in the Prometheus text format.
    public var metricsText: String { StatsText.render(stats) }

    /// Creates a channel as the management API would, for tests and load tests that broadcast
    /// without going through it; nil when the bundle id has as many as allowed.
    public func createChannel(bundleID: String, storagePolicy: MessageStoragePolicy) -> String? {
        if case .created(let id) = core.channels.create(bundleID: bundleID, policy: storagePolicy) { return id }
        return nil
    }

    /// A channel APNs already has under `channelID` (one created before this mock was started
    /// in place of another), without a request and without counting it as created.
    public func adoptChannel(bundleID: String, channelID: String, storagePolicy: MessageStoragePolicy) {
        core.channels.adopt(bundleID: bundleID, channelID: channelID, policy: storagePolicy)
    }

    public func resetStats() {
        core.accounting.reset()
        core.channels.resetCounts()
    }

    /// Sends GOAWAY on every open connection, promising to finish the streams already begun.
    public func sendGoawayToAll() {
        for loop in running.withLock({ $0?.loops ?? [] }) { loop.goawayAll() }
    }
}
