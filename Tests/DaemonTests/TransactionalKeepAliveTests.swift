import APNs
import Posix
@testable import APNsMock
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The transactional lane's connection and idle time, against apns-mock over real TLS: by
/// default the lane keeps its connection however long it idles, so a push after a quiet spell
/// pays no TCP and TLS handshake; an idle close the operator sets for the lane still applies.
@Suite(.serialized) struct TransactionalKeepAliveTests {
    /// The world's configuration as the YAML file reads, with `lines` added under `apns:`.
    private func config(_ harness: DaemonHarness, apns lines: [String]) throws -> PushdConfig {
        let path = try harness.writeConfigFile()
        let text = try String(contentsOfFile: path, encoding: .utf8)
            .replacingOccurrences(of: "apns:\n", with: "apns:\n" + lines.map { "  \($0)\n" }.joined())
        return try ConfigLoader.parse(text, environment: [:]).0
    }

    /// Inserts one job and waits until the mock has accepted `total` notifications.
    private func push(_ seed: Int, total: Int, _ harness: DaemonHarness, _ connection: PGConnection) throws {
        try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, $2)",
                             [DaemonHarness.token(seed), #"{"aps":{"alert":"order shipped"}}"#])
        #expect(DaemonHarness.wait(seconds: 20) { harness.mock.acceptedLog.count == total })
    }

    @Test func theTransactionalLaneKeepsItsIdleConnectionPastTheIdleCloseOfTheOtherLanes() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let pipeline = try harness.pipeline(try config(harness, apns: ["idle_close_s: 1"]))
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            try push(1, total: 1, harness, connection)
            // Idle past the 1-second idle close (libcurl counts whole seconds, closes above).
            Thread.sleep(forTimeInterval: 2.5)
            try push(2, total: 2, harness, connection)
            let stats = harness.mock.stats
            #expect(stats.connectionsAccepted == 1, "the second push opened a new connection: \(stats.connectionsAccepted) accepted")
            #expect(stats.connectionsClosed == 0)
        }
    }

    @Test func anIdleCloseSetForTheTransactionalLaneStillClosesItsIdleConnection() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let pipeline = try harness.pipeline(try config(harness, apns: ["transactional_idle_close_s: 1"]))
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            try push(1, total: 1, harness, connection)
            Thread.sleep(forTimeInterval: 2.5)
            try push(2, total: 2, harness, connection)
            #expect(harness.mock.stats.connectionsAccepted == 2)
            #expect(DaemonHarness.wait(seconds: 5) { harness.mock.stats.connectionsClosed == 1 })
        }
    }
}
