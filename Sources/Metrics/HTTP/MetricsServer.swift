internal import CMicroHTTPD
import Locking
import Posix
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where and how the endpoint listens.
///
/// The defaults keep `/healthz`, `/readyz` and `/metrics` answering while a hostile or
/// broken client holds many connections open: connections wait on epoll (an idle one costs
/// a descriptor, not a thread), one address may hold only `perIPConnectionLimit` of them,
/// a connection must send its request within `requestTimeoutSeconds` and take its answer
/// within `answerTimeoutSeconds` however slowly it trickles, and one that makes no progress
/// at all is closed after `connectionTimeoutSeconds`.
public struct MetricsServerConfiguration: Sendable, Equatable {
    /// A literal IPv4 or IPv6 address, or "localhost". Loopback by default: metrics and
    /// readiness are for the local scraper and probes, not for the world.
    public var host: String
    /// 0 picks a free port; read the one chosen from `MetricsServer.port`.
    public var port: UInt16
    /// At most this many connections at once; further ones wait in the listen queue.
    public var connectionLimit: Int
    /// At most this many connections at once from one address (0: no bound), so that one
    /// client cannot take the slots of the scraper and the probes; one more is closed as soon
    /// as it is accepted (`EndpointRefusal.perAddressLimit`).
    public var perIPConnectionLimit: Int
    /// A connection that moves no byte for this many seconds is closed.
    public var connectionTimeoutSeconds: Int
    /// A connection must have sent a whole request head this many seconds after it opened or
    /// after its previous answer, however it trickles (`EndpointRefusal.requestTimeout`).
    public var requestTimeoutSeconds: Int
    /// A connection must have taken its answer this many seconds after its request came in
    /// (`EndpointRefusal.answerTimeout`).
    public var answerTimeoutSeconds: Int
    /// Polling threads; each serves its share of the connections. Two keep a slow scrape
    /// (a scrape-time source that blocks) from holding up `/healthz`.
    public var threads: Int

    public init(host: String = "127.0.0.1", port: UInt16 = 9464, connectionLimit: Int = 4096,
                perIPConnectionLimit: Int = 64, connectionTimeoutSeconds: Int = 10, threads: Int = 2,
                requestTimeoutSeconds: Int = 5, answerTimeoutSeconds: Int = 10) {
        self.host = host
        self.port = port
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
        self.requestTimeoutSeconds = requestTimeoutSeconds
        self.answerTimeoutSeconds = answerTimeoutSeconds
        self.threads = threads
    }
}

public enum MetricsServerError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidHost(String)
    case invalidLimit(setting: String, value: Int)
    case cannotListen(host: String, port: UInt16, detail: String)

    public var description: String {
        switch self {
        case .invalidHost(let host):
            return "metrics listen address \"\(host)\" is not an IPv4 or IPv6 address (nor \"localhost\")"
        case .invalidLimit(let setting, let value):
            return "metrics server \(setting) must be between 1 and 65535, got \(value)"
        case .cannotListen(let host, let port, let detail):
            return "metrics server cannot listen on \(host) port \(port): \(detail)"
        }
    }
}

/// What the library's callbacks reach through their context pointer: immutable references
/// to thread-safe parts only.
private final class ServerContext: Sendable {
    let routes: EndpointRoutes
    let watch: ConnectionWatch
    let shared = SharedExposition()
    let onRefusal: @Sendable (EndpointRefusal) -> Void

    init(routes: EndpointRoutes, watch: ConnectionWatch, onRefusal: @escaping @Sendable (EndpointRefusal) -> Void) {
        self.routes = routes
        self.watch = watch
        self.onRefusal = onRefusal
    }
}

/// The HTTP endpoint serving `GET /metrics`, `/healthz` and `/readyz` on libmicrohttpd.
///
/// Threads: libmicrohttpd answers on a small pool of threads, each polling its share of
/// the connections with epoll, so a thousand idle sockets cost no thread and a scrape
/// waiting on a slow scrape-time source holds one pool thread while another answers
/// `/healthz`; those threads read only the context (immutable or locked). A sweeper thread
/// ends connections past their request or answer deadline (`ConnectionWatch`). The daemon
/// handle is touched only under `daemon`'s lock, by `init` and `stop`; `stop` ends the
/// sweeper and then joins the pool threads, so the context outlives every callback, and it
/// must not be called from a request.
///
/// Every refusal (an address over its bound, a request or answer past its deadline) is
/// reported to `onRefusal`, on a pool or the sweeper thread: keep it short.
public final class MetricsServer: Sendable {
    private let daemon: Lock<OpaquePointer?>
    private let context: ServerContext
    private let sweeperStop = Semaphore()
    private let sweeperDone = Semaphore()
    /// The port actually bound, which differs from the configured one when that was 0.
    public let port: UInt16
    public let host: String

