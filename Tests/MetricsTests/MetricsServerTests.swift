import Foundation
import PushdTestSupport
import Posix
import Testing
@testable import Metrics

@Suite struct MetricsServerTests {
    private func startServer(_ registry: MetricRegistry = MetricRegistry()) throws -> MetricsServer {
        try MetricsServer(registry: registry, configuration: MetricsServerConfiguration(host: "127.0.0.1", port: 0))
    }

    @Test func metricsAreServedOverHTTPWithTheTextFormatContentType() throws {
        let registry = MetricRegistry()
        try registry.counter("pushd_served_total", help: "S.", labels: ["app"]).labels("shop").increment(by: 7)
        let server = try startServer(registry)
        defer { server.stop() }
        #expect(server.port != 0)
        #expect(server.host == "127.0.0.1")

        let response = try RawHTTP.request(port: server.port, path: "/metrics")
        #expect(response.status == 200)
        #expect(response.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8")
        #expect(response.body == registry.expositionText())
        #expect(response.body.contains("pushd_served_total{app=\"shop\"} 7\n"))
    }

    @Test func healthzAnswersOkUnknownPathsAnswer404AndOtherMethods405() throws {
        let server = try startServer()
        defer { server.stop() }
        let health = try RawHTTP.request(port: server.port, path: "/healthz")
        #expect(health.status == 200)
        #expect(health.body == "ok\n")
        let missing = try RawHTTP.request(port: server.port, path: "/metrics/extra")
        #expect(missing.status == 404)
        #expect(missing.body == "not found: /metrics/extra\n")
        let posted = try RawHTTP.request(port: server.port, method: "POST", path: "/metrics")
        #expect(posted.status == 405)
        let head = try RawHTTP.request(port: server.port, method: "HEAD", path: "/healthz")
        #expect(head.status == 200)
        #expect(head.body.isEmpty)
    }

    @Test func readyzFollowsWhatTheDaemonSets() throws {
        let server = try startServer()
        defer { server.stop() }
        let starting = try RawHTTP.request(port: server.port, path: "/readyz")
        #expect(starting.status == 503)
        #expect(starting.body == "not ready: starting\n")

        server.setReady(true, detail: "database reachable, 2 apps loaded")
        let ready = try RawHTTP.request(port: server.port, path: "/readyz")
        #expect(ready.status == 200)
        #expect(ready.body == "ready: database reachable, 2 apps loaded\n")

        server.readiness = Readiness(isReady: false, detail: "database unreachable: connection refused")
        let lost = try RawHTTP.request(port: server.port, path: "/readyz?verbose=1")
        #expect(lost.status == 503)
        #expect(lost.body == "not ready: database unreachable: connection refused\n")
    }

    @Test func slowScrapeDoesNotHoldUpHealthz() throws {
        let registry = MetricRegistry()
        let released = DispatchSemaphore(value: 0)
        let entered = DispatchSemaphore(value: 0)
        let finished = Tally()
        try registry.callbackGauge("pushd_slow_depth", help: "S.").setValueSource {
            entered.signal()
            _ = released.wait(timeout: .now() + 5)
            _ = finished.next()
            return 1
        }
        let server = try startServer(registry)
        defer { server.stop() }
        let port = server.port
        let scrapeDone = DispatchSemaphore(value: 0)
        Thread {
            _ = try? RawHTTP.request(port: port, path: "/metrics")
            scrapeDone.signal()
        }.start()
        #expect(entered.wait(timeout: .now() + 10) == .success)

        let health = try RawHTTP.request(port: port, path: "/healthz")
        #expect(finished.value == 0, "/healthz was answered only after the slow scrape finished")
        released.signal()
        #expect(health.status == 200)
        #expect(scrapeDone.wait(timeout: .now() + 10) == .success)
    }

    @Test func aConnectionBeyondTheLimitWaitsUntilTheIdleOneIsClosed() throws {
        let server = try MetricsServer(registry: MetricRegistry(), configuration: MetricsServerConfiguration(
            port: 0, connectionLimit: 1, connectionTimeoutSeconds: 1))
        defer { server.stop() }
        let idle = try RawHTTP.connectIdle(port: server.port)
        defer { close(idle) }
        let started = Timestamp()
        // Not accepted while the idle connection holds the only slot; served once the
        // server has closed that connection after its 1 s timeout.
        let answer = try RawHTTP.request(port: server.port, path: "/healthz")
        #expect(answer.status == 200)
        #expect(Timestamp().timeIntervalSince(started) >= 0.5, "the connection beyond the limit was served at once")
        #expect(RawHTTP.waitForServerClose(idle, seconds: 10), "the idle connection was not closed after its 1 s timeout")
    }

