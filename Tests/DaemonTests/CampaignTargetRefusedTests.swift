import Foundation
import PushdTestSupport
import QueueStore
import Testing

/// The real pushd process: a campaign target whose notification the rules refuse (here a payload
/// imported past `pushd campaign import`'s check, over the push type's limit) fails with the
/// label `Invalid`, and the log says what to fix, once a minute per campaign with the count;
/// the summary line counts them with the other dead letters.
@Suite(.serialized) struct CampaignTargetRefusedTests {
    @Test func aTargetRefusedAtSendIsLoggedWithItsDetail() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "sale", payload: #"{"aps":{"alert":"hi"}}"#))
            let large = #"{"aps":{"alert":""# + String(repeating: "a", count: 5000) + #""}}"#
            let targets = [(token: DaemonHarness.token(1), payload: String?.none),
                           (token: DaemonHarness.token(2), payload: Optional(large)),
                           (token: DaemonHarness.token(3), payload: Optional(large))]
            #expect(try store.importTargets(connection, campaignID: id, targets: targets).imported == 3)
            #expect(try store.start(connection, id: id) == .running)

            let config = try harness.writeConfigFile()
            // A summary every 2 s, which counts what was given up on.
            let yaml = try String(contentsOfFile: config, encoding: .utf8)
                .replacingOccurrences(of: "  level: info\n", with: "  level: info\n  summary_interval_s: 2\n")
            try yaml.write(toFile: config, atomically: true, encoding: .utf8)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: harness.directory + "/pushd.log")
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: id)?.status == .done },
                    "\(daemon.text.suffix(3000))")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == 1 && campaign.failed == 2)

            let lines = daemon.text.split(separator: "\n").filter { $0.contains(#""event":"campaign_target_refused""#) }
            // Both targets fail within a minute: one line, for the first.
            #expect(lines.count == 1, "\(daemon.text.suffix(3000))")
            let line = String(lines.first ?? "")
            #expect(line.contains("campaign \(id) of app shop: target 2 of chunk 0 (token \(DaemonHarness.token(2).prefix(8))...) cannot be sent and failed as Invalid: ")
                    && line.contains("5020 bytes; alert payloads may have at most 4096"), "\(line)")
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_dead_letters_total{app="shop",lane="campaign",reason="Invalid"} 2"#)
            }, "\(daemon.metrics().split(separator: "\n").filter { $0.contains("dead_letters") })")
            // The summary line counts them too, as it counts every lane's dead letters.
            func invalidInSummaries() -> Int {
                daemon.text.split(separator: "\n").filter { $0.contains(#""event":"summary""#) }.reduce(0) { sum, line in
                    guard let range = line.range(of: #""dead_letters_by_reason":"Invalid="#) else { return sum }
                    return sum + (Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0)
                }
            }
            #expect(DaemonHarness.wait(seconds: 10) { invalidInSummaries() == 2 }, "\(daemon.text.suffix(3000))")
        }
    }
}
