@testable import Dispatcher
import Glibc
import Testing

/// How `submit(contentsOf:)` deals a batch out to the event loops.
@Suite struct LoopSharesTests {
    @Test func evenLoadsShareABatchEvenly() {
        #expect(LoopShares.split(200, loads: [0, 0]) == [100, 100])
        #expect(LoopShares.split(256, loads: [300, 300]) == [128, 128])
        #expect(LoopShares.split(7, loads: [5, 5, 5]) == [3, 2, 2])
    }

    @Test func theLeastLoadedLoopIsRaisedFirst() {
        // 100 bring the second loop level with the first; the other 100 are shared.
        #expect(LoopShares.split(200, loads: [300, 200]) == [50, 150])
        // Too few to reach the first: all to the second.
        #expect(LoopShares.split(60, loads: [300, 200]) == [0, 60])
        #expect(LoopShares.split(10, loads: [0, 400, 7]) == [9, 0, 1])
    }

    @Test func sharesAddUpToTheBatch() {
        for count in [1, 2, 3, 199, 256, 1024] {
            for loads in [[0], [0, 0], [9, 0], [400, 3, 77], [1, 1, 1, 1]] {
                let shares = LoopShares.split(count, loads: loads)
                #expect(shares.reduce(0, +) == count)
                #expect(shares.allSatisfy { $0 >= 0 })
            }
        }
    }

    @Test func tiesGoInTurnFromTheStart() {
        #expect(LoopShares.split(1, loads: [4, 4], start: 0) == [1, 0])
        #expect(LoopShares.split(1, loads: [4, 4], start: 1) == [0, 1])
        #expect(LoopShares.split(3, loads: [4, 4, 4], start: 2) == [1, 1, 1])
        #expect(LoopShares.split(2, loads: [4, 4, 4], start: 2) == [1, 0, 1])
    }

    /// One batch the size of a loop's streams went to a single loop before: the other loop's
    /// queue stayed empty until the submitter's next wake-up.
    @Test func aBatchIsSpreadOverTheLoops() throws {
        // A listener that accepts and never speaks: every request stays unfinished in its loop.
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
                                                   trustedCAFile: certificates.serverCertificate, threads: 2,
                                                   connectionsPerThread: 2, streamsPerConnection: 100, maxOutstanding: 800),
            onResult: collector.handler)
        let request = try DispatchRequest(path: "/ok", headerLines: [], body: [])
        dispatcher.submit(contentsOf: (0..<200).map { (request, UInt64($0)) })
        #expect(dispatcher.loopLoads == [100, 100])
        dispatcher.submit(contentsOf: (200..<260).map { (request, UInt64($0)) })
        #expect(dispatcher.loopLoads == [130, 130])
        dispatcher.shutdown(drainTimeoutMilliseconds: 100)
        #expect(collector.snapshot().count == 260)
    }
}
