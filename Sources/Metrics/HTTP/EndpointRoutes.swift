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
    /// How long a rendered `/metrics` body is served again. Rendering the whole exposition
    /// takes a few hundred microseconds of CPU (Benchmarks/MetricsBench), and anyone who
    /// reaches the port can ask for it a thousand times a second, which took that CPU from
    /// sending; with one render per 0.1 s at most, a flood costs only the HTTP handling.
    /// Prometheus scrapes every 15 s or so and does not notice a body 0.1 s old.
    let expositionReuse: Duration
    private let lastExposition = Lock<(body: [UInt8], renderedAt: ContinuousClock.Instant)?>(nil)

    init(registry: MetricRegistry, expositionReuse: Duration = .milliseconds(100)) {
        self.registry = registry
        self.expositionReuse = expositionReuse
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
            return EndpointResponse(status: 200, contentType: EndpointResponse.metricsContentType, body: exposition())
        case "/healthz":
            return .text(200, "ok\n")
        default:
            let current = currentReadiness
            return current.isReady ? .text(200, "ready: \(current.detail)\n") : .text(503, "not ready: \(current.detail)\n")
        }
    }

    /// The exposition rendered less than `expositionReuse` ago, or a new one. Two pool
    /// threads may render at the same moment; that costs one render more, not a wait.
    private func exposition() -> [UInt8] {
        let now = ContinuousClock.now
        if let last = lastExposition.withLock({ $0 }), now - last.renderedAt < expositionReuse { return last.body }
        let body = registry.exposition()
        lastExposition.withLock { $0 = (body, now) }
        return body
    }
}
