import Locking

/// Whether the daemon is ready to take work, as `/readyz` reports it.
public struct Readiness: Sendable, Equatable {
    public var isReady: Bool
    /// Said in the response body; for a daemon that is not ready, what it waits for
    /// (for example "database unreachable: connection refused").
    public var detail: String

    public init(isReady: Bool, detail: String) {
        self.isReady = isReady
        self.detail = detail
    }

    public static let starting = Readiness(isReady: false, detail: "starting")
}

/// One answer of the endpoint, before it is handed to the HTTP library.
struct EndpointResponse: Equatable {
    var status: UInt32
    var contentType: String
    var body: [UInt8]

    static let metricsContentType = "text/plain; version=0.0.4; charset=utf-8"
    static let textContentType = "text/plain; charset=utf-8"

    static func text(_ status: UInt32, _ body: String) -> EndpointResponse {
        EndpointResponse(status: status, contentType: textContentType, body: Array(body.utf8))
    }
}

/// Decides what each request gets; shared with the HTTP library's thread, so everything
/// in it is immutable or behind a lock.
final class EndpointRoutes: Sendable {
    let registry: MetricRegistry
    private let readiness = Lock(Readiness.starting)

    init(registry: MetricRegistry) {
        self.registry = registry
    }

    var currentReadiness: Readiness {
        get { readiness.withLock { $0 } }
        set { readiness.withLock { $0 = newValue } }
    }

    func respond(method: String, path: String) -> EndpointResponse {
        // Scrapers sometimes add a query string; it changes nothing here.
        let route = path.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false).first.map(String.init) ?? path
        let known = ["/metrics", "/healthz", "/readyz"]
        guard known.contains(route) else { return .text(404, "not found: \(route)\n") }
        guard method == "GET" || method == "HEAD" else { return .text(405, "method \(method) not allowed on \(route); use GET\n") }
        switch route {
        case "/metrics":
            return EndpointResponse(status: 200, contentType: EndpointResponse.metricsContentType, body: registry.exposition())
        case "/healthz":
            return .text(200, "ok\n")
        default:
            let current = currentReadiness
            return current.isReady ? .text(200, "ready: \(current.detail)\n") : .text(503, "not ready: \(current.detail)\n")
        }
    }
}
