import APNs
import Posix
import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// apns-mock answering 503 to everything for ~20 s while requests keep coming: a
/// ServiceUnavailable keeps its connection, and a Shutdown's replacement waits out a backoff,
/// so the mock accepts a handful of connections, not one per answer.
@Suite(.serialized) struct ReconnectStormTests {
    static let storm = 20.0

    /// The engine as pushd sets it up (the default reconnect backoff) on one event loop.
    private func engine(port: Int, material: MockMaterial) throws -> HTTP2Dispatcher {
        var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 100)
        configuration.reconnectBackoff = ReconnectBackoff()
        return try HTTP2Dispatcher(configuration: configuration)
    }

    /// `senders` requests in flight for `seconds`, each sent again as soon as its result is back;
    /// returns every result.
    private func drive(_ engine: HTTP2Dispatcher, seconds: Double, senders: Int = 20) async throws -> [DispatchResult] {
        let request = try unauthenticatedRequest(1)
        let deadline = Timestamp().addingTimeInterval(seconds)
        return await withTaskGroup(of: [DispatchResult].self) { group in
            for _ in 0..<senders {
                group.addTask {
                    var results = [DispatchResult]()
                    while Timestamp() < deadline { results.append(await engine.send(request)) }
                    return results
                }
            }
            var all = [DispatchResult]()
            for await results in group { all += results }
            return all
        }
    }

    @Test func aServiceUnavailableStormKeepsItsConnection() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(serviceUnavailableRate: 1)
        }) { server, port, material in
            let engine = try engine(port: port, material: material)
            defer { engine.shutdown() }
            let results = try await drive(engine, seconds: Self.storm)
            let stats = server.stats
            print("503 ServiceUnavailable for \(Int(Self.storm)) s: \(results.count) answers, \(stats.connectionsAccepted) connections accepted")
            #expect(results.count > 100)
            #expect(results.allSatisfy { $0.response?.status == 503 })
            #expect(stats.connectionsAccepted <= 2, "the mock accepted \(stats.connectionsAccepted) connections")
            #expect(engine.statistics.connectionReplacements == 0)
        }
    }

    @Test func aShutdownStormReconnectsAfterABackoffAndHandsWaitingRequestsBack() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(shutdownRate: 1)
        }) { server, port, material in
            let engine = try engine(port: port, material: material)
            defer { engine.shutdown() }
            let started = Timestamp()
            let results = try await drive(engine, seconds: Self.storm)
            let elapsed = Timestamp().timeIntervalSince(started)
            let stats = server.stats
            let shutdowns = results.filter { $0.response?.reason == "Shutdown" }.count
            let notSent = results.filter { $0.response == nil && $0.transportError == nil }.count
            print("503 Shutdown for \(Int(Self.storm)) s: \(shutdowns) Shutdown answers, \(notSent) handed back unsent, \(stats.connectionsAccepted) connections accepted")
            // 250 ms doubling to 4 s with jitter (each delay at least half its full value): at
            // most about 12 reconnects in 20 s.
            #expect(stats.connectionsAccepted <= 20, "the mock accepted \(stats.connectionsAccepted) connections")
            #expect(stats.connectionsAccepted >= 3)
            // Nothing is stuck in the engine: every sender got its results back throughout.
            #expect(elapsed < Self.storm + 10)
            #expect(notSent > 0)
        }
    }
}
