import APNs
@testable import Dispatcher
import Posix
import Glibc
import Synchronization
import Locking
import Foundation
import Testing

/// The engine against nghttpd: real TLS, real HTTP/2, on 127.0.0.1.
@Suite struct NghttpdDispatchTests {
    private func configuration(_ server: NghttpdServer, threads: Int = 2, connections: Int = 1, streams: Int = 100,
                               maxOutstanding: Int? = nil, credential: ClientCredential = .token) -> DispatcherConfiguration {
        DispatcherConfiguration(host: "127.0.0.1", port: server.port, credential: credential,
                                trustedCAFile: server.certificates.serverCertificate, threads: threads,
                                connectionsPerThread: connections, streamsPerConnection: streams, maxOutstanding: maxOutstanding,
                                connectTimeoutMilliseconds: 5000, requestTimeoutMilliseconds: 20_000)
    }

    private static let okRequest = try! DispatchRequest(path: "/ok", headerLines: ["apns-topic: com.example.app", "apns-push-type: alert"],
                                                        body: Array(#"{"aps":{"alert":"hi"}}"#.utf8))

    @Test func manyRequestsEachReportedExactlyOnceWithinTheWindow() async throws {
        let server = try NghttpdServer(maxConcurrentStreams: 100)
        let collector = ResultCollector()
        let maxOutstanding = 300
        let dispatcher = try HTTP2Dispatcher(configuration: configuration(server, maxOutstanding: maxOutstanding), onResult: collector.handler)
        defer { dispatcher.shutdown() }
        let total = 20_000
        let peakOutstanding = try await onOwnThread {
            var peak = 0
            for tag in 0..<total {
                dispatcher.submit(Self.okRequest, tag: UInt64(tag))
                peak = max(peak, dispatcher.outstanding)
            }
            return peak
        }
        #expect(await collector.wait(for: total) == total)
        let summary = collector.snapshot()
        #expect(summary.timesReported.count == total)
        #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
        #expect(summary.results.values.allSatisfy { $0.response?.status == 200 })
        #expect(peakOutstanding <= maxOutstanding)
        #expect(dispatcher.statistics.completed == total)
        #expect(dispatcher.statistics.connectionsOpened == 2)
    }

    @Test func batchesAreSentWholeAndAfterShutdownReportedStopped() async throws {
        let server = try NghttpdServer(maxConcurrentStreams: 100)
        let collector = ResultCollector()
        let dispatcher = try HTTP2Dispatcher(configuration: configuration(server, maxOutstanding: 200), onResult: collector.handler)
        let batch = (0..<3000).map { (request: Self.okRequest, tag: UInt64($0)) }
        try await onOwnThread { dispatcher.submit(contentsOf: batch) }
        #expect(await collector.wait(for: 3000) == 3000)
        dispatcher.shutdown()
        dispatcher.submit(contentsOf: (3000..<3010).map { (request: Self.okRequest, tag: UInt64($0)) })
        let summary = collector.snapshot()
        #expect(summary.count == 3010)
        #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
        #expect((0..<3000).allSatisfy { summary.results[UInt64($0)]?.response?.status == 200 })
        #expect((3000..<3010).allSatisfy { summary.results[UInt64($0)]?.transportError == .engineStopped })
    }

    @Test func errorStatusesAndBodiesAreReportedAsTheServerSentThem() async throws {
        let server = try NghttpdServer()
        let dispatcher = try HTTP2Dispatcher(configuration: configuration(server, threads: 1))
        defer { dispatcher.shutdown() }
        let missing = try DispatchRequest(method: .get, path: "/3/device/0123abcd", headerLines: [], body: [])
        let result = await dispatcher.send(missing, tag: 7)
        #expect(result.tag == 7)
        #expect(result.attempts == 1)
        #expect(result.response?.status == 404)
        #expect(result.response.map { String(decoding: $0.body, as: UTF8.self).contains("404") } == true)
        let found = await dispatcher.send(Self.okRequest, tag: 8)
        #expect(found.response?.status == 200)
        #expect(found.response?.body.isEmpty == true)
        #expect(found.latencyNanoseconds > 0)
    }

    @Test func fullWindowRefusesTrySubmitAndShutdownReportsWhatNeverFinished() throws {
        // A listener that accepts and never speaks: every request hangs in the TLS handshake.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } }
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        listen(listener, 16)
        let certificates = try TestCertificates.get()
        let collector = ResultCollector()
        let dispatcher = try HTTP2Dispatcher(
            configuration: DispatcherConfiguration(host: "127.0.0.1", port: Int(UInt16(bigEndian: address.sin_port)),
                                                   trustedCAFile: certificates.serverCertificate, threads: 1, streamsPerConnection: 2,
                                                   maxOutstanding: 5),
            onResult: collector.handler)
        for tag in 0..<5 { #expect(dispatcher.trySubmit(Self.okRequest, tag: UInt64(tag))) }
        #expect(!dispatcher.trySubmit(Self.okRequest, tag: 99))
        #expect(dispatcher.outstanding == 5)
        dispatcher.shutdown(drainTimeoutMilliseconds: 100)
        let summary = collector.snapshot()
        #expect(summary.count == 5)
        #expect(summary.results.values.allSatisfy { $0.transportError == .engineStopped })
        #expect(summary.timesReported[99] == nil)
        dispatcher.submit(Self.okRequest, tag: 100)
        #expect(collector.snapshot().results[100]?.transportError == .engineStopped)
    }

    @Test func refusedConnectionsAreRetriedWithBackoffThenReportedAsTransportErrors() async throws {
        let certificates = try TestCertificates.get()
        let dispatcher = try HTTP2Dispatcher(configuration: DispatcherConfiguration(
            host: "127.0.0.1", port: freeLoopbackPort(), trustedCAFile: certificates.serverCertificate, threads: 1,
            maxAttempts: 3, reconnectBackoff: ReconnectBackoff(initialMilliseconds: 10, maxMilliseconds: 50)))
        defer { dispatcher.shutdown() }
        let result = await dispatcher.send(Self.okRequest)
        #expect(result.transportError?.code == 7)
        #expect(result.attempts == 3)
        #expect(dispatcher.statistics.connectFailures == 3)
        #expect(dispatcher.statistics.retried == 2)
    }

    @Test func anUnreachableServerHandsEverythingWaitingBackUnsentFromTheThirdFailedConnection() async throws {
        let certificates = try TestCertificates.get()
        let collector = ResultCollector()
        let dispatcher = try HTTP2Dispatcher(configuration: DispatcherConfiguration(
            host: "127.0.0.1", port: freeLoopbackPort(), trustedCAFile: certificates.serverCertificate, threads: 1,
            maxAttempts: 3, reconnectBackoff: ReconnectBackoff(initialMilliseconds: 10, maxMilliseconds: 20_000)),
            onResult: collector.handler)
        defer { dispatcher.shutdown() }
        let started = Timestamp()
        for tag in 0..<200 { dispatcher.submit(Self.okRequest, tag: UInt64(tag)) }
        // Three connection attempts (10 + 20 ms of backoff), not 200 × 3 behind a backoff
        // growing to 20 s.
        #expect(await collector.wait(for: 200, seconds: 10) == 200)
        #expect(Timestamp().timeIntervalSince(started) < 5)
        let summary = collector.snapshot()
        #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
        // The request that tried the three connections reports their error; the rest were never
        // on the wire and come back as such.
        let failed = summary.results.values.filter { $0.transportError != nil }
        #expect(failed.count == 1)
        #expect(failed.allSatisfy { $0.transportError?.code == 7 && $0.attempts == 3 })
        let notSent = summary.results.values.compactMap(\.notSent)
        #expect(notSent.count == 199)
        #expect(notSent.allSatisfy { $0.consecutiveFailures == 3 && $0.lastFailure.contains("libcurl error 7") })
        #expect(dispatcher.statistics.connectFailures == 3)
        #expect(dispatcher.outstanding == 0)
    }

    @Test func anUntrustedServerCertificateFailsWithoutRetry() async throws {
        let server = try NghttpdServer()
        let untrusted = TestCertificates.shared.map { $0.clientCertificate }
        var settings = configuration(server, threads: 1)
        settings.trustedCAFile = try untrusted.get()
        let dispatcher = try HTTP2Dispatcher(configuration: settings)
        defer { dispatcher.shutdown() }
        let result = await dispatcher.send(Self.okRequest)
        #expect(result.transportError?.code == 60)
        #expect(result.transportError?.message.isEmpty == false)
        #expect(result.attempts == 1)
    }

    @Test func requestsGoThroughAnHTTPProxyTunnelWhenOneIsConfigured() async throws {
        let server = try NghttpdServer()
        let proxy = try ConnectProxy()
        defer { proxy.stop() }
        var settings = configuration(server, threads: 1)
        settings.proxy = "http://127.0.0.1:\(proxy.port)"
        let dispatcher = try HTTP2Dispatcher(configuration: settings)
        defer { dispatcher.shutdown() }
        for _ in 0..<3 { #expect(await dispatcher.send(Self.okRequest).response?.status == 200) }
        #expect(proxy.tunnels.load(ordering: .relaxed) == 1)
        #expect(proxy.targets.withLock { $0 } == ["127.0.0.1:\(server.port)"])
    }

    /// The proxy variables are read once when the transfers are made, no longer by libcurl
    /// per transfer: https_proxy still sends the requests through the proxy, and no_proxy
    /// naming the host still bypasses it.
    @Test func theProxyVariablesOfTheEnvironmentStillApply() async throws {
        let server = try NghttpdServer()
        let proxy = try ConnectProxy()
        defer { proxy.stop() }
        setenv("https_proxy", "http://127.0.0.1:\(proxy.port)", 1)
        defer { unsetenv("https_proxy") }
        do {
            let dispatcher = try HTTP2Dispatcher(configuration: configuration(server, threads: 1))
            defer { dispatcher.shutdown() }
            for _ in 0..<3 { #expect(await dispatcher.send(Self.okRequest).response?.status == 200) }
            #expect(proxy.tunnels.load(ordering: .relaxed) == 1)
        }
        setenv("no_proxy", "127.0.0.1", 1)
        defer { unsetenv("no_proxy") }
        let direct = try HTTP2Dispatcher(configuration: configuration(server, threads: 1))
        defer { direct.shutdown() }
        #expect(await direct.send(Self.okRequest).response?.status == 200)
        #expect(proxy.tunnels.load(ordering: .relaxed) == 1)
    }

    @Test func proxyVariablesAreTakenInLibcurlsOrderAndEmptyOnesAreUnset() {
        func read(_ variables: [String: String]) -> CurlTransfer.EnvironmentProxy {
            CurlTransfer.EnvironmentProxy.read { variables[$0] }
        }
        #expect(read([:]) == .init(proxy: nil, noProxy: nil))
        #expect(read(["https_proxy": "http://a:1", "HTTPS_PROXY": "http://b:1", "all_proxy": "http://c:1"]).proxy == "http://a:1")
        #expect(read(["https_proxy": "", "HTTPS_PROXY": "http://b:1", "all_proxy": "http://c:1"]).proxy == "http://b:1")
        #expect(read(["all_proxy": "", "ALL_PROXY": "socks5://d:1", "http_proxy": "http://e:1"]).proxy == "socks5://d:1")
        #expect(read(["no_proxy": "", "NO_PROXY": "example.com"]).noProxy == "example.com")
    }

    /// libcurl adds `accept: */*` and `content-type: application/x-www-form-urlencoded` to a
    /// POST unless told not to; APNs reads neither and each costs instructions per request.
    @Test func theServerReceivesTheRequestsHeaderLinesWithoutLibcurlsAcceptAndContentType() async throws {
        let server = try NghttpdServer(verbose: true)
        let dispatcher = try HTTP2Dispatcher(configuration: configuration(server, threads: 1))
        defer { dispatcher.shutdown() }
        #expect(await dispatcher.send(Self.okRequest).response?.status == 200)
        // nghttpd -v prints each received field as "recv (stream_id=1) name: value".
        let names = server.log.split(separator: "\n").compactMap { line -> String? in
            guard let start = line.range(of: "recv (stream_id=") else { return nil }
            let field = line[start.upperBound...].drop { $0 != ")" }.dropFirst(2)
            guard !field.hasPrefix(":"), let colon = field.firstIndex(of: ":") else { return nil }
            return String(field[..<colon])
        }
        #expect(names.sorted() == ["apns-push-type", "apns-topic", "content-length"])
    }

    @Test func theSharedBlockListsTheLinesThatDropLibcurlsDefaultsAndAPathBlockListsNothing() throws {
        let shared = DispatchRequest.sharedPart(headers: try .init(lines: ["apns-topic: com.example.app"]), body: [1, 2])
        let request = try DispatchRequest(path: "/3/device/ab", shared: shared)
        #expect(request.bytes.headerList == nil)
        #expect(request.headersAndBody.listedLines == ["apns-topic: com.example.app", "Accept:", "Content-Type:"])
        #expect(request.headerLines == ["apns-topic: com.example.app"])
        #expect(request.body == [1, 2])
        #expect(request.path == "/3/device/ab")
        let own = try DispatchRequest(path: "/ok", headerLines: [], body: [])
        #expect(own.headersAndBody.listedLines == ["Accept:", "Content-Type:"])
        #expect(own.headerLines == [])
    }

    @Test func certificateAuthenticationWorksWithPEMAndPKCS12() async throws {
        let server = try NghttpdServer(requireClientCertificate: true)
        let certificates = server.certificates
        for credential in [ClientCredential.certificate(try ClientCertificate.load(certificateFile: certificates.clientCertificate,
                                                                                   keyFile: certificates.clientKey)),
                           .certificate(try ClientCertificate.load(pkcs12File: certificates.clientPKCS12,
                                                                   password: TestCertificates.pkcs12Password))] {
            let dispatcher = try HTTP2Dispatcher(configuration: configuration(server, threads: 1, credential: credential))
            let result = await dispatcher.send(Self.okRequest)
            #expect(result.response?.status == 200, "\(credential)")
            dispatcher.shutdown()
        }
        let withoutCertificate = try HTTP2Dispatcher(configuration: configuration(server, threads: 1))
        defer { withoutCertificate.shutdown() }
        let refused = await withoutCertificate.send(Self.okRequest)
        #expect(refused.response == nil)
        #expect(refused.transportError != nil)
    }
}

/// Counts what the engine reports through its metrics hook.
final class RecordingMetrics: DispatcherMetricsHook {
    let completed = Atomic<Int>(0)
    let succeeded = Atomic<Int>(0)
    let inFlight = Atomic<Int>(0)
    let peakInFlight = Atomic<Int>(0)
    let opened = Atomic<Int>(0)
    let closed = Atomic<Int>(0)
    let reconnects = Atomic<Int>(0)
    let connectFailures = Atomic<Int>(0)
    let latencyTotal = Atomic<Int>(0)
    let backoffRunsStarted = Atomic<Int>(0)
    let backoffRunsEnded = Atomic<Int>(0)
    private let causes = Lock<[String]>([])
    private let verdicts = Lock<[ConnectionGrowthVerdict]>([])

    /// The growth verdicts reported, in order.
    var growthVerdicts: [ConnectionGrowthVerdict] { verdicts.withLock { $0 } }

    func connectionGrowthJudged(_ verdict: ConnectionGrowthVerdict) { verdicts.withLock { $0.append(verdict) } }

    /// The causes `reconnectBackoffStarted` was called with, in order.
    var backoffCauses: [String] { causes.withLock { $0 } }

    func reconnectBackoffStarted(cause: String, delayMilliseconds: Int) {
        backoffRunsStarted.add(1, ordering: .relaxed)
        causes.withLock { $0.append(cause) }
    }

    func reconnectBackoffEnded(failures: Int) { backoffRunsEnded.add(1, ordering: .relaxed) }

    func requestCompleted(status: Int, latencyNanoseconds: UInt64) {
        completed.add(1, ordering: .relaxed)
        if status == 200 { succeeded.add(1, ordering: .relaxed) }
        latencyTotal.add(Int(latencyNanoseconds), ordering: .relaxed)
    }

    func inFlightChanged(by delta: Int) {
        let now = inFlight.add(delta, ordering: .relaxed).newValue
        peakInFlight.max(now, ordering: .relaxed)
    }

    func connectionOpened(reconnect: Bool) {
        opened.add(1, ordering: .relaxed)
        if reconnect { reconnects.add(1, ordering: .relaxed) }
    }

    func connectionClosed() { closed.add(1, ordering: .relaxed) }

    /// Requests reported as sent again (`requestRetried`).
    let retried = Atomic<Int>(0)
    func requestRetried() { retried.add(1, ordering: .relaxed) }

    func connectionFailed(_ reason: ConnectionFailureReason) {
        if reason == .connect { connectFailures.add(1, ordering: .relaxed) }
    }
}

@Suite struct DispatcherMetricsHookTests {
    @Test func theHookSeesEveryRequestItsLatencyTheStreamsInFlightAndTheConnections() async throws {
        let server = try NghttpdServer(maxConcurrentStreams: 100)
        let metrics = RecordingMetrics()
        let collector = ResultCollector()
        let dispatcher = try HTTP2Dispatcher(
            configuration: DispatcherConfiguration(host: "127.0.0.1", port: server.port, trustedCAFile: server.certificates.serverCertificate,
                                                   threads: 1, streamsPerConnection: 50),
            metrics: metrics, onResult: collector.handler)
        defer { dispatcher.shutdown() }
        let request = try DispatchRequest(path: "/ok", headerLines: ["apns-topic: com.example.app"], body: Array("{}".utf8))
        try await onOwnThread { for tag in 0..<2000 { dispatcher.submit(request, tag: UInt64(tag)) } }
        #expect(await collector.wait(for: 2000) == 2000)
        #expect(metrics.completed.load(ordering: .relaxed) == 2000)
        #expect(metrics.succeeded.load(ordering: .relaxed) == 2000)
        #expect(metrics.inFlight.load(ordering: .relaxed) == 0)
        #expect((1...50).contains(metrics.peakInFlight.load(ordering: .relaxed)))
        #expect(metrics.opened.load(ordering: .relaxed) == 1)
        #expect(metrics.reconnects.load(ordering: .relaxed) == 0)
        #expect(metrics.latencyTotal.load(ordering: .relaxed) > 0)
    }
}
