import APNs
import APNsMock
@testable import Dispatcher
import Foundation
import Synchronization
import Testing

/// HTTP/2 PING keep-alive and how connections end, against apns-mock over real TLS.
@Suite struct KeepAliveTests {
    private func dispatcher(port: Int, material: MockMaterial, intervalMilliseconds: Int = 200,
                            timeoutMilliseconds: Int = 300) throws -> HTTP2Dispatcher {
        var configuration = configurationForMock(port: port, material: material, threads: 1)
        configuration.keepAliveIntervalMilliseconds = intervalMilliseconds
        configuration.keepAliveTimeoutMilliseconds = timeoutMilliseconds
        return try HTTP2Dispatcher(configuration: configuration, onResult: { _ in })
    }

    /// Polls `condition` every 20 ms for up to `seconds`.
    private func eventually(_ seconds: Double, _ condition: () -> Bool) async throws -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if condition() { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    @Test func anIdleConnectionIsPingedAnsweredAndReusedAfterwards() async throws {
        try await withMock { server, port, material in
            let engine = try dispatcher(port: port, material: material)
            defer { engine.shutdown() }
            #expect(try await engine.send(unauthenticatedRequest(1)).response?.status == 200)
            #expect(try await eventually(10) { server.stats.pingsReceived >= 3 && engine.statistics.pingsAcknowledged >= 3 })
            let statistics = engine.statistics
            #expect(statistics.pingsSent >= 3)
            #expect(statistics.pingTimeouts == 0)
            // Pinging left the connection usable for libcurl: the next request goes on it.
            #expect(try await engine.send(unauthenticatedRequest(2)).response?.status == 200)
            #expect(server.stats.accepted == 2)
            #expect(server.stats.connectionsAccepted == 1)
            #expect(engine.statistics.connectionsOpened == 1)
            #expect(engine.statistics.connectionFailures.isEmpty)
        }
    }

    @Test func pingsDoNotKeepAConnectionPastTheIdleCloseTime() async throws {
        try await withMock { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            configuration.keepAliveIntervalMilliseconds = 200
            configuration.keepAliveTimeoutMilliseconds = 100
            configuration.idleCloseSeconds = 1
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: { _ in })
            defer { engine.shutdown() }
            #expect(try await engine.send(unauthenticatedRequest(1)).response?.status == 200)
            #expect(try await eventually(10) { engine.statistics.idleClosed == 1 && server.stats.connectionsClosed == 1 })
            #expect(engine.statistics.pingsSent >= 2)
            #expect(engine.statistics.connectionFailures.isEmpty)
            #expect(try await engine.send(unauthenticatedRequest(2)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 2)
        }
    }

    @Test func aBusyConnectionIsNotPinged() async throws {
        try await withMock { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1)
            configuration.keepAliveIntervalMilliseconds = 200
            let statistics = Mutex<(() -> DispatcherStatistics)?>(nil)
            let atCompletion = Mutex<DispatcherStatistics?>(nil)
            let collector = ResultCollector()
            // Read on the loop's thread as the answer is delivered, before the loop could ping
            // the then idle connection.
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: { result in
                atCompletion.withLock { $0 = statistics.withLock { $0 }?() }
                collector.handler(result)
            })
            defer { engine.shutdown() }
            statistics.withLock { $0 = { engine.statistics } }
            // A quick answer first, so the connection is known to the keep-alive.
            engine.submit(try unauthenticatedRequest(1), tag: 1)
            #expect(await collector.wait(for: 1) == 1)
            // Then an answer that takes 1.5 s: seven PING intervals with a stream open.
            try server.setFaults(FaultConfiguration(delayMilliseconds: 1500))
            let before = engine.statistics.pingsSent
            engine.submit(try unauthenticatedRequest(2), tag: 2)
            #expect(await collector.wait(for: 2) == 2)
            #expect(collector.snapshot().results[2]?.response?.status == 200)
            let seen = try #require(atCompletion.withLock { $0 })
            #expect(seen.pingsSent == before)
            #expect(server.stats.accepted == 2)
            #expect(server.stats.connectionsAccepted == 1)
        }
    }

    @Test func anUnansweredPingEndsTheConnectionAndTheNextRequestOpensAnother() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(ignorePings: true)
        }) { server, port, material in
            let engine = try dispatcher(port: port, material: material)
            defer { engine.shutdown() }
            #expect(try await engine.send(unauthenticatedRequest(1)).response?.status == 200)
            #expect(try await eventually(10) { engine.statistics.pingTimeouts == 1 })
            #expect(server.stats.pingsReceived >= 1)
            #expect(engine.statistics.connectionFailures[.timeout] == 1)
            // The dead connection is not reused: the request goes on a new one and is answered.
            #expect(try await engine.send(unauthenticatedRequest(2)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 2)
            #expect(server.stats.accepted == 2)
            #expect(engine.statistics.retried == 0)
        }
    }

    @Test func aGoawayOnAnIdleConnectionIsCountedAndTheNextRequestUsesANewConnection() async throws {
        try await withMock { server, port, material in
            let engine = try dispatcher(port: port, material: material, intervalMilliseconds: 300, timeoutMilliseconds: 200)
            defer { engine.shutdown() }
            #expect(try await engine.send(unauthenticatedRequest(1)).response?.status == 200)
            server.sendGoawayToAll()
            #expect(try await eventually(10) { engine.statistics.connectionFailures[.goaway] == 1 })
            #expect(try await engine.send(unauthenticatedRequest(2)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 2)
            #expect(server.stats.accepted == 2)
            #expect(engine.statistics.connectionFailures[.goaway] == 1)
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
            let started = Date()
            for tag in 1...300 { engine.submit(try unauthenticatedRequest(tag), tag: UInt64(tag)) }
            #expect(await collector.wait(for: 301, seconds: 15) == 301)
            #expect(Date().timeIntervalSince(started) < 8)
            let failed = collector.snapshot().results.filter { $0.key > 0 }.values
            #expect(failed.allSatisfy { $0.transportError != nil })
            #expect(collector.snapshot().timesReported.values.allSatisfy { $0 == 1 })
            #expect(engine.outstanding == 0)
        }
    }

    @Test func goawaysUnderLoadAreCountedAndTheirRefusedStreamsResent() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(goawayAfterStreams: 500)
        }) { server, port, material in
            let collector = ResultCollector()
            var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 200, maxAttempts: 5)
            configuration.keepAliveIntervalMilliseconds = 60_000
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
            let statistics = engine.statistics
            let goaways = server.stats.goaways.count
            #expect(goaways >= 5)
            // Each GOAWAY ends its connection in order; libcurl resends what the server refused.
            #expect(statistics.connectionFailures[.goaway, default: 0] >= goaways - 1)
            #expect(statistics.connectionFailures[.goaway, default: 0] <= goaways)
            #expect(statistics.resentByTransport + statistics.retried >= server.stats.streamsRefused)
        }
    }
}
