import APNsMock
@testable import Dispatcher
import Foundation
import Polling
import Testing

/// A stopped engine ends its connections at once. What it still held is reported
/// `.engineStopped` and sent again by its caller; a connection left open after that lets the
/// server go on answering those requests, accepted by APNs yet never read, so every answer
/// of that time is a notification delivered twice. Before, the connections stayed open until
/// the engine itself was released (for `pushd run`, until the process exited, after the
/// workers had recorded their batches).
@Suite struct EngineStopClosesConnectionsTests {
    @Test func aStoppedEngineClosesItsConnectionsAndNoHeldRequestIsAnsweredAfterwards() async throws {
        try await withMock({ configuration, _ in configuration.faults.delayMilliseconds = 5000 }) { server, port, material in
            var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 10, maxAttempts: 1)
            configuration.connectionsPerThread = 1
            let collector = ResultCollector()
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: collector.handler)
            // One answered request first: the connection is up and takes the next ones at once.
            // Each answer comes 5 s after its request: the engine is stopped well before.
            engine.submit(try unauthenticatedRequest(0), tag: 0)
            #expect(await collector.wait(for: 1, seconds: 20) == 1)
            let answeredBefore = server.stats.accepted + server.stats.rejected.values.reduce(0, +)
            for tag in 1...5 { engine.submit(try unauthenticatedRequest(tag), tag: UInt64(tag)) }
            let received = monotonicNanoseconds() + 10_000_000_000
            while server.stats.requestsReceived < 6, monotonicNanoseconds() < received { try await Task.sleep(nanoseconds: 10_000_000) }
            #expect(server.stats.requestsReceived == 6)
            let receivedAt = monotonicNanoseconds()
            engine.shutdown(drainTimeoutMilliseconds: 0)
            #expect(await collector.wait(for: 6, seconds: 4) == 6)
            let stopped = collector.snapshot().results.filter { $0.key != 0 }.values
            #expect(stopped.allSatisfy { $0.transportError?.code == TransportError.engineStopped.code },
                    "\(stopped.map { String(describing: $0.outcome) })")
            // The engine is still referenced here: only its stop may have closed the connection.
            let closed = monotonicNanoseconds() + 5_000_000_000
            while server.stats.connectionsClosedByClient < 1, monotonicNanoseconds() < closed { try await Task.sleep(nanoseconds: 10_000_000) }
            #expect(server.stats.connectionsClosedByClient == 1, "the stopped engine's connection is still open")
            // Past the mock's delay: none of the requests the engine gave up was answered.
            let pastDelay = receivedAt + 6_000_000_000
            while monotonicNanoseconds() < pastDelay { try await Task.sleep(nanoseconds: 100_000_000) }
            let stats = server.stats
            let answered = stats.accepted + stats.rejected.values.reduce(0, +) - answeredBefore
            #expect(answered == 0, "\(answered) requests the stopped engine had given up were answered by the server")
            withExtendedLifetime(engine) {}
        }
    }
}
