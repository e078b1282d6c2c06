internal import CMicroHTTPD
import Synchronization
#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Where and how the endpoint listens.
public struct MetricsServerConfiguration: Sendable, Equatable {
    /// A literal IPv4 or IPv6 address, or "localhost". Loopback by default: metrics and
    /// readiness are for the local scraper and probes, not for the world.
    public var host: String
    /// 0 picks a free port; read the one chosen from `MetricsServer.port`.
    public var port: UInt16
    /// At most this many connections at once; further ones are refused.
    public var connectionLimit: Int
    /// An idle connection is closed after this many seconds.
    public var connectionTimeoutSeconds: Int

    public init(host: String = "127.0.0.1", port: UInt16 = 9464, connectionLimit: Int = 32, connectionTimeoutSeconds: Int = 10) {
        self.host = host
        self.port = port
        self.connectionLimit = connectionLimit
        self.connectionTimeoutSeconds = connectionTimeoutSeconds
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
/// Threads: libmicrohttpd answers each connection on a thread of its own, so a scrape
/// waiting on a slow scrape-time source never holds up `/healthz`; those threads read
/// only `routes` (immutable or locked). The daemon handle is touched only under `daemon`'s
/// lock, by `init` and `stop`; `stop` joins those threads, so `routes` outlives every
/// request, and it must not be called from a request.
public final class MetricsServer: Sendable {
    private let daemon: Mutex<OpaquePointer?>
    private let routes: EndpointRoutes
    /// The port actually bound, which differs from the configured one when that was 0.
    public let port: UInt16
    public let host: String

    public init(registry: MetricRegistry, configuration: MetricsServerConfiguration = MetricsServerConfiguration()) throws(MetricsServerError) {
        for (setting, value) in [("connectionLimit", configuration.connectionLimit),
                                 ("connectionTimeoutSeconds", configuration.connectionTimeoutSeconds)]
        where !(1...65535).contains(value) {
            throw .invalidLimit(setting: setting, value: value)
        }
        let routes = EndpointRoutes(registry: registry)
        let context = Unmanaged.passUnretained(routes).toOpaque()
        let host = configuration.host == "localhost" ? "127.0.0.1" : configuration.host
        let limit = UInt32(configuration.connectionLimit)
        let timeout = UInt32(configuration.connectionTimeoutSeconds)

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
                    pushd_mhd_start(pushd_mhd_flags_thread_per_connection(), $0, handleRequest, context, limit, timeout)
                }
            }
        } else if inet_pton(AF_INET6, host, &ipv6.sin6_addr) == 1 {
            ipv6.sin6_family = sa_family_t(AF_INET6)
            ipv6.sin6_port = configuration.port.bigEndian
            started = withUnsafePointer(to: &ipv6) { address in
                address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    pushd_mhd_start(pushd_mhd_flags_thread_per_connection() | pushd_mhd_flag_ipv6(), $0, handleRequest, context, limit, timeout)
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
        self.daemon = Mutex(started)
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

/// libmicrohttpd calls this on the connection's thread once the request headers are in; GET and HEAD
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
