import Foundation
import Locking
import Posix
import Testing
@testable import Metrics

/// Every connection the metrics port refuses or ends is reported with its reason, which pushd
/// counts in `pushd_metrics_connections_refused_total` and logs.
@Suite(.serialized) struct EndpointRefusalTests {
    final class Reasons: Sendable {
        private let seen = Lock([EndpointRefusal]())
        func add(_ reason: EndpointRefusal) { seen.withLock { $0.append(reason) } }
        var all: [EndpointRefusal] { seen.withLock { $0 } }
    }

    /// Whether the server has ended `fd`, without waiting.
    private static func serverEnded(_ fd: Int32) -> Bool {
        var byte: UInt8 = 0
        let count = recv(fd, &byte, 1, Int32(MSG_DONTWAIT))
        return count >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK)
    }

    @Test func connectionsOverTheAddressBoundAreClosedAtOnceAndReported() throws {
        let reasons = Reasons()
        let server = try MetricsServer(registry: MetricRegistry(), configuration: MetricsServerConfiguration(
            host: "127.0.0.1", port: 0, perIPConnectionLimit: 4), onRefusal: { reasons.add($0) })
        defer { server.stop() }
        var held = [Int32]()
        defer { held.forEach { close($0) } }
        for _ in 0..<10 { held.append(try RawHTTP.connectIdle(port: server.port, from: "127.0.8.2")) }
        // The pool threads close the ones over the bound as they accept them: up to 10 s on a
        // loaded machine, then a moment for one more that should not be closed.
        let waitUntil = Date().addingTimeInterval(10)
        while held.filter(Self.serverEnded).count < 5, Date() < waitUntil { Thread.sleep(forTimeInterval: 0.05) }
        Thread.sleep(forTimeInterval: 0.5)
        let closedAtOnce = held.filter(Self.serverEnded).count
        // Two pool threads admitting at the same moment may let one more in.
        #expect((5...6).contains(closedAtOnce), "\(closedAtOnce) of the 10 connections from one address were closed; the bound is 4")
        #expect(reasons.all == Array(repeating: .perAddressLimit, count: closedAtOnce))
        #expect(server.connectionCounts.busiestAddress == 10 - closedAtOnce)
        #expect((try? RawHTTP.request(port: server.port, path: "/healthz"))?.status == 200, "another address is served")
    }

    @Test func aTricklingRequestAndAnUnreadAnswerAreEndedAtTheirDeadlinesAndReported() throws {
        let reasons = Reasons()
        let registry = MetricRegistry()
        let family = try registry.counter("pushd_refusal_series_total", help: "Many series.", labels: ["reason"])
        for index in 0..<60_000 { try family.labels(String(repeating: "y", count: 100) + "\(index)").increment() }
        let server = try MetricsServer(registry: registry, configuration: MetricsServerConfiguration(
            host: "127.0.0.1", port: 0, connectionTimeoutSeconds: 30, requestTimeoutSeconds: 1, answerTimeoutSeconds: 2),
            onRefusal: { reasons.add($0) })
        defer { server.stop() }
        let trickling = try RawHTTP.connectIdle(port: server.port, from: "127.0.9.2")
        defer { close(trickling) }
        let unread = try RawHTTP.connectIdle(port: server.port, from: "127.0.9.3")
        defer { close(unread) }
        var small: Int32 = 4096
        setsockopt(unread, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
        for (fd, text) in [(trickling, "GET /healthz HTTP/1.1\r\n"), (unread, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")] {
            _ = Array(text.utf8).withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        for _ in 0..<12 {
            Thread.sleep(forTimeInterval: 0.5)
            _ = Array("X".utf8).withUnsafeBytes { send(trickling, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        }
        #expect(Set(reasons.all) == [.requestTimeout, .answerTimeout], "reported: \(reasons.all)")
        #expect(reasons.all.count == 2)
        #expect(server.connectionCounts.open == 0)
    }
}
