internal import CMicroHTTPD
import Locking
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
/// and a connection that makes no progress is closed after `connectionTimeoutSeconds`.
public struct MetricsServerConfiguration: Sendable, Equatable {
    /// A literal IPv4 or IPv6 address, or "localhost". Loopback by default: metrics and
    /// readiness are for the local scraper and probes, not for the world.
    public var host: String
    /// 0 picks a free port; read the one chosen from `MetricsServer.port`.
    public var port: UInt16
    /// At most this many connections at once; further ones are refused.
    public var connectionLimit: Int
    /// At most this many connections at once from one address (0: no bound), so that one
    /// client cannot take the slots of the scraper and the probes.
    public var perIPConnectionLimit: Int
    /// An idle connection is closed after this many seconds.
    public var connectionTimeoutSeconds: Int
    /// Polling threads; each serves its share of the connections. Two keep a slow scrape
    /// (a scrape-time source that blocks) from holding up `/healthz`.
    public var threads: Int

    public init(host: String = "127.0.0.1", port: UInt16 = 9464, connectionLimit: Int = 4096,
                perIPConnectionLimit: Int = 64, connectionTimeoutSeconds: Int = 10, threads: Int = 2) {
        self.host = host
        self.port = port
        self.connectionLimit = connectionLimit
        self.perIPConnectionLimit = perIPConnectionLimit
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
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

/// The HTTP endpoint serving `GET /metrics`, `/healthz` and `/readyz` on libmicrohttpd.
///
/// Threads: libmicrohttpd answers on a small pool of threads, each polling its share of
/// the connections with epoll, so a thousand idle sockets cost no thread and a scrape
/// waiting on a slow scrape-time source holds one pool thread while another answers
/// `/healthz`; those threads read only `routes` (immutable or locked). The daemon handle is touched only under `daemon`'s
/// lock, by `init` and `stop`; `stop` joins those threads, so `routes` outlives every
/// request, and it must not be called from a request.
public final class MetricsServer: Sendable {
    private let daemon: Lock<OpaquePointer?>
    private let routes: EndpointRoutes
    /// The port actually bound, which differs from the configured one when that was 0.
    public let port: UInt16
    public let host: String

    public init(registry: MetricRegistry, configuration: MetricsServerConfiguration = MetricsServerConfiguration()) throws(MetricsServerError) {
        for (setting, value) in [("connectionLimit", configuration.connectionLimit),
                                 ("connectionTimeoutSeconds", configuration.connectionTimeoutSeconds),
                                 ("threads", configuration.threads)]
        where !(1...65535).contains(value) {
            throw .invalidLimit(setting: setting, value: value)
        }
        if !(0...65535).contains(configuration.perIPConnectionLimit) {
            throw .invalidLimit(setting: "perIPConnectionLimit", value: configuration.perIPConnectionLimit)
        }
        // Room for every endpoint connection beside the daemon's own descriptors.
        DescriptorLimit.raise(toAtLeast: UInt64(configuration.connectionLimit) + 1024)
        let routes = EndpointRoutes(registry: registry)
        let context = Unmanaged.passUnretained(routes).toOpaque()
        let host = configuration.host == "localhost" ? "127.0.0.1" : configuration.host
        let limit = UInt32(configuration.connectionLimit)
        let perIP = UInt32(configuration.perIPConnectionLimit)
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
                    pushd_mhd_start_pool(pushd_mhd_flags_epoll_pool(), $0, handleRequest, context, threads, limit, perIP, timeout, backlog)
                }
            }
        } else if inet_pton(AF_INET6, host, &ipv6.sin6_addr) == 1 {
            ipv6.sin6_family = sa_family_t(AF_INET6)
            ipv6.sin6_port = configuration.port.bigEndian
            started = withUnsafePointer(to: &ipv6) { address in
                address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    pushd_mhd_start_pool(pushd_mhd_flags_epoll_pool() | pushd_mhd_flag_ipv6(), $0, handleRequest, context, threads, limit, perIP,
                                         timeout, backlog)
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
        self.routes = routes
        self.port = pushd_mhd_bound_port(started)
        self.host = host
        self.daemon = Lock(started)
    }

    deinit {
        stop()
    }

    /// What `/readyz` answers: 200 when ready, 503 otherwise, with the detail as body.
    public var readiness: Readiness {
        get { routes.currentReadiness }
        set { routes.currentReadiness = newValue }
    }

    public func setReady(_ isReady: Bool, detail: String) {
        readiness = Readiness(isReady: isReady, detail: detail)
    }

    /// Closes the listening socket and waits for requests in progress. Idempotent.
    public func stop() {
        daemon.withLock { daemon in
            if let running = daemon {
                MHD_stop_daemon(running)
                daemon = nil
            }
        }
    }
}

/// libmicrohttpd calls this on a pool thread once the request headers are in; GET and HEAD
/// carry no body, and anything else is refused at once, so the first call answers.
private let handleRequest: MHD_AccessHandlerCallback = { context, connection, url, method, _, _, _, _ in
    guard let context, let connection else { return pushd_mhd_refuse() }
    let routes = Unmanaged<EndpointRoutes>.fromOpaque(context).takeUnretainedValue()
    let path = url.map { String(cString: $0) } ?? "/"
    let verb = method.map { String(cString: $0) } ?? ""
    let response = routes.respond(method: verb, path: path)
    return response.body.withUnsafeBytes { body in
        pushd_mhd_respond(connection, response.status, response.contentType, body.baseAddress, body.count)
    }
}
