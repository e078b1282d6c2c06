import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The database takes no writes for a few seconds while a campaign is being sent, as during a
/// failover (`default_transaction_read_only` on, then off again): every statement that writes
/// fails with SQLSTATE 25006 and the sessions stay open. The campaign workers keep the chunks
/// they are sending, with what was answered, and record it once writes are taken again. They
/// used to give the chunks up on any database error but a lost connection: the chunks sat
/// leased and idle until their leases ran out, and the worker that took each over sent every
/// target answered since the last checkpoint again.
@Suite(.serialized) struct CampaignReadOnlyDatabaseTests {
    /// Leases long enough that a chunk given up shows as a wait far longer than the campaign's.
    static let leaseSeconds = 20

    @Test func aCampaignSentThroughSecondsOfAReadOnlyDatabaseSendsEveryTargetOnceAndFinishesPromptly() throws {
        try IsolatedDatabase.with { database in
            // Each answer takes 100 ms: about a hundred targets are always awaiting theirs.
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 100))
            let connection = try database.connect()
            // This session turns the setting back: the reload must not make it read-only too.
            _ = try connection.execute(script: "SET default_transaction_read_only = off")
            let store = CampaignStore()
            // Paced at 1,000/s by the app's campaign_rate: 4,000 targets take about 4 s, so
            // chunks are being sent when the database turns read-only.
            let path = try CampaignLaneTests.configCapped(harness, rate: 1000)
            var yaml = try String(contentsOfFile: path, encoding: .utf8)
            #expect(yaml.contains("  lease_s: 3\n"))
            yaml = yaml.replacingOccurrences(of: "  lease_s: 3\n", with: "  lease_s: \(Self.leaseSeconds)\n")
            try yaml.write(toFile: path, atomically: true, encoding: .utf8)
            let count = 4000
            let id = try CampaignLaneTests.campaign(connection, count: count)

            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: path, log: log)
            defer { FleetStatusTests.stop(process) }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1500 })

            // The server is shared by the test run: whatever happens, it takes writes again.
            defer { try? Self.setReadOnly(false, connection: connection, database: database) }
            try Self.setReadOnly(true, connection: connection, database: database)
            Thread.sleep(forTimeInterval: 3)
            try Self.setReadOnly(false, connection: connection, database: database)
            let writable = Timestamp()

            // Done in the seconds its targets take, not after the leases of chunks given up.
            let done = try DaemonHarness.wait(seconds: Double(Self.leaseSeconds) * 2) {
                try store.campaign(connection, id: id)?.status == .done
            }
            let took = Timestamp().timeIntervalSince(writable)
            #expect(done)
            #expect(took < 10, "the campaign finished \(Int(took)) s after the database took writes again (leases of \(Self.leaseSeconds) s)")
            // Answers still on their way when a chunk was taken over would come after the finish.
            Thread.sleep(forTimeInterval: 0.5)
            let perToken = harness.mock.stats.perToken
            let twice = perToken.values.filter { $0.accepted > 1 }.count
            #expect(twice == 0, "\(twice) targets were accepted more than once; \(perToken.count) of \(count) were accepted")
            #expect(perToken.count == count)
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == count, "the campaign counts \(campaign.sent) sent")
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            #expect(text.contains("25006"), "the database never refused a write: \(text.suffix(2000))")
            #expect(!text.contains("took over chunk"), "a chunk was taken over")
            #expect(!text.contains("campaign_chunk_given_up"), "a chunk was given up")
        }
    }

    /// An error of a transient class that does not pass (here every checkpoint of a chunk
    /// cancelled, SQLSTATE 57014, as a statement timeout on the same write would) keeps the
    /// chunks for at most a lease's length: then they are given up, loudly, and taken over once
    /// the writes go through. Kept for ever, their leases extended by the keeper, they were
    /// sent by nobody.
    @Test func chunksKeptThroughATransientErrorThatDoesNotPassAreGivenUpAfterALease() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 100))
            let connection = try database.connect()
            let store = CampaignStore()
            let path = try CampaignLaneTests.configCapped(harness, rate: 1000)
            let yaml = try String(contentsOfFile: path, encoding: .utf8)
            #expect(yaml.contains("  lease_s: 3\n"))
            let count = 4000
            let id = try CampaignLaneTests.campaign(connection, count: count)

            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: path, log: log)
            defer { FleetStatusTests.stop(process) }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1000 })
            // Every checkpoint and release of a chunk is cancelled; the lease keeper's extensions
            // (lease_until only) go through.
            try connection.execute(script: """
                CREATE FUNCTION public.cancel_checkpoint() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN RAISE EXCEPTION 'checkpoint cancelled' USING ERRCODE = 'query_canceled'; END $$;
                CREATE TRIGGER cancel_checkpoint BEFORE UPDATE ON pushd.campaign_chunks FOR EACH ROW
                    WHEN (NEW.checkpoint IS DISTINCT FROM OLD.checkpoint OR NEW.lease_owner IS DISTINCT FROM OLD.lease_owner)
                    EXECUTE FUNCTION public.cancel_checkpoint();
                """)
            defer { try? connection.execute(script: "DROP TRIGGER IF EXISTS cancel_checkpoint ON pushd.campaign_chunks;") }
            func givenUp() -> Bool { ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").contains("campaign_chunk_given_up") }
            #expect(DaemonHarness.wait(seconds: 15) { givenUp() }, "no chunk was given up within 15 s (leases of 3 s)")
            try connection.execute(script: "DROP TRIGGER cancel_checkpoint ON pushd.campaign_chunks;")
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done })
            #expect(harness.mock.stats.perToken.count == count)
        }
    }

    /// Turns `default_transaction_read_only` on or off for the whole server and waits until a
    /// new session sees it (the reload reaches the server's processes a moment later).
    static func setReadOnly(_ on: Bool, connection: PGConnection, database: IsolatedDatabase) throws {
        _ = try connection.execute(script: on ? "ALTER SYSTEM SET default_transaction_read_only = on"
                                              : "ALTER SYSTEM RESET default_transaction_read_only")
        _ = try connection.execute(script: "SELECT pg_reload_conf()")
        let seen = try DaemonHarness.wait(seconds: 5) {
            let fresh = try database.connect()
            defer { fresh.close() }
            return try fresh.query("SHOW default_transaction_read_only").require(String.self, row: 0, column: 0) == (on ? "on" : "off")
        }
        #expect(seen, "default_transaction_read_only is not \(on ? "on" : "off") for new sessions")
    }
}
