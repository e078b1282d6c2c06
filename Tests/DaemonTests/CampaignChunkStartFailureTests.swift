import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A statement failing while a worker starts a chunk it leased (here the read behind the
/// campaign's `started` line, which a malformed `failed_by_reason` breaks): the chunk is
/// released at once, loudly, and sent soon after the cause is gone. It used to stay leased to
/// a worker that was not sending it, idle for its whole lease.
@Suite(.serialized) struct CampaignChunkStartFailureTests {
    /// Leases long enough that a chunk left leased shows as a wait far longer than the deferral.
    static let leaseSeconds = 30

    @Test func aChunkThatCannotBeStartedIsReleasedAtOnce() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let path = try harness.writeConfigFile()
            var yaml = try String(contentsOfFile: path, encoding: .utf8)
            #expect(yaml.contains("  lease_s: 3\n"))
            yaml = yaml.replacingOccurrences(of: "  lease_s: 3\n", with: "  lease_s: \(Self.leaseSeconds)\n")
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            let count = 100
            let id = try CampaignLaneTests.campaign(connection, count: count)
            // jsonb_each_text refuses an array: reading the campaign fails (SQLSTATE 22023).
            try connection.query("UPDATE pushd.campaigns SET failed_by_reason = '[]'::jsonb WHERE id = $1", [id])

            let daemon = try TLSFailurePausesAppTests.Daemon(config: path, log: harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 20) { daemon.text.contains("jsonb_each_text") }, "\(daemon.text.suffix(3000))")
            try connection.query("UPDATE pushd.campaigns SET failed_by_reason = '{}'::jsonb WHERE id = $1", [id])
            let repaired = Timestamp()
            let store = CampaignStore()
            let done = try DaemonHarness.wait(seconds: Double(Self.leaseSeconds) * 2) { try store.campaign(connection, id: id)?.status == .done }
            let took = Timestamp().timeIntervalSince(repaired)
            #expect(done)
            #expect(took < 15, "the campaign finished \(Int(took)) s after the cause was gone (leases of \(Self.leaseSeconds) s)")
            #expect(harness.mock.stats.accepted == count)
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"campaign_chunk_start_failed\"") }
            #expect(lines.count == 1, "\(lines)")
            #expect(lines.first?.contains("released it at once") == true, "\(lines)")
        }
    }
}
