import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import Testing
@testable import pushd

/// A server that resets streams (RST_STREAM INTERNAL_ERROR) instead of answering makes pushd
/// send the notification again. That used to happen in silence: no line, and only a count
/// without a reason. Now the first resend of a kind logs a warning naming libcurl's words (the
/// HTTP/2 error code) and the host, at most once a minute after, and
/// `pushd_apns_requests_resent_total` says why. The real binary, the real mock.
@Suite(.serialized) struct StreamResetResendTests {
    @Test func aResetStreamIsResentWithOneLineNamingTheErrorCodeAndTheHost() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(streamResetRate: 1, streamResetErrorCode: 2))
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(92)])
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            func lines() -> [Substring] {
                daemon.text.split(separator: "\n").filter { $0.contains(#""event":"apns_request_resent""#) && $0.contains(#""reason":"stream_reset""#) }
            }
            #expect(DaemonHarness.wait(seconds: 20) { !lines().isEmpty }, "\(daemon.text)")
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.streamsReset >= 3 })
            Thread.sleep(forTimeInterval: 1)
            let found = lines()
            #expect(found.count == 1, "rate-limited to one line a minute: \(found)")
            for expected in [#""level":"warning""#, "INTERNAL_ERROR", "127.0.0.1", "reset the stream", #""app":"shop""#] {
                #expect(found.first?.contains(expected) == true, "no \(expected) in \(found)")
            }
            let metrics = daemon.metrics()
            let series = #"pushd_apns_requests_resent_total{app="shop",environment="sandbox",reason="stream_reset"} "#
            let count = metrics.split(separator: "\n").first { $0.hasPrefix(series) }.flatMap { Int($0.dropFirst(series.count)) } ?? 0
            #expect(count >= 1, "\(metrics.split(separator: "\n").filter { $0.contains("requests_resent") })")
            #expect(harness.mock.stats.accepted == 0)
        }
    }
}
