import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Seconds of a read-only database (a failover) while a campaign is being sent: the
/// transactional, broadcast and campaign workers say once that the database refuses writes and
/// once that it takes them again, not a warning per failed pass of each worker (the campaign
/// workers wrote one per pass until they were told the same way); the lease keeper
/// says the database refuses writes, not that the workers' checkpoints still extend the leases
/// (they fail too).
@Suite(.serialized) struct ReadOnlyDatabaseLinesTests {
    @Test func aReadOnlySpellIsToldOnceWhenItBeginsAndOnceWhenItEnds() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(delayMilliseconds: 100))
            let connection = try database.connect()
            defer { connection.close() }
            _ = try connection.execute(script: "SET default_transaction_read_only = off")
            // Paced at 1,000/s: chunks are being sent, their leases renewed, through the spell.
            let path = try CampaignLaneTests.configCapped(harness, rate: 1000)
            let id = try CampaignLaneTests.campaign(connection, count: 12_000)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: path, log: harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1000 })

            defer { try? CampaignReadOnlyDatabaseTests.setReadOnly(false, connection: connection, database: database) }
            try CampaignReadOnlyDatabaseTests.setReadOnly(true, connection: connection, database: database)
            Thread.sleep(forTimeInterval: 8)
            try CampaignReadOnlyDatabaseTests.setReadOnly(false, connection: connection, database: database)
            #expect(try DaemonHarness.wait(seconds: 40) { try CampaignStore().campaign(connection, id: id)?.status == .done })
            // Each kind tells the end once its passes have gone through for a second, after the
            // pause its last refused pass began (up to 6.4 s after 8 s of refusals): that can be
            // later than the campaign's end.
            let kinds = ["transactional worker", "broadcast worker", "campaign worker"]
            func told(_ who: String) -> Bool {
                daemon.text.split(separator: "\n").contains { $0.contains(who) && $0.contains("\"event\":\"database_takes_writes\"") }
            }
            let done = Timestamp()
            #expect(DaemonHarness.wait(seconds: 30) { kinds.allSatisfy(told) }, "not told over: \(kinds.filter { !told($0) })")
            print("every kind told the spell over \(Int(Timestamp().timeIntervalSince(done) * 1000)) ms after the campaign was done")
            Thread.sleep(forTimeInterval: 2)

            let lines = daemon.text.split(separator: "\n")
            #expect(daemon.text.contains("25006"), "the database never refused a write: \(daemon.text.suffix(2000))")
            for who in kinds {
                // A chunk kept past a lease's length is given up, one line each: not a line per pass.
                let refused = lines.filter { $0.contains(who) && $0.contains("25006") && !$0.contains("campaign_chunk_given_up") }
                #expect(refused.count == 1, "\(refused.count) lines of the \(who)s on refused writes in 8 s: \(refused)")
                let back = lines.filter { $0.contains(who) && $0.contains("\"event\":\"database_takes_writes\"") }
                #expect(back.count == 1, "\(back)")
            }
            let keeper = lines.filter { $0.contains("campaign lease keeper") && $0.contains("25006") }
            #expect(!keeper.isEmpty, "the lease keeper never met the refusal")
            for line in keeper {
                #expect(!line.contains("the workers' checkpoints still extend them"), "\(line)")
                #expect(line.contains("the database refuses writes"), "\(line)")
            }
        }
    }
}
