import Foundation
import Posix
import Testing
@testable import Metrics

/// The endpoint under clients that hold connections without finishing a request or without
/// reading the answer: `/readyz` and scrapes must keep answering, the port must not stay
/// taken, and memory must not grow with the number of such clients. Real sockets against the
/// real server; the hostile clients come from other loopback addresses, as other pods would.
@Suite(.serialized) struct HostileClientTests {
    /// Whether the server has ended `fd` (closed it, reset it, or answered something and
    /// closed): a read that does not wait says so; `EAGAIN` means it is still open.
    private static func serverEnded(_ fd: Int32) -> Bool {
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
        if count >= 0 { return true }
        return errno != EAGAIN && errno != EWOULDBLOCK
    }

    private static func sendBytes(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        _ = bytes.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    }

    /// Slowloris: 300 connections from 10 addresses (30 each, within the per-address bound),
    /// each sending its request line and then one more header byte every 2 s, never the end of
    /// the headers, and 100 more that never send anything. Every byte is progress, so an idle
    /// time-out never ends the first ones; they must be ended anyway, and `/readyz` and
    /// `/metrics` must answer within 2 s meanwhile.
    @Test func connectionsThatTrickleTheirHeadersAreEndedWhileScrapesAnswer() throws {
        #expect(DescriptorLimit.raise(toAtLeast: 4096) >= 2048)
        let registry = MetricRegistry()
        try registry.counter("pushd_hostile_total", help: "H.", labels: []).labels().increment()
        let server = try MetricsServer(registry: registry, configuration: MetricsServerConfiguration(host: "127.0.0.1", port: 0))
        defer { server.stop() }
        server.setReady(true, detail: "test")
        var slow = [Int32]()
        defer { slow.forEach { close($0) } }
        for client in 0..<300 {
            let fd = try RawHTTP.connectIdle(port: server.port, from: "127.0.5.\(2 + client % 10)")
            Self.sendBytes(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: ")
            slow.append(fd)
        }
        // And 100 that never send a byte.
        var idle = [Int32]()
        defer { idle.forEach { close($0) } }
        for client in 0..<100 {
            idle.append(try RawHTTP.connectIdle(port: server.port, from: "127.0.5.\(20 + client % 10)"))
        }
        var ended = Set<Int32>()
        for round in 0..<11 {
            Thread.sleep(forTimeInterval: 2)
            for fd in slow where !ended.contains(fd) {
                if Self.serverEnded(fd) { ended.insert(fd) } else { Self.sendBytes(fd, "a") }
            }
            for path in ["/readyz", "/metrics"] {
                let started = Timestamp()
                let response = try? RawHTTP.request(port: server.port, path: path)
                let elapsed = Timestamp().timeIntervalSince(started)
                #expect(response?.status == 200, "\(path) got no answer in round \(round) with \(slow.count - ended.count) slow connections open")
                #expect(elapsed < 2, "\(path) took \(String(format: "%.2f", elapsed)) s in round \(round)")
            }
        }
        #expect(ended.count == slow.count, "\(slow.count - ended.count) of \(slow.count) connections that never finished their headers were still open after 22 s")
        let idleOpen = idle.filter { !Self.serverEnded($0) }.count
        print("after 22 s: \(slow.count - ended.count) of \(slow.count) trickling and \(idleOpen) of \(idle.count) silent connections still open")
        #expect(idleOpen == 0, "\(idleOpen) of \(idle.count) connections that never sent a byte were still open after 22 s")
    }

    /// 40 clients from one address ask for a large `/metrics` answer (about 8 MB) and never
    /// read it (a 4 KB receive buffer, so the kernel takes little of it). Each must not cost the
    /// server its own copy of the answer, probes from elsewhere must answer meanwhile, and the
    /// connections must be ended.
    @Test func clientsThatNeverReadALargeAnswerCostNoCopyEachAndAreEnded() throws {
        #expect(DescriptorLimit.raise(toAtLeast: 4096) >= 2048)
        let registry = MetricRegistry()
        let family = try registry.counter("pushd_hostile_series_total", help: "Many series, for a large exposition.", labels: ["reason"])
        let padding = String(repeating: "x", count: 120)
        for index in 0..<50_000 { try family.labels("\(padding)\(index)").increment() }
        let server = try MetricsServer(registry: registry, configuration: MetricsServerConfiguration(host: "127.0.0.1", port: 0))
        defer { server.stop() }
        let first = try RawHTTP.request(port: server.port, path: "/metrics")
        let size = first.body.utf8.count
        #expect(size > 7_000_000, "the answer is \(size) bytes")
        let before = try ProcSelf.stat().residentMemoryBytes
        var stalled = [Int32]()
        defer { stalled.forEach { close($0) } }
        for _ in 0..<40 {
            let fd = try RawHTTP.connectIdle(port: server.port, from: "127.0.6.2")
            var small: Int32 = 4096
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, socklen_t(MemoryLayout<Int32>.size))
            Self.sendBytes(fd, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            stalled.append(fd)
        }
        Thread.sleep(forTimeInterval: 2)
        let during = try ProcSelf.stat().residentMemoryBytes
        let grown = (during - before) / 1_048_576
        print("40 clients not reading a \(size)-byte answer: resident memory grew by \(Int(grown)) MB")
        #expect(grown < 100, "resident memory grew by \(Int(grown)) MB with 40 clients not reading a \(size / 1_048_576) MB answer")
        for path in ["/readyz", "/healthz"] {
            let started = Timestamp()
            #expect((try? RawHTTP.request(port: server.port, path: path)) != nil, "\(path) got no answer")
            #expect(Timestamp().timeIntervalSince(started) < 2)
        }
        // The server lets go of them by the answer deadline (10 s). Asked of the server: a
        // client cannot tell, since a close's FIN waits behind the data it has not read.
        var open = server.connectionCounts.open
        for _ in 0..<32 where open > 0 {
            Thread.sleep(forTimeInterval: 0.5)
            open = server.connectionCounts.open
        }
        #expect(open == 0, "the server still held \(open) of the \(stalled.count) connections of clients that never read, 18 s after their requests")
    }

    /// A request line and headers far larger than any scraper sends: refused with an error
    /// status (or the connection closed), without taking the endpoint down.
    @Test func anOversizedRequestIsRefusedAndTheEndpointStillAnswers() throws {
        let server = try MetricsServer(registry: MetricRegistry(), configuration: MetricsServerConfiguration(host: "127.0.0.1", port: 0))
        defer { server.stop() }
        let fd = try RawHTTP.connectIdle(port: server.port, from: "127.0.7.2")
        defer { close(fd) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        Self.sendBytes(fd, "GET /" + String(repeating: "a", count: 200_000) + " HTTP/1.1\r\nHost: x\r\n"
                       + String(repeating: "X-Big: " + String(repeating: "b", count: 1000) + "\r\n", count: 200) + "\r\n")
        var buffer = [UInt8](repeating: 0, count: 4096)
        let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
        let answer = count > 0 ? String(decoding: buffer[0..<count], as: UTF8.self) : ""
        print("oversized request answered: \(count > 0 ? String(answer.prefix(while: { $0 != "\r" })) : "closed (\(count))")")
        #expect(count == 0 || (count < 0 && errno == ECONNRESET) || answer.hasPrefix("HTTP/1.1 4"),
                "got \(count) bytes: \(answer.prefix(80))")
        #expect((try? RawHTTP.request(port: server.port, path: "/readyz")) != nil)
    }
}
