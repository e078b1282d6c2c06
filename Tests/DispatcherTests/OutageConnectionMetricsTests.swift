import APNsMock
@testable import Dispatcher
import Posix
import Testing

/// While APNs refuses connections, every attempt opens a socket that never becomes a
/// connection: the metrics count those as connection failures (`connect`), and only an
/// established connection as opened, and as a reconnect when it replaces one.
@Suite(.serialized) struct OutageConnectionMetricsTests {
    @Test func refusedConnectsAreConnectionFailuresNotReconnects() async throws {
        let material = try MockMaterial.get()
        var mockConfiguration = MockConfiguration(certificateChainFile: material.certificates.serverCertificate,
                                                  privateKeyFile: material.certificates.serverKey)
        // A port nothing listens on: a mock's, once it stopped.
        let probe = try APNsMockServer(configuration: mockConfiguration)
        let port = try probe.start()
        probe.stop()

        let metrics = RecordingMetrics()
        let engine = try HTTP2Dispatcher(configuration: configurationForMock(port: Int(port), material: material, threads: 1, streams: 100),
                                         metrics: metrics)
        defer { engine.shutdown() }
        let request = try unauthenticatedRequest(1)

        // APNs down: sends fail until several connects were refused.
        let downUntil = Timestamp().addingTimeInterval(60)
        while metrics.connectFailures.load(ordering: .relaxed) < 8, Timestamp() < downUntil {
            let result = await engine.send(request)
            #expect(result.response == nil)
        }
        let refused = metrics.connectFailures.load(ordering: .relaxed)
        #expect(refused >= 8)
        #expect(engine.statistics.connectionsOpened >= refused, "every refused attempt opened a socket")
        #expect(metrics.opened.load(ordering: .relaxed) == 0, "no connection was established")
        #expect(metrics.reconnects.load(ordering: .relaxed) == 0)
        // Nothing went on a connection, so nothing was sent again (pushd_apns_requests_resent_total):
        // the engine's next attempt after a refused connect is the request's first send.
        #expect(metrics.retried.load(ordering: .relaxed) == 0, "requests counted as resent without a connection")

        // APNs up again on the same port: the first answer comes on one new connection.
        mockConfiguration.port = port
        let server = try APNsMockServer(configuration: mockConfiguration)
        try server.start()
        defer { server.stop() }
        let upUntil = Timestamp().addingTimeInterval(60)
        var answered = 0
        while answered < 20, Timestamp() < upUntil {
            if await engine.send(request).response?.status == 200 { answered += 1 }
        }
        #expect(answered == 20)
        let opened = metrics.opened.load(ordering: .relaxed)
        let reconnects = metrics.reconnects.load(ordering: .relaxed)
        print("\(refused) refused connects, then \(opened) connection(s) established, \(reconnects) reconnect(s), "
              + "\(engine.statistics.connectionsOpened) sockets opened")
        #expect(opened == 1, "connections established: \(opened)")
        // The first connection this loop ever established replaces none.
        #expect(reconnects == 0, "reconnects: \(reconnects) after \(refused) refused connects")
        #expect(metrics.closed.load(ordering: .relaxed) == 0)
    }
}
