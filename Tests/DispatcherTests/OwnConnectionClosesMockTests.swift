import APNs
import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// The engine never ends one of its own connections while answers are outstanding on it, and
/// never reports a close it or libcurl made as the server's GOAWAY: against apns-mock answering
/// 150 ms late (a far APNs) with token authentication (each new connection starts at one stream,
/// as APNs's do), with connection growth, the adaptive window and answer coalescing of the
/// campaign lane, the mock sees no connection ended by the client and no request twice.
@Suite struct OwnConnectionClosesMockTests {
    private static let streams = 100
    private static let delayMilliseconds = 150

    @Test func aLongRoundTripWithGrowthEndsNoConnectionCarryingRequestsAndCountsNoGoaway() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
            configuration.maxConcurrentStreams = 1000
            configuration.faults.delayMilliseconds = Self.delayMilliseconds
            configuration.logsAccepted = false
        }) { server, port, material in
            let collector = ResultCollector()
            let client = try APNsClient(environment: .sandbox, authentication: .token(ProviderTokenCache(key: try material.signingKey())),
                                        port: port, hostOverride: "127.0.0.1", tune: { configuration in
                mockTuning(material, threads: 1, streams: Self.streams)(&configuration)
                configuration.connectionsPerThread = 1
                configuration.maxConnections = 4
                configuration.connectionGrowthDelayMilliseconds = 50
                configuration.maxOutstanding = 4 * Self.streams * 2
                configuration.adaptiveInFlight = true
                configuration.answerCoalescingMilliseconds = 25
            }, onResult: { collector.handler($0.dispatch) })
            defer { client.shutdown() }
            // Four connections of 100 streams answer about 2,600 a second at 150 ms.
            let total = 8_000
            try await onOwnThread { for tag in 0..<total { try client.submit(notification(tag), tag: UInt64(tag)) } }
            #expect(await collector.wait(for: total, seconds: 60) == total)
            #expect(collector.snapshot().results.values.allSatisfy { $0.response?.status == 200 })
            // Read before the client shuts down, which closes every connection itself.
            let mock = server.stats
            let statistics = client.dispatcher.statistics
            #expect(statistics.connectionsGrown >= 1)
            #expect(mock.goaways.isEmpty)
            #expect(mock.connectionsClosedByClient == 0,
                    "connections the engine ended mid-run: \(mock.connectionsClosedByClient) of \(mock.connectionsAccepted)")
            #expect(mock.streamsRefused == 0)
            #expect(mock.accepted == total)
            #expect(statistics.resentByTransport == 0)
            #expect(statistics.retried == 0)
            #expect((statistics.connectionFailures[.goaway] ?? 0) == 0)
            #expect((statistics.connectionFailures[.refusedStream] ?? 0) == 0)
            #expect(statistics.connectionsClosed == 0)
        }
    }
}
