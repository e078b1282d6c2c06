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
    /// For a `/metrics` answer, which render of the exposition it is (a higher stamp is a
    /// newer render): answers with one stamp are one body, which the server sends from one
    /// shared buffer.
    var expositionStamp: UInt64? = nil

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
    ///
    /// A render that takes long (a large exposition on a busy host) makes the body reusable
    /// for ten times its duration (at most `longestReuse`), so rendering takes about a tenth
    /// of a thread under a flood, and only one render runs at a time: while it runs, other requests get the
    /// previous body at once instead of rendering too. Before, every request of a flood
    /// rendered anew once a render took longer than the reuse time, and both of the server's
    /// threads rendered while `/healthz` and `/readyz` waited behind them.
    let expositionReuse: Duration
    /// The longest a body is reused however long its render took (a scrape-time source
    /// waiting on a stalled database): shorter than any scrape interval.
    static let longestReuse = Duration.seconds(5)
    private let state = Lock(RenderState())

    private struct Exposition {
        var body: [UInt8]
        /// When the render ended: the body is reused from then on.
        var renderedAt: ContinuousClock.Instant
        var reuse: Duration
        var stamp: UInt64
    }

    private struct RenderState {
        var last: Exposition?
        var rendering = false
    }

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
            let rendered = exposition()
            return EndpointResponse(status: 200, contentType: EndpointResponse.metricsContentType, body: rendered.body,
                                    expositionStamp: rendered.stamp)
        case "/healthz":
            return .text(200, "ok\n")
        default:
            let current = currentReadiness
            return current.isReady ? .text(200, "ready: \(current.detail)\n") : .text(503, "not ready: \(current.detail)\n")
        }
    }

    /// The exposition rendered less than its reuse time ago, the previous one while another
    /// thread renders, or a new one. Only before the first render ends may two threads render.
    private func exposition() -> Exposition {
        let started = ContinuousClock.now
        let reused: Exposition? = state.withLock { state in
            if let last = state.last, started - last.renderedAt < last.reuse || state.rendering { return last }
            state.rendering = true
            return nil
        }
        if let reused { return reused }
        let body = registry.exposition()
        let ended = ContinuousClock.now
        return state.withLock { state in
            let rendered = Exposition(body: body, renderedAt: ended, reuse: min(max(expositionReuse, (ended - started) * 10), Self.longestReuse),
                                      stamp: (state.last?.stamp ?? 0) + 1)
            state.last = rendered
            state.rendering = false
            return rendered
        }
    }
}
