import APNs
import Posix
import APNsMock
@testable import Dispatcher
import Foundation
import Locking
import Synchronization
import Testing

/// The engine and its APNs mapping against apns-mock: real TLS, real HTTP/2, real faults.
@Suite struct MockDispatchTests {
    private func tokenClient(port: Int, material: MockMaterial, collector: ResultCollector? = nil,
                             tune: (inout DispatcherConfiguration) -> Void) throws -> (APNsClient, ProviderTokenCache) {
        let cache = ProviderTokenCache(key: try material.signingKey())
        let client = try APNsClient(environment: .sandbox, authentication: .token(cache), port: port, hostOverride: "127.0.0.1",
                                    tune: tune, onResult: { collector?.handler($0.dispatch) })
        return (client, cache)
    }

    @Test func everyAnswerIsReportedAsTheMockSentIt() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
            configuration.faults = FaultConfiguration(unregisteredTokens: [deviceToken(2).hex: 1_700_000_000_123],
                                                      badDeviceTokens: [deviceToken(3).hex])
        }) { _, port, material in
            let (client, _) = try tokenClient(port: port, material: material, tune: mockTuning(material, threads: 1))
            defer { client.shutdown() }
            let id = APNsID()
            let delivered = try await client.send(notification(1, apnsID: id))
            #expect(delivered.response?.status == 200)
            #expect(delivered.response?.apnsID == id.lowercasedString)
            #expect(delivered.action == .delivered)

            let unregistered = try await client.send(notification(2))
            #expect(unregistered.response?.status == 410)
            #expect(unregistered.response?.reason == .unregistered)
            #expect(unregistered.response?.timestamp == 1_700_000_000_123)
            #expect(unregistered.action == .pruneToken(timestamp: 1_700_000_000_123))

            let bad = try await client.send(notification(3))
            #expect(bad.response?.status == 400)
            #expect(bad.response?.reason == .badDeviceToken)

            var wrongTopic = notification(4)
            wrongTopic.topic = "com.example.other"
            var configuration = client.dispatcher.configuration
            configuration.threads = 1
            let noAuthorization = try await client.dispatcher.send(
                DispatchRequest(path: wrongTopic.path, headerLines: wrongTopic.headerFields(authorization: nil).map(\.line), body: wrongTopic.payload))
            #expect(noAuthorization.response?.status == 403)
            #expect(noAuthorization.response?.reason == "MissingProviderToken")
        }
    }

    @Test func anEngineRecordingTransferTimingsSaysWhereEachAnswersTimeWentAndOthersSayNothing() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
        }) { _, port, material in
            let tuning = mockTuning(material, threads: 1)
            let (traced, _) = try tokenClient(port: port, material: material) { configuration in
                tuning(&configuration)
                configuration.recordsTransferTimings = true
            }
            defer { traced.shutdown() }
            let (plain, _) = try tokenClient(port: port, material: material, tune: tuning)
            defer { plain.shutdown() }
            for seed in 1...3 {
                let result = try await traced.send(notification(seed))
                #expect(result.response?.status == 200)
                let timings = try #require(result.dispatch.timings)
                // The first request also waited for the connection and its TLS handshake.
                if seed == 1 { #expect(timings.sentMicroseconds > 0) }
                #expect(timings.sentMicroseconds <= timings.firstByteMicroseconds)
                #expect(timings.firstByteMicroseconds <= timings.totalMicroseconds)
                // The stages fit inside the whole, to the microsecond rounding.
                #expect(timings.queuedNanoseconds / 1000 + UInt64(timings.totalMicroseconds) <= result.latencyNanoseconds / 1000 + 2)
            }
            let untraced = try await plain.send(notification(4))
            #expect(untraced.response?.status == 200)
            #expect(untraced.dispatch.timings == nil)
        }
    }

    @Test func streamLimitOfOneRaisedToAThousandIsFollowedWithoutLossOrDuplicates() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
            configuration.maxConcurrentStreams = 1000
        }) { server, port, material in
            let collector = ResultCollector()
            let (client, _) = try tokenClient(port: port, material: material, collector: collector, tune: mockTuning(material))
            defer { client.shutdown() }
            let total = 5000
            let items = (0..<total).map { notification($0) }
            let sentIDs = Set(items.map { $0.apnsIDString! })
            try await onOwnThread { for (tag, item) in items.enumerated() { try client.submit(item, tag: UInt64(tag)) } }
            #expect(await collector.wait(for: total) == total)
            let summary = collector.snapshot()
            #expect(summary.timesReported.count == total)
            #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
            #expect(summary.results.values.allSatisfy { $0.response?.status == 200 })
            // Every notification reached the server; see docs/dispatcher.md for why libcurl
            // 7.88 can make the server see a few twice when it ends a connection.
            #expect(Set(server.acceptedLog.map(\.apnsID)) == sentIDs)
            #expect(server.stats.accepted >= total)
        }
    }

    @Test func requestsQueuedBeforeTheFirstConnectionWaitForItsSettingsAndCostNoReconnect() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
            configuration.maxConcurrentStreams = 1000
        }) { server, port, material in
            let collector = ResultCollector()
            let (client, _) = try tokenClient(port: port, material: material, collector: collector, tune: mockTuning(material))
            defer { client.shutdown() }
            let total = 2000
            // All submitted at once, so each loop finds a full queue before it has any connection.
            try await onOwnThread { for tag in 0..<total { try client.submit(notification(tag), tag: UInt64(tag)) } }
            #expect(await collector.wait(for: total) == total)
            #expect(collector.snapshot().results.values.allSatisfy { $0.response?.status == 200 })
            #expect(client.dispatcher.statistics.retried == 0)
            #expect(server.stats.connectionsAccepted == client.dispatcher.configuration.threads)
            #expect(server.stats.accepted == total)
        }
    }

    @Test func goawayMidFlightLosesNothingAndDuplicatesNothing() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(goawayAfterStreams: 700)
        }) { server, port, material in
            let collector = ResultCollector()
            let dispatcher = try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, maxAttempts: 5),
                                                 onResult: collector.handler)
            defer { dispatcher.shutdown() }
            let total = 6000
            let items = (0..<total).map { notification($0) }
            let sentIDs = Set(items.map { $0.apnsIDString! })
            let requests = try items.map(unauthenticatedRequest)
            try await onOwnThread { for (tag, request) in requests.enumerated() { dispatcher.submit(request, tag: UInt64(tag)) } }
            #expect(await collector.wait(for: total) == total)
            let summary = collector.snapshot()
            #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
            #expect(summary.results.values.allSatisfy { $0.response?.status == 200 })
            let accepted = server.acceptedLog.map(\.apnsID)
            #expect(accepted.count == total)
            #expect(Set(accepted) == sentIDs)
            #expect(!server.stats.goaways.isEmpty)
            #expect(dispatcher.statistics.connectionsOpened > 2)
            // A server's GOAWAY after answers is reported as one, not as refused streams.
            #expect((dispatcher.statistics.connectionFailures[.goaway] ?? 0) >= 1)
            #expect((dispatcher.statistics.connectionFailures[.refusedStream] ?? 0) == 0)
        }
    }

    @Test func aResetConnectionIsReplacedAndItsRequestsRetried() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(resetAfterStreams: 400)
        }) { server, port, material in
            let collector = ResultCollector()
            let dispatcher = try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, threads: 1,
                                                                                     streams: 100, maxAttempts: 20),
                                                 onResult: collector.handler)
            defer { dispatcher.shutdown() }
            let total = 2000
            let requests = try (0..<total).map { try unauthenticatedRequest($0) }
            try await onOwnThread { for (tag, request) in requests.enumerated() { dispatcher.submit(request, tag: UInt64(tag)) } }
            #expect(await collector.wait(for: total) == total)
            let summary = collector.snapshot()
            #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
            #expect(summary.results.values.allSatisfy { $0.response?.status == 200 })
            // A TCP reset also destroys answers already on the wire, so the server may have
            // accepted a few of the resent requests twice; every request must have reached it.
            #expect(server.stats.accepted >= total)
            #expect(Set(server.acceptedLog.map(\.apnsID)).count == total)
            #expect(server.stats.connectionsReset > 0)
            #expect(dispatcher.statistics.connectionsOpened > 1)
            #expect(dispatcher.statistics.retried > 0)
            // A reset is not mistaken for the server ending the connection in order, even once
            // the moved requests are judged (a quarter second after the move).
            try await Task.sleep(nanoseconds: 400_000_000)
            #expect(dispatcher.statistics.connectionFailures[.reset, default: 0] > 0)
            #expect(dispatcher.statistics.connectionFailures[.goaway] == nil, "\(dispatcher.statistics.connectionFailures)")
        }
    }

    @Test func certificateAuthenticationIsAcceptedAndItsAbsenceRefused() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .certificate(clientCAFile: material.certificates.caCertificate)
        }) { server, port, material in
            let credential = try material.clientCredential()
            let client = try APNsClient(environment: .production, authentication: .certificate(credential), port: port,
                                        hostOverride: "127.0.0.1", tune: mockTuning(material, threads: 1))
            let accepted = try await client.send(notification(1))
            #expect(accepted.response?.status == 200)
            client.shutdown()

            let anonymous = try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, threads: 1, maxAttempts: 1))
            defer { anonymous.shutdown() }
            let refused = await anonymous.send(try unauthenticatedRequest(2))
            #expect(refused.response == nil)
            #expect(refused.transportError != nil)
            #expect(server.stats.accepted == 1)
        }
    }

    @Test func serviceUnavailableIsReportedAndKeepsTheConnection() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(serviceUnavailableRate: 1)
        }) { _, port, material in
            let dispatcher = try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, threads: 1))
            defer { dispatcher.shutdown() }
            let item = notification(1)
            let request = try unauthenticatedRequest(item)
            let first = await dispatcher.send(request)
            #expect(first.response?.status == 503)
            #expect(first.response?.reason == "ServiceUnavailable")
            let second = await dispatcher.send(request)
            #expect(second.response?.status == 503)
            #expect(dispatcher.statistics.connectionReplacements == 0)
            #expect(dispatcher.statistics.connectionsOpened == 1)
        }
    }

    @Test func scattered503sUnderLoadKeepTheConnectionAndStallNothing() async throws {
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(serviceUnavailableRate: 0.02)
        }) { server, port, material in
            let collector = ResultCollector()
            let dispatcher = try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, threads: 1, streams: 200),
                                                 onResult: collector.handler)
            defer { dispatcher.shutdown() }
            let total = 3000
            let requests = try (0..<total).map { try unauthenticatedRequest($0) }
            try await onOwnThread { for (tag, request) in requests.enumerated() { dispatcher.submit(request, tag: UInt64(tag)) } }
            #expect(await collector.wait(for: total, seconds: 30) == total)
            let summary = collector.snapshot()
            #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
            let unavailable = summary.results.values.filter { $0.response?.status == 503 }
            #expect(!unavailable.isEmpty)
            #expect(unavailable.allSatisfy { $0.response?.reason == "ServiceUnavailable" })
            #expect(summary.results.values.allSatisfy { [200, 503].contains($0.response?.status) })
            #expect(dispatcher.statistics.connectionReplacements == 0)
            #expect(server.stats.connectionsAccepted == 1)
            #expect(server.stats.accepted >= total - unavailable.count)
        }
    }

    @Test func aStreamLimitLoweredToOneAfterErrorsIsFollowedAndEveryAnswerStillArrivesOnce() async throws {
        let badTokens = Set((0..<2000).filter { $0 % 50 == 7 })
        try await withMock({ configuration, _ in
            configuration.faults = FaultConfiguration(badDeviceTokens: Set(badTokens.map { deviceToken($0).hex }), lowerConcurrencyAfterError: true)
        }) { _, port, material in
            let collector = ResultCollector()
            let dispatcher = try HTTP2Dispatcher(configuration: configurationForMock(port: port, material: material, threads: 1, streams: 200,
                                                                                     maxAttempts: 10),
                                                 onResult: collector.handler)
            defer { dispatcher.shutdown() }
            let total = 2000
            let requests = try (0..<total).map { try unauthenticatedRequest($0) }
            try await onOwnThread { for (tag, request) in requests.enumerated() { dispatcher.submit(request, tag: UInt64(tag)) } }
            #expect(await collector.wait(for: total, seconds: 60) == total)
            let summary = collector.snapshot()
            #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
            for (tag, result) in summary.results {
                let expected = badTokens.contains(Int(tag)) ? 400 : 200
                #expect(result.response?.status == expected, "request \(tag): \(result.outcome)")
            }
        }
    }

    @Test func expiredProviderTokenMintsANewTokenThatIsThenAccepted() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
            // A server whose tokens expire after 2 s, and a cache whose update window is 1 s:
            // the token the cache holds is stale to the server three seconds later.
            configuration.providerTokenMaximumAgeSeconds = 2
        }) { _, port, material in
            let cache = ProviderTokenCache(key: try material.signingKey(),
                                           policy: try ProviderTokenPolicy(refreshSeconds: 3300, updateWindowSeconds: 1))
            let client = try APNsClient(environment: .sandbox, authentication: .token(cache), port: port, hostOverride: "127.0.0.1",
                                        tune: mockTuning(material, threads: 1))
            defer { client.shutdown() }
            let stale = try cache.token()
            try await Task.sleep(for: .seconds(3))
            let rejected = try await client.send(notification(1))
            #expect(rejected.response?.reason == .expiredProviderToken)
            #expect(rejected.action == .refreshProviderTokenThenRetry)
            #expect(cache.current?.jwt != stale.jwt)
            let accepted = try await client.send(notification(1))
            #expect(accepted.response?.status == 200)
        }
    }

    @Test func theRegistryKeepsOnePoolPerCredentialAndEnvironment() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
        }) { server, port, material in
            struct PoolKey: Hashable, Sendable { var app: String; var environment: APNsEnvironment }
            let registry = APNsClientRegistry<PoolKey>()
            defer { registry.shutdownAll() }
            let cache = ProviderTokenCache(key: try material.signingKey())
            var made = 0
            func client(_ environment: APNsEnvironment) throws -> APNsClient {
                try registry.client(for: PoolKey(app: "example", environment: environment)) {
                    made += 1
                    return try APNsClient(environment: environment, authentication: .token(cache), port: port, hostOverride: "127.0.0.1",
                                          tune: mockTuning(material, threads: 1))
                }
            }
            let sandbox = try client(.sandbox)
            #expect(try client(.sandbox) === sandbox)
            #expect(try client(.production) !== sandbox)
            #expect(made == 2)
            #expect(try await client(.sandbox).send(notification(1)).response?.status == 200)
            #expect(try await client(.production).send(notification(2)).response?.status == 200)
            #expect(server.stats.connectionsAccepted == 2)
            registry.remove(PoolKey(app: "example", environment: .production))
            #expect(registry.keys == [PoolKey(app: "example", environment: .sandbox)])
        }
    }

    @Test func aHundredThousandNotificationsAreEachReportedExactlyOnce() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
            configuration.logsAccepted = false
            configuration.loopThreads = 1
        }) { server, port, material in
            let total = 100_000
            let seen = Lock([UInt8](repeating: 0, count: total))
            let okCount = Atomic<Int>(0)
            let failures = Lock<[String]>([])
            let cache = ProviderTokenCache(key: try material.signingKey())
            let client = try APNsClient(environment: .sandbox, authentication: .token(cache), port: port, hostOverride: "127.0.0.1",
                                        tune: mockTuning(material, streams: 500, maxAttempts: 10), onResult: { result in
                                            seen.withLock { $0[Int(result.tag)] &+= 1 }
                                            if result.dispatch.response?.status == 200 {
                                                okCount.add(1, ordering: .relaxed)
                                            } else {
                                                failures.withLock { $0.append("\(result.dispatch.outcome) after \(result.attempts) attempts") }
                                            }
                                        })
            defer { client.shutdown() }
            let items = (0..<1000).map { notification($0, apnsID: nil) }
            try await onOwnThread { for tag in 0..<total { try client.submit(items[tag % items.count], tag: UInt64(tag)) } }
            let deadline = Timestamp().addingTimeInterval(90)
            while client.dispatcher.statistics.completed < total, Timestamp() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            #expect(seen.withLock { $0.allSatisfy { $0 == 1 } })
            #expect(okCount.load(ordering: .relaxed) == total, "\(failures.withLock { $0.prefix(3) })")
            // The mock answers every stream once and no connection is dropped, so nothing is resent.
            #expect(server.stats.accepted == total)
            #expect(client.dispatcher.outstanding == 0)
        }
    }

    @Test func residentMemoryStaysFlatWhileSendingGoesOn() async throws {
        try await withMock({ configuration, material in
            configuration.authentication = .token(keys: [material.trustedKey], startAtOneStream: true)
            configuration.logsAccepted = false
        }) { server, port, material in
            let completed = Atomic<Int>(0)
            let cache = ProviderTokenCache(key: try material.signingKey())
            let client = try APNsClient(environment: .sandbox, authentication: .token(cache), port: port, hostOverride: "127.0.0.1",
                                        tune: mockTuning(material, streams: 500), onResult: { _ in
                                            completed.add(1, ordering: .relaxed)
                                        })
            defer { client.shutdown() }
            let items = (0..<1000).map { notification($0, apnsID: nil) }
            var submitted = 0
            func send(_ count: Int) async throws {
                let start = submitted
                try await onOwnThread { for tag in start..<(start + count) { try client.submit(items[tag % items.count], tag: UInt64(tag)) } }
                submitted += count
                let deadline = Timestamp().addingTimeInterval(90)
                while completed.load(ordering: .relaxed) < submitted, Timestamp() < deadline { try await Task.sleep(nanoseconds: 5_000_000) }
            }
            // Warm up: connections, pooled handles and caches reach their working size.
            try await send(20_000)
            let before = residentKilobytes()
            try await send(100_000)
            let after = residentKilobytes()
            #expect(completed.load(ordering: .relaxed) == 120_000)
            #expect(server.stats.accepted == 120_000)
            // Five times the traffic of the warm-up adds no more than a few megabytes.
            #expect(after - before < 8 * 1024, "resident memory grew from \(before) KiB to \(after) KiB")
        }
    }
}

/// This process's resident set size in KiB, from /proc/self/status.
func residentKilobytes() -> Int {
    guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
          let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }) else { return 0 }
    return Int(line.split(separator: " ").dropFirst().first ?? "0") ?? 0
}

func configurationForMock(port: Int, material: MockMaterial, threads: Int = 2, streams: Int = 1000, maxAttempts: Int = 3) -> DispatcherConfiguration {
    var configuration = DispatcherConfiguration(host: "127.0.0.1", port: port)
    mockTuning(material, threads: threads, streams: streams, maxAttempts: maxAttempts)(&configuration)
    return configuration
}