    public init(registry: MetricRegistry, configuration: MetricsServerConfiguration = MetricsServerConfiguration(),
                onRefusal: @escaping @Sendable (EndpointRefusal) -> Void = { _ in }) throws(MetricsServerError) {
        for (setting, value) in [("connectionLimit", configuration.connectionLimit),
                                 ("connectionTimeoutSeconds", configuration.connectionTimeoutSeconds),
                                 ("requestTimeoutSeconds", configuration.requestTimeoutSeconds),
                                 ("answerTimeoutSeconds", configuration.answerTimeoutSeconds),
                                 ("threads", configuration.threads)]
        where !(1...65535).contains(value) {
            throw .invalidLimit(setting: setting, value: value)
        }
        if !(0...65535).contains(configuration.perIPConnectionLimit) {
            throw .invalidLimit(setting: "perIPConnectionLimit", value: configuration.perIPConnectionLimit)
        }
        // Room for every endpoint connection beside the daemon's own descriptors.
        DescriptorLimit.raise(toAtLeast: UInt64(configuration.connectionLimit) + 1024)
        let watch = ConnectionWatch(perAddressLimit: configuration.perIPConnectionLimit,
                                    requestTimeout: Double(configuration.requestTimeoutSeconds),
                                    answerTimeout: Double(configuration.answerTimeoutSeconds))
        let context = ServerContext(routes: EndpointRoutes(registry: registry), watch: watch, onRefusal: onRefusal)
        let pointer = Unmanaged.passUnretained(context).toOpaque()
        let host = configuration.host == "localhost" ? "127.0.0.1" : configuration.host
        let limit = UInt32(configuration.connectionLimit)
        let timeout = UInt32(configuration.connectionTimeoutSeconds)
        // libmicrohttpd splits the limit evenly over the pool and refuses a pool larger than it.
        let threads = UInt32(min(configuration.threads, configuration.connectionLimit))
        let backlog: UInt32 = 1024

        let started: OpaquePointer?
        // Cleared so that a failure below reports bind's errno, not an older one.
        errno = 0
        var ipv4 = sockaddr_in()
        var ipv6 = sockaddr_in6()
        if inet_pton(AF_INET, host, &ipv4.sin_addr) == 1 {
            ipv4.sin_family = sa_family_t(AF_INET)
            ipv4.sin_port = configuration.port.bigEndian
            started = withUnsafePointer(to: &ipv4) { address in
                address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    pushd_mhd_start_watched(pushd_mhd_flags_epoll_pool(), $0, admitConnection, handleRequest, pointer,
                                            noteConnection, noteRequestEnded, threads, limit, timeout, backlog)
                }
            }
        } else if inet_pton(AF_INET6, host, &ipv6.sin6_addr) == 1 {
            ipv6.sin6_family = sa_family_t(AF_INET6)
            ipv6.sin6_port = configuration.port.bigEndian
            started = withUnsafePointer(to: &ipv6) { address in
                address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    pushd_mhd_start_watched(pushd_mhd_flags_epoll_pool() | pushd_mhd_flag_ipv6(), $0, admitConnection, handleRequest, pointer,
                                            noteConnection, noteRequestEnded, threads, limit, timeout, backlog)
                }
            }
        } else {
            throw .invalidHost(configuration.host)
        }
        let startErrno = errno
        guard let started else {
            let detail = startErrno != 0 ? String(cString: strerror(startErrno)) : "libmicrohttpd refused to start"
            throw .cannotListen(host: configuration.host, port: configuration.port, detail: detail)
        }
        self.context = context
        self.port = pushd_mhd_bound_port(started)
        self.host = host
        self.daemon = Lock(started)
        let stopSignal = sweeperStop
        let done = sweeperDone
        PosixThread.detach(name: "pushd-metrics-sweep") {
            // Twice a second: a deadline is kept to within half a second.
            while !stopSignal.wait(timeout: 0.5) {
                let ended = watch.sweep(now: monotonicSeconds()) { descriptor in
                    // A reset rather than a FIN behind unread data: the kernel lets go of
                    // what a client that stopped reading left in the socket at once.
                    var resetOnClose = linger(l_onoff: 1, l_linger: 0)
                    setsockopt(descriptor, SOL_SOCKET, SO_LINGER, &resetOnClose, socklen_t(MemoryLayout<linger>.size))
                    shutdown(descriptor, Int32(SHUT_RDWR))
                }
                for reason in ended { onRefusal(reason) }
            }
            done.signal()
        }
    }

    deinit {
        stop()
    }

    /// What `/readyz` answers: 200 when ready, 503 otherwise, with the detail as body.
    public var readiness: Readiness {
        get { context.routes.currentReadiness }
        set { context.routes.currentReadiness = newValue }
    }

    public func setReady(_ isReady: Bool, detail: String) {
        readiness = Readiness(isReady: isReady, detail: detail)
    }

    /// Connections open now, and how many the busiest address holds.
    public var connectionCounts: (open: Int, busiestAddress: Int) { context.watch.counts }

    /// Closes the listening socket and waits for requests in progress. Idempotent.
    public func stop() {
        daemon.withLock { daemon in
            if let running = daemon {
                sweeperStop.signal()
                sweeperDone.wait()
                MHD_stop_daemon(running)
                context.shared.release()
                daemon = nil
            }
        }
    }
}

