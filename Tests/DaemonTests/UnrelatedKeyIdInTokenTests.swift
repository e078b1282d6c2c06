import APNs
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing

/// APNs answers 403 UnrelatedKeyIdInToken when a connection's request carries a token of a key
/// unrelated to its first push's: "To use this token, open a new connection." pushd sends the
/// request again on a new connection; only when a new connection answers the same does it take
/// the token as refused and pause the app, as for any refused credentials.
@Suite(.serialized) struct UnrelatedKeyIdInTokenTests {
    static let retirement = #"pushd_apns_connection_retirements_total{app="shop",environment="sandbox",reason="UnrelatedKeyIdInToken"} "#

    /// The value of `prefix`'s sample in `metrics`, 0 when absent.
    static func sample(_ metrics: String, _ prefix: String) -> Double {
        metrics.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Double($0.dropFirst(prefix.count)) } ?? 0
    }

    @Test func anUnrelatedKeyAnswerIsSentAgainOnANewConnectionAndDelivered() throws {
        try IsolatedDatabase.with { database in
            // Only the first connection answers so, as APNs would answer a connection tied to another key.
            let harness = try DaemonHarness(database: database,
                                            faults: FaultConfiguration(forbiddenReason: "UnrelatedKeyIdInToken", forbiddenConnections: 1))
            let connection = try database.connect()
            defer { connection.close() }
            try TLSFailurePausesAppTests.enqueue(connection, count: 3)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(harness.mock.stats.rejected("UnrelatedKeyIdInToken") >= 1)
            #expect(harness.mock.stats.accepted == 3)
            #expect(harness.mock.stats.connectionsAccepted >= 2)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(daemon.metrics().contains(#"pushd_app_paused{app="shop"} 0"#))
            #expect(!daemon.text.contains("is paused"), "\(daemon.text)")
            // Loud although nothing waits: the retired connection is counted and logged.
            #expect(DaemonHarness.wait(seconds: 10) { Self.sample(daemon.metrics(), Self.retirement) >= 1 }, "\(daemon.metrics())")
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"reason\":\"UnrelatedKeyIdInToken\"") }
            #expect(lines.contains { $0.contains("the request is sent again on a new connection") && $0.contains("\"level\":\"warning\"") },
                    "\(daemon.text)")
            // An answer, not a lost connection: no reset counted.
            #expect(Self.sample(daemon.metrics(), #"pushd_apns_connection_errors_total{app="shop",environment="sandbox",reason="reset"} "#) == 0)
        }
    }

    @Test func anUnrelatedKeyAnswerOnTheNewConnectionTooPausesTheApp() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(forbiddenReason: "UnrelatedKeyIdInToken"))
            let connection = try database.connect()
            defer { connection.close() }
            try TLSFailurePausesAppTests.enqueue(connection, count: 3)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 30) { daemon.metrics().contains(#"pushd_app_paused{app="shop"} 1"#) }, "\(daemon.text)")
            // Asked on a new connection first, not once more on the same one.
            #expect(harness.mock.stats.connectionsAccepted >= 2)
            #expect(harness.mock.stats.rejected("UnrelatedKeyIdInToken") >= 2)
            #expect(Self.sample(daemon.metrics(), Self.retirement) >= 2)
            // The jobs are kept for after the fix, nothing dead-lettered.
            Thread.sleep(forTimeInterval: 1)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            #expect(harness.mock.stats.accepted == 0)
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("is paused") }
            #expect(lines.count == 1, "\(daemon.text)")
            for expected in ["\"level\":\"error\"", "sending for app shop is paused",
                             "(UnrelatedKeyIdInToken) also on a new connection", "\"reason\":\"UnrelatedKeyIdInToken\""] {
                #expect(lines.first?.contains(expected) == true, "no \(expected) in \(daemon.text)")
            }
        }
    }
}
