@testable import Dispatcher
import Testing

/// A failed transfer reports libcurl's own message for it (`CURLOPT_ERRORBUFFER`), not only
/// the text of its code: each pooled transfer has its own buffer, attached while it runs.
@Suite struct FailureMessageTests {
    private static let request = try! DispatchRequest(path: "/ok", headerLines: ["apns-topic: com.example.app"],
                                                      body: Array(#"{"aps":{}}"#.utf8))

    @Test func everyTransferFailingTheHandshakeCarriesLibcurlsDetail() async throws {
        let server = try NghttpdServer()
        let collector = ResultCollector()
        let dispatcher = try HTTP2Dispatcher(configuration: DispatcherConfiguration(
            host: "127.0.0.1", port: server.port, trustedCAFile: try TestCertificates.get().clientCertificate, threads: 1,
            maxAttempts: 1), onResult: collector.handler)
        defer { dispatcher.shutdown() }
        // Twice as many as the first round's transfers: the second round reuses their handles.
        for round in 0..<2 {
            for tag in 0..<20 { dispatcher.submit(Self.request, tag: UInt64(round * 20 + tag)) }
            #expect(await collector.wait(for: (round + 1) * 20, seconds: 20) == (round + 1) * 20)
        }
        let results = collector.snapshot().results.values
        #expect(results.count == 40)
        // curl_easy_strerror(60) alone says "SSL peer certificate or SSH remote key was not OK".
        #expect(results.allSatisfy { $0.transportError?.code == 60 })
        #expect(results.allSatisfy { $0.transportError?.message.hasPrefix("SSL certificate problem") == true })
    }

    @Test func aRefusedConnectionNamesTheAddressAndPort() async throws {
        let port = freeLoopbackPort()
        let dispatcher = try HTTP2Dispatcher(configuration: DispatcherConfiguration(
            host: "127.0.0.1", port: port, trustedCAFile: try TestCertificates.get().serverCertificate, threads: 1,
            maxAttempts: 1))
        defer { dispatcher.shutdown() }
        let result = await dispatcher.send(Self.request)
        #expect(result.transportError?.code == 7)
        // curl_easy_strerror(7) alone says "Could not connect to server".
        #expect(result.transportError?.message.hasPrefix("Failed to connect to 127.0.0.1 port \(port)") == true)
    }
}
