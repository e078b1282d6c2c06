import Foundation
import Posix
import Synchronization
import Testing
@testable import Metrics

/// `/healthz`, `/readyz` and `/metrics` keep answering within a second while other clients
/// hold many connections open or flood the endpoint: a liveness probe that times out
/// restarts the daemon, so a client that can starve the endpoint can restart pushd at will.
/// The probe and the scraper come from 127.0.0.1; the other clients from other loopback
/// addresses, as other pods would.
@Suite(.serialized) struct EndpointStarvationTests {
    static let paths = ["/healthz", "/readyz", "/metrics"]

    private func startServer() throws -> MetricsServer {
        let registry = MetricRegistry()
        try registry.counter("pushd_starvation_total", help: "S.", labels: []).labels().increment()
        return try MetricsServer(registry: registry, configuration: MetricsServerConfiguration(host: "127.0.0.1", port: 0))
    }

    /// Each path answers, and within `limit` seconds.
    private func expectPromptAnswers(_ port: UInt16, limit: Double = 1.0, _ situation: String) {
        for path in Self.paths {
            let started = Timestamp()
            let response = try? RawHTTP.request(port: port, path: path)
            let elapsed = Timestamp().timeIntervalSince(started)
            #expect(response != nil, "\(path) got no answer \(situation)")
            #expect(elapsed < limit, "\(path) took \(String(format: "%.2f", elapsed)) s \(situation)")
        }
    }

    private func closeAll(_ descriptors: [Int32]) { descriptors.forEach { close($0) } }

    @Test func endpointsAnswerWithinASecondWhileAThousandIdleConnectionsAreOpen() throws {
        #expect(DescriptorLimit.raise(toAtLeast: 4096) >= 2048, "the test needs about 1,100 descriptors")
        let server = try startServer()
        defer { server.stop() }
        // 1,000 silent sockets from 20 addresses, 50 each: within the per-address bound, so
        // all of them are really held open by the server.
        var idle = [Int32]()
        defer { closeAll(idle) }
        for client in 0..<1000 {
            idle.append(try RawHTTP.connectIdle(port: server.port, from: "127.0.1.\(2 + client % 20)"))
        }
        // Slow clients: a request line and half a header, then nothing.
        for client in 0..<40 {
            let fd = try RawHTTP.connectIdle(port: server.port, from: "127.0.2.\(2 + client % 20)")
            idle.append(fd)
            let partial = Array("GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ".utf8)
            _ = partial.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        expectPromptAnswers(server.port, "with 1,040 idle or slow connections open")
    }

    @Test func oneAddressCannotTakeEverySlot() throws {
        #expect(DescriptorLimit.raise(toAtLeast: 4096) >= 2048, "the test needs about 1,100 descriptors")
        let server = try startServer()
        defer { server.stop() }
        var idle = [Int32]()
        defer { closeAll(idle) }
        for _ in 0..<1000 {
            idle.append(try RawHTTP.connectIdle(port: server.port, from: "127.0.3.2"))
        }
        expectPromptAnswers(server.port, "with 1,000 connections open from one other address")
    }

    @Test func endpointsAnswerWithinASecondDuringARequestFlood() throws {
        let server = try startServer()
        defer { server.stop() }
        let port = server.port
        let stop = StopFlag()
        let flooded = Tally()
        let flooders = (0..<48).map { index in
            Thread {
                while !stop.isSet {
                    if (try? RawHTTP.request(port: port, path: index % 2 == 0 ? "/metrics" : "/healthz",
                                             from: "127.0.4.\(2 + index)")) != nil {
                        _ = flooded.next()
                    }
                }
            }
        }
        flooders.forEach { $0.start() }
        defer { stop.set() }
        Thread.sleep(forTimeInterval: 0.5)
        for round in 0..<5 {
            expectPromptAnswers(port, "during a request flood (round \(round))")
        }
        stop.set()
        #expect(flooded.value > 100, "the flood itself did not get through: \(flooded.value) requests")
    }
}

/// A flag that threads poll (an atomic cannot be captured by an escaping closure).
final class StopFlag: Sendable {
    private let storage = Atomic<Bool>(false)
    var isSet: Bool { storage.load(ordering: .relaxed) }
    func set() { storage.store(true, ordering: .relaxed) }
}
