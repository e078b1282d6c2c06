import APNs
import APNsMock
@testable import Dispatcher
import Foundation
import Testing

/// apns-mock ending every connection after one or a few answers ("partial churn": the rest of
/// its streams refused, or a GOAWAY with last-stream-id 1), over HTTP/2 and TLS: each new
/// connection costs a handshake, so from the second such connection in a row each is a failed
/// one and the next waits out the backoff, announced once. A server that ends connections
/// after many answers is reconnected at once.
@Suite(.serialized) struct ConnectionChurnMockTests {
    /// `senders` sending for `seconds` to apns-mock with `faults` through the engine as pushd
    /// sets it up (the default reconnect backoff) on one event loop; `body` gets the results.
    private func drive(_ faults: FaultConfiguration, seconds: Double, senders: Int,
                       _ body: (APNsMockServer, HTTP2Dispatcher, RecordingMetrics, [DispatchResult]) async throws -> Void) async throws {
        try await withMock({ configuration, _ in
            configuration.faults = faults
        }) { server, port, material in
            let metrics = RecordingMetrics()
            var configuration = configurationForMock(port: port, material: material, threads: 1, streams: 100)
            configuration.reconnectBackoff = ReconnectBackoff()
            let engine = try HTTP2Dispatcher(configuration: configuration, metrics: metrics)
            defer { engine.shutdown() }
            try await body(server, engine, metrics, try await ReconnectStormTests.drive(engine, seconds: seconds, senders: senders))
        }
    }

    /// Every failure is one connection that answered a few and was lost: with the rest of its
    /// streams refused, or ended in order by a GOAWAY after one stream. There the connection the
    /// loop opens with one request answers it and closes, and nothing is lost; it churned all
    /// the same (a handshake a request), so the connections are bounded by the backoff too,
    /// from many senders as from one that sends a request at a time, whose every request goes
    /// on a connection of its own.
    @Test(arguments: [(FaultConfiguration(refuseAfterStreams: 1), 20), (FaultConfiguration(refuseAfterStreams: 3), 20),
                      (FaultConfiguration(goawayAfterStreams: 1), 20), (FaultConfiguration(goawayAfterStreams: 1), 1)])
    func connectionsThatAnswerAFewAndAreLostWaitOutTheBackoff(faults: FaultConfiguration, senders: Int) async throws {
        let churn = 6.0
        try await drive(faults, seconds: churn, senders: senders) { server, engine, metrics, results in
            let stats = server.stats
            let allowed = ReconnectStormTests.connectionsAllowed(in: churn)
            // The failed connections a run allows, the first churned one, which is let go (it may
            // be a fresh connection's requests refused before its SETTINGS were read), and the
            // first connection, which answers; and two more for a loaded machine, where a churned
            // connection's loss may be read a backoff step late (1,691 to 2,099 before the rule).
            let bound = allowed + 4
            // What each of those connections was given and did not answer: at most the senders'
            // requests (the connections are bounded above). A bound of the allowed connections
            // instead failed on a loaded machine with one connection more, still within `bound`.
            let refused = stats.streamsReset + stats.streamsRefused
            let refusedBound = senders * stats.connectionsAccepted
            let answered = results.filter { $0.response?.status == 200 }.count
            print("""
                \(faults.refuseAfterStreams.map { "\($0) answered, the rest refused," } ?? "GOAWAY after 1 stream") on every connection, \(senders) sender\(senders == 1 ? "" : "s"), \
                for \(Int(churn)) s: \(stats.connectionsAccepted) connections accepted (the backoff allows \(bound)), \
                \(stats.accepted) accepted, \(refused) requests refused (at most \(refusedBound)); \(engine.statistics.reconnectBackoffs) backoffs, \
                \(metrics.backoffRunsStarted.load(ordering: .relaxed)) announced; \(answered) of \(results.count) results answered, \
                \(ReconnectStormTests.handedBack(results)) handed back unsent; causes \(metrics.backoffCauses)
                """)
            #expect(stats.connectionsAccepted <= bound, "the mock accepted \(stats.connectionsAccepted) connections in \(Int(churn)) s")
            #expect(refused <= refusedBound, "the mock refused \(refused) requests in \(Int(churn)) s")
            #expect(engine.statistics.reconnectBackoffs >= 3)
            #expect(metrics.backoffRunsStarted.load(ordering: .relaxed) == 1, "one run, announced once")
            let cause = metrics.backoffCauses.first ?? ""
            #expect(cause.contains("then was lost") && cause.contains("again and again"), "cause: \(cause)")
            // Refused streams are requests left unanswered; one request at a time leaves none.
            if faults.refuseAfterStreams != nil { #expect(cause.contains("unanswered"), "cause: \(cause)") }
            if senders == 1 { #expect(cause.contains("(it ended in order"), "cause: \(cause)") }
            // One request at a time is answered before its connection is lost: nothing waits then.
            if senders > 1 { #expect(ReconnectStormTests.handedBack(results) > 0) }

            // The server is well again: everything is answered and the run ends.
            try server.setFaults(.none)
            let after = try await ReconnectStormTests.driveUntilTheRunEnds(engine, metrics)
            #expect(after.suffix(20).allSatisfy { $0.response?.status == 200 })
            #expect(metrics.backoffRunsEnded.load(ordering: .relaxed) == 1, "the run of failed connections ended")
        }
    }

    /// A GOAWAY after 20 streams with 100 in flight (libcurl sends the 80 refused on a new
    /// connection at once), or 80 streams refused after 20 answers: 20 answers a handshake is a
    /// healthy end, whatever it left unanswered. No backoff, everything answered.
    @Test(arguments: [FaultConfiguration(goawayAfterStreams: 20), FaultConfiguration(refuseAfterStreams: 20)])
    func connectionsThatAnswerManyAndAreLostReconnectAtOnce(faults: FaultConfiguration) async throws {
        try await drive(faults, seconds: 3, senders: 100) { server, engine, metrics, results in
            let stats = server.stats
            let answered = results.filter { $0.response?.status == 200 }.count
            let fault = faults.goawayAfterStreams != nil ? "GOAWAY after 20 streams" : "20 answered, the rest refused,"
            print("\(fault) on every connection for 3 s: \(answered) of \(results.count) answered, \(stats.connectionsAccepted) connections, "
                  + "\(engine.statistics.reconnectBackoffs) backoffs, causes \(metrics.backoffCauses)")
            #expect(stats.connectionsAccepted >= 5)
            #expect(engine.statistics.reconnectBackoffs == 0)
            #expect(metrics.backoffRunsStarted.load(ordering: .relaxed) == 0)
            #expect(ReconnectStormTests.handedBack(results) == 0)
            #expect(answered > results.count * 9 / 10)
        }
    }
}