    @Test func stoppedServerRefusesConnectionsAndStopIsIdempotent() throws {
        let server = try startServer()
        let port = server.port
        server.stop()
        server.stop()
        #expect(throws: RawHTTP.Failure.self) { _ = try RawHTTP.request(port: port, path: "/healthz") }
    }

    @Test func badListenSettingsAreClearErrors() throws {
        #expect(throws: MetricsServerError.invalidHost("metrics.internal")) {
            _ = try MetricsServer(registry: MetricRegistry(), configuration: MetricsServerConfiguration(host: "metrics.internal", port: 0))
        }
        #expect(throws: MetricsServerError.invalidLimit(setting: "connectionLimit", value: 0)) {
            _ = try MetricsServer(registry: MetricRegistry(), configuration: MetricsServerConfiguration(port: 0, connectionLimit: 0))
        }
        let first = try startServer()
        defer { first.stop() }
        let error = #expect(throws: MetricsServerError.self) {
            _ = try MetricsServer(registry: MetricRegistry(), configuration: MetricsServerConfiguration(port: first.port))
        }
        #expect(error?.description == "metrics server cannot listen on 127.0.0.1 port \(first.port): Address already in use")
    }

    @Test func ipv6LoopbackIsAccepted() throws {
        let server = try MetricsServer(registry: MetricRegistry(), configuration: MetricsServerConfiguration(host: "::1", port: 0))
        defer { server.stop() }
        #expect(server.port != 0)
    }

    @Test func promtoolAcceptsAFullScrapeOfTheCatalog() throws {
        let metrics = try PushdMetrics(version: "0.1.0-test")
        metrics.sent(app: "shop", environment: "production", pushType: "alert", lane: "transactional").increment()
        metrics.apnsResponse(app: "shop", environment: "production", status: "410", reason: "Unregistered").increment()
        metrics.apnsResponse(app: "shop", environment: "production", status: "none", reason: "timeout").increment()
        metrics.requestDuration(app: "shop", environment: "production").observe(0.012)
        metrics.streamsInFlight(app: "shop", environment: "production").set(17)
        metrics.connections(app: "shop", environment: "production").set(2)
        metrics.tokenPruned(app: "shop", environment: "production", reason: "Unregistered").increment()
        metrics.deadLetter(app: "shop", lane: "campaign", reason: "Payload \"too\" large\nreally").increment()
        metrics.queueDepth.setSource(cacheFor: .seconds(2)) {
            [MetricSample(labelValues: ["transactional"], value: 3), MetricSample(labelValues: ["campaign"], value: 120_000)]
        }
        metrics.jwtAge.setSource { [MetricSample(labelValues: ["shop"], value: 1234.5)] }
        let server = try startServer(metrics.registry)
        defer { server.stop() }

        let scrape = try RawHTTP.request(port: server.port, path: "/metrics")
        #expect(scrape.status == 200)
        #expect(scrape.body.contains("process_resident_memory_bytes "))
        #expect(scrape.body.contains("pushd_build_info{version=\"0.1.0-test\"} 1\n"))

        let promtool = try Promtool.checkMetrics(scrape.body)
        #expect(promtool.status == 0, "promtool check metrics rejected the scrape:\n\(promtool.output)\n--- scrape ---\n\(scrape.body)")
    }
}

enum Promtool {
    struct Missing: Error, CustomStringConvertible {
        var description: String {
            "promtool not found on PATH or in /usr/bin: install the Debian package prometheus (scripts/install-deps.sh does)"
        }
    }

    static func checkMetrics(_ text: String) throws -> (status: Int32, output: String) {
        let candidates = (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":").map { "\($0)/promtool" } + ["/usr/bin/promtool"]
        guard let path = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else { throw Missing() }
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["check", "metrics"]
        let input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = output
        try process.run()
        input.fileHandleForWriting.write(Data(text.utf8))
        try input.fileHandleForWriting.close()
        let printed = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: printed, as: UTF8.self))
    }
}
