import APNsMock
import Posix
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Prune counters count tokens actually invalidated; a 410 for a token the app registered
/// again after APNs' timestamp is kept and counted apart. `campaign status`, `/metrics`
/// and `tokens prune-stats` must tell the same story.
@Suite(.serialized) struct PruneCountersTests {
    /// Runs the `pushd` binary with a database URL and returns its standard output.
    static func pushd(_ arguments: [String], database: IsolatedDatabase) throws -> String {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
        process.arguments = arguments
        process.environment = ProcessInfo.processInfo.environment.merging(["PUSHD_DATABASE_URL": database.url]) { $1 }
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    /// The sum of every sample of one metric family in a scrape.
    static func total(_ scrape: String, _ name: String) -> Double {
        scrape.split(separator: "\n").filter { $0.hasPrefix(name + "{") }.compactMap { Double($0.split(separator: " ").last ?? "") }.reduce(0, +)
    }

    @Test func campaignStatusMetricsAndPruneStatsCountOnlyTokensActuallyInvalidated() throws {
        let now = Int64(Timestamp().timeIntervalSince1970 * 1000)
        var unregistered = [String: Int64]()
        // 1…500: APNs learned of it after the registration: pruned.
        for seed in 1...500 { unregistered[DaemonHarness.token(seed)] = now + 60_000 }
        // 501…1000: registered again after APNs' timestamp: kept.
        for seed in 501...1000 { unregistered[DaemonHarness.token(seed)] = now - 3_600_000 }
        // 1001…1100: never registered (imported from a file): recorded as pruned.
        for seed in 1001...1100 { unregistered[DaemonHarness.token(seed)] = now + 60_000 }
        // 200 of 1101…3000, every ninth: 400 BadDeviceToken prunes whatever the timestamps.
        // Spread out: a run of 25 in a row with none accepted is taken as tokens of the other
        // environment, which are not pruned (BadDeviceTokenRunTests).
        let bad = Set((0..<200).map { DaemonHarness.token(1101 + $0 * 9) })
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(unregisteredTokens: unregistered, badDeviceTokens: bad))
            let connection = try database.connect()
            let registered = (1...1000).map(DaemonHarness.token) + (1101...3000).map(DaemonHarness.token)
            try connection.query("INSERT INTO pushd.device_tokens (app, token, environment) SELECT 'shop', t, 'sandbox' FROM unnest($1::text[]) t",
                                 [registered])
            let id = try CampaignLaneTests.campaign(connection, count: 3000)
            let port = try MixedFleetTests.freePort()
            let config = try String(contentsOfFile: try harness.writeConfigFile(), encoding: .utf8)
                .replacingOccurrences(of: "listen: 127.0.0.1:0", with: "listen: 127.0.0.1:\(port)")
            let path = harness.directory + "/prune.yml"
            try config.write(toFile: path, atomically: true, encoding: .utf8)
            let process = try DaemonProcessTests.start(config: path, log: harness.directory + "/pushd.log")
            defer { if process.isRunning { kill(process.processIdentifier, SIGTERM); _ = DaemonProcessTests.waitForExit(process, seconds: 10) } }
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })

            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.failedByReason == ["Unregistered": 1100, "BadDeviceToken": 200])
            #expect(campaign.pruned == 800)
            #expect(campaign.keptTokens == 500)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL") == 800)

            let status = try Self.pushd(["campaign", "status", String(id)], database: database)
            #expect(status.contains("800 (500 more kept: registered again after APNs' timestamp)"), "\(status)")
            let stats = try Self.pushd(["tokens", "prune-stats", "--app", "shop"], database: database)
            let shopRow = try #require(stats.split(separator: "\n").first { $0.hasPrefix("shop ") }, "\(stats)")
            #expect(shopRow.split(separator: " ", omittingEmptySubsequences: true)[4] == "800", "\(stats)")
            var scrape = ""
            #expect(DaemonHarness.wait(seconds: 10) {
                scrape = MixedFleetTests.scrape(port: port)
                // Both counted after the chunk's COMMIT, pruned first.
                return Self.total(scrape, "pushd_tokens_pruned_total") == 800 && Self.total(scrape, "pushd_tokens_kept_total") >= 500
            }, "\(scrape)")
            #expect(Self.total(scrape, "pushd_tokens_kept_total") == 500)

            // The next campaign from the same list leaves the pruned tokens out.
            let next = try store.create(connection, NewCampaign(app: "shop", name: "next", pushType: "alert",
                                                                payload: #"{"aps":{"alert":"again"}}"#))
            let again = try store.importTargets(connection, campaignID: next,
                                                targets: (1...3000).map { (token: DaemonHarness.token($0), payload: String?.none) })
            #expect(again == TargetImportResult(imported: 2200, duplicatesDropped: 0, prunedDropped: 800))
        }
    }

    /// A file-imported target APNs answers 410 Unregistered or 400 BadDeviceToken for is
    /// pruned like a registered one: in the campaign's counters, in `/metrics`, and in
    /// `pushd.device_tokens`, so that the next campaign leaves it out.
    @Test func fileImportedTargetsAnsweredUnregisteredOrBadDeviceTokenArePruned() throws {
        let learned = Int64(Timestamp().timeIntervalSince1970 * 1000)
        let unregistered = Dictionary(uniqueKeysWithValues: (1...30).map { (DaemonHarness.token($0), learned) })
        let bad = Set((31...40).map(DaemonHarness.token))
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(unregisteredTokens: unregistered, badDeviceTokens: bad))
            let connection = try database.connect()
            let id = try CampaignLaneTests.campaign(connection, count: 200)
            let pipeline = try harness.pipeline()
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == 160)
            #expect(campaign.failedByReason == ["Unregistered": 30, "BadDeviceToken": 10])
            #expect(campaign.pruned == 40)
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.device_tokens
                WHERE app = 'shop' AND environment = 'sandbox' AND invalidated_at IS NOT NULL AND invalid_reason IN ('Unregistered', 'BadDeviceToken')
                """) == 40)
        }
    }
}
