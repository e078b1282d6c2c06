import APNs
import Posix
import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// After an answer that ends a connection's usefulness, or a GOAWAY, the connection takes no
/// new stream: apns-mock answers nothing more on it, and the next requests go on a new one.
@Suite struct ConnectionRetirementTests {
    private func engine(port: Int, material: MockMaterial, collector: ResultCollector) throws -> HTTP2Dispatcher {
        var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 100)
        configuration.connectionsPerThread = 1
        return try HTTP2Dispatcher(configuration: configuration, onResult: collector.handler)
    }

    private func request(_ seed: Int, authorization: String?) throws -> (DispatchRequest, String) {
        let item = notification(seed)
        let request = try DispatchRequest(path: item.path, headerLines: item.headerFields(authorization: authorization).map(\.line),
                                          body: item.payload)
        return (request, item.apnsIDString!)
    }

    /// Submits requests `seeds` at once, waits for all and returns their apns-ids.
    private func sendTogether(_ seeds: Range<Int>, engine: HTTP2Dispatcher, collector: ResultCollector,
                              authorization: String? = nil) async throws -> Set<String> {
        let before = collector.count
        let items = try seeds.map { try request($0, authorization: authorization) }
        engine.submit(contentsOf: items.enumerated().map { (request: $0.element.0, tag: UInt64(seeds.lowerBound + $0.offset)) })
        #expect(await collector.wait(for: before + seeds.count) == before + seeds.count)
        return Set(items.map(\.1))
    }

    /// The mock connections that accepted the notifications with `ids`.
    private func connections(of ids: Set<String>, in server: APNsMockServer) -> Set<UInt64> {
        Set(server.acceptedLog.filter { ids.contains($0.apnsID) }.map(\.connectionID))
    }

    private func eventually(_ seconds: Double, _ condition: () -> Bool) async throws -> Bool {
        let deadline = Timestamp().addingTimeInterval(seconds)
        while Timestamp() < deadline {
            if condition() { return true }
            try await Task.sleep(for: .milliseconds(20))
        }
        return condition()
    }

    @Test func afterShutdownTheConnectionTakesNoNewStreamAndIsClosed() async throws {
        try await withMock { server, port, material in
            let collector = ResultCollector()
            let engine = try engine(port: port, material: material, collector: collector)
            defer { engine.shutdown() }
            let first = try await sendTogether(0..<20, engine: engine, collector: collector)
            let old = connections(of: first, in: server)
            #expect(old.count == 1)

            try server.setFaults(FaultConfiguration(shutdownRate: 1))
            #expect(try await engine.send(request(100, authorization: nil).0).response?.reason == "Shutdown")
            try server.setFaults(.none)

            let later = try await sendTogether(200..<400, engine: engine, collector: collector)
            #expect(collector.snapshot().results.filter { $0.key >= 200 }.values.allSatisfy { $0.response?.status == 200 })
            let used = connections(of: later, in: server)
            #expect(used.isDisjoint(with: old), "answered on the retired connection: \(used.intersection(old))")
            #expect(!used.isEmpty)
            #expect(try await eventually(5) { server.stats.connectionsClosed >= 1 })
            #expect(engine.statistics.connectionReplacements == 1)
            #expect(engine.statistics.reconnectBackoffs == 1)
        }
    }

    @Test func afterServiceUnavailableTheConnectionKeepsTakingStreams() async throws {
        try await withMock { server, port, material in
            let collector = ResultCollector()
            let engine = try engine(port: port, material: material, collector: collector)
            defer { engine.shutdown() }
            let first = try await sendTogether(0..<20, engine: engine, collector: collector)
            let old = connections(of: first, in: server)
            #expect(old.count == 1)

            try server.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            #expect(try await engine.send(request(100, authorization: nil).0).response?.reason == "ServiceUnavailable")
            try server.setFaults(.none)

            let later = try await sendTogether(200..<400, engine: engine, collector: collector)
            #expect(connections(of: later, in: server) == old)
            #expect(server.stats.connectionsAccepted == 1)
            #expect(engine.statistics.connectionReplacements == 0)
        }
    }

    @Test func streamsInFlightOnARetiredConnectionFinishThereBeforeItCloses() async throws {
        try await withMock { server, port, material in
            let collector = ResultCollector()
            let engine = try engine(port: port, material: material, collector: collector)
            defer { engine.shutdown() }
            let first = try await sendTogether(0..<5, engine: engine, collector: collector)
            let old = connections(of: first, in: server)
            #expect(old.count == 1)

            // Ten requests the mock accepts now and answers in 400 ms, then a 503 at once.
            try server.setFaults(FaultConfiguration(delayMilliseconds: 400))
            let slow = try (10..<20).map { try request($0, authorization: nil) }
            engine.submit(contentsOf: slow.enumerated().map { (request: $0.element.0, tag: UInt64(10 + $0.offset)) })
            #expect(try await eventually(5) { server.stats.accepted >= 15 })
            try server.setFaults(FaultConfiguration(shutdownRate: 1))
            #expect(try await engine.send(request(100, authorization: nil).0).response?.status == 503)
            try server.setFaults(.none)

            let later = try await sendTogether(200..<300, engine: engine, collector: collector)
            let results = collector.snapshot().results
            #expect((10..<20).allSatisfy { results[UInt64($0)]?.response?.status == 200 })
            #expect(connections(of: Set(slow.map(\.1)), in: server) == old)
            #expect(connections(of: later, in: server).isDisjoint(with: old))
            #expect(engine.statistics.retried == 0)
        }
    }

    @Test func afterExpiredProviderTokenTheConnectionTakesNoNewStream() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
        }) { server, port, material in
            let collector = ResultCollector()
            let engine = try engine(port: port, material: material, collector: collector)
            defer { engine.shutdown() }
            let signer = try ProviderTokenSigner(key: material.signingKey())
            let now = ProviderTokenCache.currentEpochSeconds()
            let fresh = try signer.makeToken(issuedAt: now).authorizationValue
            let stale = try signer.makeToken(issuedAt: now - 3700).authorizationValue
            let first = try await sendTogether(0..<20, engine: engine, collector: collector, authorization: fresh)
            let old = connections(of: first, in: server)
            #expect(old.count == 1)

            let rejected = try await engine.send(request(100, authorization: stale).0)
            #expect(rejected.response?.status == 403)
            #expect(rejected.response?.reason == "ExpiredProviderToken")

            let later = try await sendTogether(200..<400, engine: engine, collector: collector, authorization: fresh)
            #expect(collector.snapshot().results.filter { $0.key >= 200 }.values.allSatisfy { $0.response?.status == 200 })
            let used = connections(of: later, in: server)
            #expect(used.isDisjoint(with: old), "answered on the retired connection: \(used.intersection(old))")
            #expect(!used.isEmpty)
        }
    }

    @Test func afterAGoawayTheConnectionTakesNoNewStream() async throws {
        try await withMock { server, port, material in
            let collector = ResultCollector()
            let engine = try engine(port: port, material: material, collector: collector)
            defer { engine.shutdown() }
            let first = try await sendTogether(0..<20, engine: engine, collector: collector)
            let old = connections(of: first, in: server)
            server.sendGoawayToAll()
            #expect(try await eventually(5) { !server.stats.goaways.isEmpty })

            let later = try await sendTogether(200..<400, engine: engine, collector: collector)
            #expect(collector.snapshot().results.filter { $0.key >= 200 }.values.allSatisfy { $0.response?.status == 200 })
            let used = connections(of: later, in: server)
            #expect(used.isDisjoint(with: old))
            #expect(!used.isEmpty)
        }
    }
}
