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
}
