import Foundation
import APNsMock
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// The real pushd process sending a campaign while `pushd campaign import ID -` adds targets
/// to it from a pipe that stays open: the import must not stop the sending, and no target may
/// be sent twice because the workers could not write their progress.
@Suite(.serialized) struct CampaignImportWhileSendingTests {
    /// Targets at the start, sent at `rate` per second: still sending when the import ends.
    static let first = 5000
    static let added = 1000
    static let rate = 200
    /// How long the import's standard input stays open: longer than pushd's `lock_timeout`.
    static let importSeconds = 15.0

    /// A running campaign of `count` targets capped at `rate` per second.
    static func runningCampaign(_ connection: PGConnection, count: Int) throws -> Int64 {
        let store = CampaignStore()
        let id = try store.create(connection, NewCampaign(app: "shop", name: "spring sale", payload: #"{"aps":{"alert":"hi"}}"#,
                                                          rateLimit: rate))
        try store.importTargets(connection, campaignID: id, targets: (1...count).map { (DaemonHarness.token($0), nil) })
        #expect(try store.start(connection, id: id) == .running)
        return id
    }

    @Test func anImportFromAPipeIntoASendingCampaignNeitherStallsItNorSendsATargetTwice() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let store = CampaignStore()
            let id = try Self.runningCampaign(connection, count: Self.first)

            let config = try harness.writeConfigFile()
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted > 0 }, "\(daemon.text.suffix(3000))")

            let importer = ChildProcess()
            importer.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
            importer.arguments = ["campaign", "import", String(id), "-", "--database-url", database.url]
            importer.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
            let input = Pipe()
            let output = Pipe()
            importer.standardInput = input
            importer.standardOutput = output
            importer.standardError = output
            try importer.run()
            let lines = ((Self.first + 1)...(Self.first + Self.added)).map { DaemonHarness.token($0) + "\n" }.joined()
            input.fileHandleForWriting.write(Data(lines.utf8))
            Thread.sleep(forTimeInterval: 1)
            let before = try #require(try store.campaign(connection, id: id)).sent
            // Past the workers' lock_timeout (10 s) with the import still reading its input.
            Thread.sleep(forTimeInterval: Self.importSeconds - 3)
            let during = try #require(try store.campaign(connection, id: id)).sent
            #expect(during - before >= Self.rate * 5, "progress written while the import read its input: \(before) → \(during)")
            Thread.sleep(forTimeInterval: 2)
            try input.fileHandleForWriting.close()
            let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            importer.waitUntilExit()
            #expect(importer.terminationStatus == 0 && text.contains("imported \(Self.added) targets"), "\(text)")

            let total = Self.first + Self.added
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done },
                    "\(daemon.text.suffix(3000))")
            let accepted = harness.mock.acceptedLog.map(\.token)
            #expect(accepted.count - Set(accepted).count == 0, "\(accepted.count - Set(accepted).count) notifications were sent again")
            #expect(Set(accepted).count == total, "\(Set(accepted).count) of \(total) targets accepted")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.targets == total && campaign.sent == total && campaign.failed == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_chunks WHERE leases > 1") == 0,
                    "chunks leased again: \(daemon.text.suffix(2000))")
            #expect(!daemon.text.contains("campaign worker") && !daemon.text.contains("chunk_taken_over"),
                    "the workers failed: \(daemon.text.suffix(3000))")
        }
    }

    /// A campaign's row held for longer than `lock_timeout` by another session (an operator's
    /// open transaction): the workers keep their chunks and progress, say so once, and send
    /// nothing twice.
    @Test func aCampaignRowLockedByAnotherSessionDelaysProgressWithoutSendingATargetTwice() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let store = CampaignStore()
            let count = 3000
            let id = try Self.runningCampaign(connection, count: count)

            let config = try harness.writeConfigFile()
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted > 0 }, "\(daemon.text.suffix(3000))")
            Thread.sleep(forTimeInterval: 1)
            let holder = try database.connect("pushd-tests-holder")
            defer { holder.close() }
            try holder.execute(script: "BEGIN")
            try holder.query("SELECT 1 FROM pushd.campaigns WHERE id = $1 FOR UPDATE", [id])
            Thread.sleep(forTimeInterval: Self.importSeconds)
            try holder.execute(script: "ROLLBACK")

            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done },
                    "\(daemon.text.suffix(3000))")
            let accepted = harness.mock.acceptedLog.map(\.token)
            #expect(accepted.count - Set(accepted).count == 0, "\(accepted.count - Set(accepted).count) notifications were sent again")
            #expect(Set(accepted).count == count)
            #expect(try store.campaign(connection, id: id)?.sent == count)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_chunks WHERE leases > 1") == 0,
                    "chunks leased again: \(daemon.text.suffix(2000))")
            let lines = daemon.text.split(separator: "\n").filter { $0.contains(#""event":"campaign_row_locked""#) }
            #expect(lines.count == 1, "\(daemon.text.suffix(3000))")
            #expect(!daemon.text.contains("chunk_taken_over"), "\(daemon.text.suffix(3000))")
            #expect(DaemonHarness.wait(seconds: 10) { daemon.metrics().contains(#"pushd_database_errors_total{reason="55"}"#) },
                    "\(daemon.metrics())")
        }
    }
}