/// Seconds on CLOCK_MONOTONIC, for the connection deadlines.
private func monotonicSeconds() -> Double {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
}

/// The rendered `/metrics` answer as one libmicrohttpd response, queued on every connection
/// that asks while it is the newest: a client that never reads its answer holds a reference
/// to it, not a copy, so many such clients cost one answer's memory per render (at most ten
/// renders a second, `EndpointRoutes.expositionReuse`, each held until the answer deadline),
/// not one per connection.
private final class SharedExposition: Sendable {
    private typealias Kept = (stamp: UInt64, response: OpaquePointer)
    /// The newest render's stamp and response; the library's reference counting keeps a
    /// response alive while connections still send it.
    private let cached = Lock<Kept?>(nil)

    /// Queues the answer of render `stamp` on `connection`. Queued under the lock, so that a
    /// newer render cannot release the response between looking it up and queueing it.
    func queue(_ connection: OpaquePointer, _ response: EndpointResponse, stamp: UInt64) -> MHD_Result {
        cached.withLock { (kept: inout Kept?) -> MHD_Result in
            if let current = kept, current.stamp == stamp {
                return pushd_mhd_queue(connection, response.status, current.response)
            }
            let made = response.body.withUnsafeBytes { body in
                pushd_mhd_shared_response(body.baseAddress, body.count, response.contentType)
            }
            guard let made else { return pushd_mhd_refuse() }
            let queued = pushd_mhd_queue(connection, response.status, made)
            if let current = kept, current.stamp > stamp {
                // A render older than the one kept (two threads rendered at once): not kept.
                MHD_destroy_response(made)
            } else {
                if let current = kept { MHD_destroy_response(current.response) }
                kept = (stamp, made)
            }
            return queued
        }
    }

    /// Gives the kept response back; after the daemon stopped.
    func release() {
        cached.withLock { (kept: inout Kept?) in
            if let current = kept { MHD_destroy_response(current.response) }
            kept = nil
        }
    }
}

private func connectionKey(_ connection: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: connection)) }

/// Asked by libmicrohttpd about each accepted connection before it is served: one address
/// over its bound is refused (closed at once) and counted.
private let admitConnection: MHD_AcceptPolicyCallback = { pointer, address, _ in
    guard let pointer else { return pushd_mhd_accept() }
    let context = Unmanaged<ServerContext>.fromOpaque(pointer).takeUnretainedValue()
    var bytes = [UInt8](repeating: 0, count: 16)
    let count = Int(pushd_mhd_address_bytes(address, &bytes))
    if context.watch.admits(Array(bytes[0..<count])) { return pushd_mhd_accept() }
    context.onRefusal(.perAddressLimit)
    return pushd_mhd_refuse()
}

/// A connection started or closed.
private let noteConnection: MHD_NotifyConnectionCallback = { pointer, connection, _, code in
    guard let pointer, let connection else { return }
    let context = Unmanaged<ServerContext>.fromOpaque(pointer).takeUnretainedValue()
    if pushd_mhd_notify_is_start(code) != 0 {
        var bytes = [UInt8](repeating: 0, count: 16)
        let count = Int(pushd_mhd_connection_address(connection, &bytes))
        context.watch.opened(connectionKey(connection), descriptor: pushd_mhd_connection_fd(connection),
                             address: Array(bytes[0..<count]), now: monotonicSeconds())
    } else {
        context.watch.closed(connectionKey(connection))
    }
}

/// A request ended: its answer was sent, or it was given up.
private let noteRequestEnded: MHD_RequestCompletedCallback = { pointer, connection, _, _ in
    guard let pointer, let connection else { return }
    Unmanaged<ServerContext>.fromOpaque(pointer).takeUnretainedValue().watch.answered(connectionKey(connection), now: monotonicSeconds())
}

/// libmicrohttpd calls this on a pool thread once the request headers are in; GET and HEAD
/// carry no body, and anything else is refused at once, so the first call answers.
private let handleRequest: MHD_AccessHandlerCallback = { pointer, connection, url, method, _, _, _, _ in
    guard let pointer, let connection else { return pushd_mhd_refuse() }
    let context = Unmanaged<ServerContext>.fromOpaque(pointer).takeUnretainedValue()
    context.watch.requestArrived(connectionKey(connection), now: monotonicSeconds())
    let path = url.map { String(cString: $0) } ?? "/"
    let verb = method.map { String(cString: $0) } ?? ""
    let response = context.routes.respond(method: verb, path: path)
    if let stamp = response.expositionStamp {
        return context.shared.queue(connection, response, stamp: stamp)
    }
    return response.body.withUnsafeBytes { body in
        pushd_mhd_respond(connection, response.status, response.contentType, body.baseAddress, body.count)
    }
}
