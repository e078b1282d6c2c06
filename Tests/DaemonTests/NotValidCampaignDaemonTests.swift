import Foundation
import APNsMock
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// The real pushd process against an upgraded database: a campaign created before a migration
/// added one of pushd's CHECKs NOT VALID breaks it, so PostgreSQL refuses every write of its row
/// (progress, pause, cancel). No target may be sent twice because its progress could not be
/// written, and the operator must learn which check refuses the row and how to end it.
@Suite(.serialized) struct NotValidCampaignDaemonTests {
    /// Targets of the campaign, each with its own (valid) payload: the campaign's own payload,
    /// which the check refuses, is sent to none of them.
    static let count = 2500

    /// A running campaign of `count` targets whose row then breaks `campaigns_payload_shape`, as
    /// shipped (dropped, the row written, added again NOT VALID, as after an upgrade).
    static func refusedCampaign(_ connection: PGConnection, rate: Int? = nil) throws -> Int64 {
        let store = CampaignStore()
        let id = try store.create(connection, NewCampaign(app: "shop", name: "old sale", payload: #"{"aps":{"alert":"fallback"}}"#,
                                                          rateLimit: rate))
        let targets = (1...count).map { (token: DaemonHarness.token($0), payload: Optional(#"{"aps":{"alert":"hi"}}"#)) }
        #expect(try store.importTargets(connection, campaignID: id, targets: targets).imported == count)
        #expect(try store.start(connection, id: id) == .running)
        try breakRow(connection, id: id, check: "campaigns_payload_shape", set: #"payload = '{"aps":{"badge":"three"}}'"#)
        return id
    }

    /// Writes `set` into campaign `id` past `check`, then adds the check again exactly as it was, NOT VALID.
    static func breakRow(_ connection: PGConnection, id: Int64, check: String, set: String) throws {
        let definition = try connection.query("""
            SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1 AND conrelid = 'pushd.campaigns'::regclass
            """, [check]).require(String.self, row: 0, column: 0)
        #expect(definition.hasSuffix("NOT VALID"), "\(check) is shipped NOT VALID: \(definition)")
        _ = try connection.execute(script: "ALTER TABLE pushd.campaigns DROP CONSTRAINT \(check)")
        try connection.query("UPDATE pushd.campaigns SET \(set) WHERE id = $1", [id])
        _ = try connection.execute(script: "ALTER TABLE pushd.campaigns ADD CONSTRAINT \(check) \(definition)")
    }

    /// Runs `pushd <arguments>` against `database`; returns its exit status and output.
    static func command(_ arguments: [String], _ database: IsolatedDatabase) throws -> (status: Int32, output: String) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
        process.arguments = arguments + ["--database-url", database.url]
        process.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    @Test func aCampaignWhoseRowACheckRefusesSendsEachTargetOnceAndIsHeldLoudly() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let id = try Self.refusedCampaign(connection)

            // Leases of 10 s, renewed every 2 s: a lease keeper held up for 2 s on a loaded machine
            // does not let one run out under its worker (which would rightly lease it again).
            let config = try harness.writeConfigFile()
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: harness.directory + "/pushd.log")
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted > 0 }, "\(daemon.text.suffix(3000))")
            // Over two leases' worth of time after the first checkpoint: a chunk whose progress
            // was lost would be leased and sent again.
            Thread.sleep(forTimeInterval: 25)
            let accepted = harness.mock.acceptedLog.map(\.token)
            #expect(accepted.count == Set(accepted).count, "\(accepted.count - Set(accepted).count) notifications were sent again")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_chunks WHERE leases > 1") == 0,
                    "chunks leased again: \(daemon.text.suffix(2000))")
            // Every answer is recorded: with the hold, since the row cannot take it.
            #expect(try DaemonHarness.count(connection, "SELECT coalesce(sum(sent), 0) FROM pushd.campaign_refusals") == accepted.count)

            let lines = daemon.text.split(separator: "\n").filter { $0.contains(#""event":"campaign_refused""#) }
            #expect(lines.count == 1, "\(daemon.text.suffix(3000))")
            #expect(lines.first?.contains("campaigns_payload_shape") == true && lines.first?.contains(#""campaign":\#(id)"#) == true,
                    "\(lines)")
            #expect(!daemon.text.contains("campaign worker"), "the worker failed: \(daemon.text.suffix(3000))")
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_campaigns{status="refused"} 1"#)
            }, "\(daemon.metrics())")
            // Nothing sends its remaining targets while it is held: they are refused, not due, and
            // /readyz names the hold (still ready: the rest sends). Before, they were the campaign
            // lane's depth and /readyz said nothing of it.
            let scrape = daemon.metrics()
            #expect(scrape.contains(#"pushd_queue_app_depth{app="shop",lane="campaign"} 0"#), "\(scrape)")
            #expect(scrape.contains(#"pushd_campaign_targets_refused{app="shop"} \#(Self.count - accepted.count)"#), "\(scrape)")
            var readyz = ""
            #expect(DaemonHarness.wait(seconds: 30) {
                readyz = daemon.readyz()
                return readyz.contains("held: campaign \(id) of app shop: CHECK campaigns_payload_shape of pushd.campaigns refuses its row")
            }, "\(readyz)")
            #expect(readyz.hasPrefix("ready"), "\(readyz)")

            for action in ["pause", "cancel"] {
                let run = try Self.command(["campaign", action, String(id)], database)
                #expect(run.status != 0)
                #expect(run.output.contains("cannot \(action) campaign \(id)") && run.output.contains("CHECK campaigns_payload_shape")
                        && run.output.contains("pushd.campaigns.payload") && run.output.contains("UPDATE pushd.campaigns"),
                        "\(run.output)")
            }

            let shown = try Self.command(["campaign", "status", String(id)], database)
            #expect(shown.status == 0 && shown.output.contains("held:") && shown.output.contains("CHECK campaigns_payload_shape"),
                    "\(shown.output)")
            let fleet = try Self.command(["status"], database)
            #expect(fleet.output.contains("campaign \(id) of app shop is held and sends nothing: CHECK campaigns_payload_shape"),
                    "\(fleet.output)")
            #expect(fleet.output.contains("its \(Self.count - accepted.count) remaining target(s) are counted as refused, not due"), "\(fleet.output)")

            // The operator corrects the column: the hold ends, the rest is sent, nothing twice.
            try connection.query(#"UPDATE pushd.campaigns SET payload = '{"aps":{"alert":"fallback"}}' WHERE id = $1"#, [id])
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done },
                    "\(daemon.text.suffix(3000))")
            let all = harness.mock.acceptedLog.map(\.token)
            #expect(all.count == Self.count && Set(all).count == Self.count)
            #expect(try store.campaign(connection, id: id)?.sent == Self.count)
            #expect(DaemonHarness.wait(seconds: 30) { !daemon.readyz().contains("held: campaign") }, "\(daemon.readyz())")
        }
    }
}
