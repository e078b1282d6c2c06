import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A rate-capped campaign takes what its cap needs of the campaign workers, not all of them:
/// a newer uncapped campaign is sent at full speed meanwhile, and the capped one keeps its pace.
@Suite(.serialized) struct CappedCampaignFairnessTests {
    @Test func anOlderCappedCampaignLeavesTheWorkersToANewerUncappedOne() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let store = CampaignStore()
            // Four campaign workers; the app `shop` capped at 20/s by its `campaign_rate` (which
            // the lease schedule does not know), a second app `news` uncapped.
            let rate = 20
            var yaml = try String(contentsOfFile: try harness.writeConfigFile(), encoding: .utf8)
            yaml = yaml.replacingOccurrences(of: "campaigns:\n", with: "workers:\n  campaign: 4\ncampaigns:\n")
            let shop = "    bundle_id: \(DaemonHarness.bundleID)\n"
            #expect(yaml.contains(shop))
            yaml = yaml.replacingOccurrences(of: shop, with: shop + "    campaign_rate: \(rate)\n")
            let token = yaml[yaml.range(of: "    token:\n")!.lowerBound...]
            yaml += "\n  - name: news\n    bundle_id: com.example.news\n    environment: sandbox\n" + token
            let config = harness.directory + "/fair.yml"
            try yaml.write(toFile: config, atomically: true, encoding: .utf8)

            // 80 s of sending at 20/s, in chunks of 10.
            let capped = try store.create(connection, NewCampaign(app: "shop", name: "slow", pushType: "alert",
                                                                  payload: #"{"aps":{"alert":"slow"}}"#))
            let cappedTokens = (1...1600).map { DaemonHarness.token($0) }
            try store.importTargets(connection, campaignID: capped, targets: cappedTokens.map { ($0, nil) }, chunkSize: 10)
            #expect(try store.start(connection, id: capped) == .running)

            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            let cappedSet = Set(cappedTokens)
            func cappedAccepted() -> Int { harness.mock.acceptedLog.lazy.filter { cappedSet.contains($0.token) }.count }
            #expect(DaemonHarness.wait(seconds: 15) { cappedAccepted() > 0 })
            let firstCapped = Timestamp()
            // Long enough for every worker to have come free and leased again.
            Thread.sleep(forTimeInterval: 3)

            let uncappedTokens = (1...300).map { DaemonHarness.token(100_000 + $0) }
            let uncapped = try store.create(connection, NewCampaign(app: "news", name: "fast", pushType: "alert",
                                                                    payload: #"{"aps":{"alert":"fast"}}"#))
            try store.importTargets(connection, campaignID: uncapped, targets: uncappedTokens.map { ($0, nil) }, chunkSize: 50)
            #expect(try store.start(connection, id: uncapped) == .running)
            let started = Timestamp()
            let uncappedSet = Set(uncappedTokens)
            func uncappedAccepted() -> Int { Set(harness.mock.acceptedLog.lazy.map(\.token).filter { uncappedSet.contains($0) }).count }
            let sentInTime = DaemonHarness.wait(seconds: 5) { uncappedAccepted() == uncappedTokens.count }
            let took = Timestamp().timeIntervalSince(started)
            #expect(sentInTime, "\(uncappedAccepted()) of \(uncappedTokens.count) targets of the uncapped campaign sent in \(took) s behind a capped one")
            #expect(try DaemonHarness.wait(seconds: 5) { try store.campaign(connection, id: uncapped)?.status == .done })

            // The capped campaign keeps its pace meanwhile, and never beats it.
            Thread.sleep(forTimeInterval: 2)
            let elapsed = Timestamp().timeIntervalSince(firstCapped)
            let sent = cappedAccepted()
            print("capped at \(rate)/s: \(sent) accepted in \(String(format: "%.1f", elapsed)) s; uncapped: \(uncappedAccepted()) in \(String(format: "%.2f", took)) s")
            #expect(Double(sent) <= Double(rate) * (elapsed + 1), "\(sent) capped targets accepted in \(elapsed) s at a cap of \(rate)/s")
            #expect(Double(sent) >= Double(rate) * (elapsed - 2), "\(sent) capped targets accepted in \(elapsed) s at a cap of \(rate)/s")
        }
    }
}
