import APNs
import Posix
import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// Idle connections and how connections end, against apns-mock over real TLS: libcurl closes
/// a connection idle past `idleCloseSeconds` before reuse, TCP keep-alive probes idle ones.
@Suite struct KeepAliveTests {
    private func dispatcher(port: Int, material: MockMaterial) throws -> HTTP2Dispatcher {
        try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, threads: 1), onResult: { _ in })
    }

    /// Polls `condition` every 20 ms for up to `seconds`.
    private func eventually(_ seconds: Double, _ condition: () -> Bool) async throws -> Bool {
        let deadline = Timestamp().addingTimeInterval(seconds)
        while Timestamp() < deadline {
            if condition() { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    @Test func anIdleConnectionIsReusedWithinTheIdleCloseTime() async throws {
        try await withMock { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            configuration.idleCloseSeconds = 30
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: { _ in })
            defer { engine.shutdown() }
            #expect(try await engine.send(unauthenticatedRequest(1)).response?.status == 200)
            try await Task.sleep(for: .milliseconds(1200))
            #expect(try await engine.send(unauthenticatedRequest(2)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 1)
            #expect(engine.statistics.connectionsOpened == 1)
        }
    }

    @Test func anIdleCloseTimeOfZeroKeepsTheIdleConnectionForTheNextRequest() async throws {
        try await withMock { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            configuration.idleCloseSeconds = 0
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: { _ in })
            defer { engine.shutdown() }
            #expect(try await engine.send(unauthenticatedRequest(1)).response?.status == 200)
            // Idle past what a 1-second idle close ends (the test below).
            try await Task.sleep(for: .milliseconds(2300))
            #expect(try await engine.send(unauthenticatedRequest(2)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 1)
            #expect(server.stats.connectionsClosed == 0)
            #expect(engine.statistics.connectionsOpened == 1)
            #expect(engine.statistics.connectionsClosed == 0)
        }
    }

    @Test func aConnectionIdleLongerThanTheIdleCloseTimeIsClosedAndTheNextRequestOpensAnother() async throws {
        try await withMock { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            configuration.idleCloseSeconds = 1
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: { _ in })
            defer { engine.shutdown() }
            #expect(try await engine.send(unauthenticatedRequest(1)).response?.status == 200)
            // libcurl counts idle time in whole seconds and closes only above the limit.
            try await Task.sleep(for: .milliseconds(2300))
            #expect(try await engine.send(unauthenticatedRequest(2)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 2)
            #expect(server.stats.accepted == 2)
            #expect(try await eventually(5) { server.stats.connectionsClosed == 1 })
            let statistics = engine.statistics
            #expect(statistics.retried == 0)
            #expect(statistics.resentByTransport == 0)
            #expect(statistics.connectionsClosed == 1)
        }
    }

    /// A quiet lane with a short idle close: each request finds its connection idle past the
    /// limit, libcurl closes it, and the request opens another. Each of those connections
    /// answered once and was closed a couple of seconds later, which is how churn looks too; the
    /// loop judges a connection closed in order as churned only within `idleCloseSeconds` of its
    /// last answer, so these are healthy ends: no backoff, nothing announced.
    @Test func connectionsClosedForIdlingPastAShortIdleCloseAreNotChurn() async throws {
        try await withMock { server, port, material in
            let metrics = RecordingMetrics()
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            configuration.idleCloseSeconds = 1
            configuration.reconnectBackoff = ReconnectBackoff()
            let engine = try HTTP2Dispatcher(configuration: configuration, metrics: metrics)
            defer { engine.shutdown() }
            for id in 1...4 {
                #expect(try await engine.send(unauthenticatedRequest(id)).response?.status == 200)
                // Idle past the limit (libcurl counts whole seconds and closes above it), within 3 s.
                try await Task.sleep(for: .milliseconds(2300))
            }
            #expect(try await engine.send(unauthenticatedRequest(5)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 5)
            #expect(engine.statistics.reconnectBackoffs == 0, "\(engine.statistics.reconnectBackoffs) backoffs; causes \(metrics.backoffCauses)")
            #expect(metrics.backoffRunsStarted.load(ordering: .relaxed) == 0)
        }
    }

    @Test func aConnectionTheServerEndedWhileIdleIsNotReusedAndNothingIsResent() async throws {
        try await withMock { server, port, material in
            let engine = try dispatcher(port: port, material: material)
            defer { engine.shutdown() }
            #expect(try await engine.send(unauthenticatedRequest(1)).response?.status == 200)
            server.sendGoawayToAll()
            #expect(try await eventually(5) { !server.stats.goaways.isEmpty })
            #expect(try await engine.send(unauthenticatedRequest(2)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 2)
            #expect(server.stats.accepted == 2)
            #expect(engine.statistics.retried == 0)
        }
    }

    @Test func whenTheServerGoesAwayForGoodEverythingWaitingIsReportedPromptly() async throws {
        try await withMock { server, port, material in
            let collector = ResultCollector()
            var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 100)
            configuration.reconnectBackoff = ReconnectBackoff(initialMilliseconds: 10, maxMilliseconds: 20_000)
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: collector.handler)
            defer { engine.shutdown() }
            engine.submit(try unauthenticatedRequest(0), tag: 0)
            #expect(await collector.wait(for: 1) == 1)
            // The open connection dies with the server; the engine still believes in it, so
            // the next requests go into libcurl at once and wait there for a connection.
            server.stop()
            let started = Timestamp()
            for tag in 1...300 { engine.submit(try unauthenticatedRequest(tag), tag: UInt64(tag)) }
            #expect(await collector.wait(for: 301, seconds: 15) == 301)
            #expect(Timestamp().timeIntervalSince(started) < 8)
            let failed = collector.snapshot().results.filter { $0.key > 0 }.values
            // Failed on the dead connection, or handed back unsent once reconnecting kept failing.
            #expect(failed.allSatisfy { $0.transportError != nil || $0.notSent != nil })
            #expect(collector.snapshot().timesReported.values.allSatisfy { $0 == 1 })
            #expect(engine.outstanding == 0)
        }
    }

    @Test func goawaysUnderLoadAreCountedAndTheirRefusedStreamsResent() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(goawayAfterStreams: 500)
        }) { server, port, material in
            let collector = ResultCollector()
            let configuration = configurationForMock(port: port, material: material, threads: 1, streams: 200, maxAttempts: 5)
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: collector.handler)
            defer { engine.shutdown() }
            let total = 3000
            let requests = try (0..<total).map { try unauthenticatedRequest($0) }
            try await onOwnThread { for (tag, request) in requests.enumerated() { engine.submit(request, tag: UInt64(tag)) } }
            #expect(await collector.wait(for: total) == total)
            let summary = collector.snapshot()
            #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
            #expect(summary.results.values.allSatisfy { $0.response?.status == 200 })
            #expect(Set(server.acceptedLog.map(\.apnsID)).count == total)
            let goaways = server.stats.goaways.count
            #expect(goaways >= 5)
            // libcurl resends what the server refused. It reports no GOAWAY itself: one is seen
            // when libcurl moved a request off that connection (judged a quarter second later,
            // once no request failed there), so a GOAWAY that refused nothing in flight goes
            // uncounted, and none is counted that did not happen.
            #expect(try await eventually(5) { engine.statistics.connectionFailures[.goaway, default: 0] >= 1 })
            let statistics = engine.statistics
            #expect(statistics.connectionFailures[.goaway, default: 0] <= goaways)
            #expect(statistics.connectionFailures[.reset] == nil)
            #expect(statistics.resentByTransport + statistics.retried >= server.stats.streamsRefused)
        }
    }
}
