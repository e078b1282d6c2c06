import Foundation
import Synchronization
import Testing
@testable import Metrics

@Suite struct EndpointRoutesTests {
    @Test func routesAnswerByPathAndMethod() throws {
        let registry = MetricRegistry()
        try registry.counter("pushd_routed_total", help: "R.").labels().increment()
        let routes = EndpointRoutes(registry: registry)

        let metrics = routes.respond(method: "GET", path: "/metrics?name[]=pushd_routed_total")
        #expect(metrics.status == 200)
        #expect(metrics.contentType == "text/plain; version=0.0.4; charset=utf-8")
        #expect(metrics.body == registry.exposition())
        #expect(routes.respond(method: "HEAD", path: "/healthz") == .text(200, "ok\n"))
        #expect(routes.respond(method: "DELETE", path: "/readyz") == .text(405, "method DELETE not allowed on /readyz; use GET\n"))
        #expect(routes.respond(method: "GET", path: "/") == .text(404, "not found: /\n"))
        #expect(routes.respond(method: "GET", path: "/Metrics") == .text(404, "not found: /Metrics\n"))
    }

    @Test func readinessStartsAsStartingAndFollowsUpdates() {
        let routes = EndpointRoutes(registry: MetricRegistry())
        #expect(routes.respond(method: "GET", path: "/readyz") == .text(503, "not ready: starting\n"))
        routes.currentReadiness = Readiness(isReady: true, detail: "ok")
        #expect(routes.respond(method: "GET", path: "/readyz") == .text(200, "ready: ok\n"))
    }

    /// Anyone who reaches the port can ask for /metrics as fast as they like; each render
    /// of the whole exposition costs CPU that sending needs.
    @Test func aFloodOfScrapesRendersTheExpositionAtMostOncePerReuseInterval() throws {
        let registry = MetricRegistry()
        let renders = Atomic<Int>(0)
        try registry.callbackGauge("pushd_renders", help: "Renders so far.").setSource {
            [MetricSample(value: Double(renders.add(1, ordering: .relaxed).newValue))]
        }
        let routes = EndpointRoutes(registry: registry, expositionReuse: .milliseconds(100))
        let clock = ContinuousClock()
        let start = clock.now
        for _ in 0..<1_000 { #expect(routes.respond(method: "GET", path: "/metrics").status == 200) }
        let elapsed = clock.now - start
        // One render at the start and at most one per interval after it (one more for the
        // interval that was running when the loop ended).
        #expect(renders.load(ordering: .relaxed) <= Int(elapsed / .milliseconds(100)) + 2,
                "\(renders.load(ordering: .relaxed)) renders for 1,000 scrapes in \(elapsed)")
    }

    @Test func aScrapeAfterTheReuseIntervalSeesNewValues() throws {
        let registry = MetricRegistry()
        let counter = try registry.counter("pushd_fresh_total", help: "F.").labels()
        let routes = EndpointRoutes(registry: registry, expositionReuse: .milliseconds(50))
        counter.increment()
        let first = routes.respond(method: "GET", path: "/metrics")
        #expect(String(decoding: first.body, as: UTF8.self).contains("pushd_fresh_total 1\n"))
        counter.increment()
        Thread.sleep(forTimeInterval: 0.08)
        let later = routes.respond(method: "GET", path: "/metrics")
        #expect(String(decoding: later.body, as: UTF8.self).contains("pushd_fresh_total 2\n"))
    }
}
