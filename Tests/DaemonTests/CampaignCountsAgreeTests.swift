import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Every count of a campaign's targets follows one definition (docs/metrics.md): remaining is
/// what has no outcome yet, of every campaign not over; due is what may be sent now, the
/// remaining targets of running campaigns and of scheduled ones whose start time has come.
/// A paused campaign is remaining, not due; one scheduled later is remaining and scheduled; a
/// due one is aged from when it became due.
@Suite(.serialized) struct CampaignCountsAgreeTests {
    @Test func remainingAndDueAgreeAcrossMetricsAndStatusForPausedStartedAndLaterCampaigns() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let store = CampaignStore()
            func campaign(_ name: String, targets: ClosedRange<Int>, startAt: Timestamp? = nil) throws -> Int64 {
                let id = try store.create(connection, NewCampaign(app: "second", name: name, payload: #"{"aps":{"alert":"New"}}"#, startAt: startAt))
                try store.importTargets(connection, campaignID: id, targets: targets.map { (DaemonHarness.token($0), nil) })
                _ = try store.start(connection, id: id)
                return id
            }
            // App `second` is served by no instance here, so nothing starts or sends these.
            let paused = try campaign("paused", targets: 1...10)
            #expect(try store.pause(connection, id: paused) == .paused)
            let started = try campaign("started", targets: 101...107, startAt: Timestamp().addingTimeInterval(86_400))
            try connection.query("UPDATE pushd.campaigns SET start_at = now() - interval '90 seconds' WHERE id = \(started)")
            _ = try campaign("later", targets: 201...205, startAt: Timestamp().addingTimeInterval(2 * 86_400))

            let daemon = try TLSFailurePausesAppTests.Daemon(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            var metrics = ""
            #expect(DaemonHarness.wait(seconds: 15) {
                metrics = daemon.metrics()
                return metrics.contains("pushd_campaign_targets_remaining{")
            }, "\(daemon.text.suffix(2000))")
            #expect(metrics.contains(#"pushd_campaign_targets_remaining{app="second"} 22"#), "\(metrics)")
            #expect(metrics.contains(#"pushd_queue_app_depth{app="second",lane="campaign"} 7"#), "\(metrics)")
            // Its age follows the same definition of due: since its start time, 90 s ago, though
            // no worker has started it. Before, only running campaigns were aged: 0 here.
            let age = metrics.firstMatch(of: /pushd_queue_app_oldest_age_seconds\{app="second",lane="campaign"\} ([0-9.e+]+)/).flatMap { Double($0.1) }
            #expect((age ?? 0) >= 90 && (age ?? 0) < 150, "\(String(describing: age)) in \(metrics)")

            let status = try FleetStatusTests.status(database)
            let queue = status.json["queue"] as? [[String: Any]] ?? []
            let lane = queue.first { $0["app"] as? String == "second" && $0["lane"] as? String == "campaign" }
            #expect(lane?["due"] as? Int == 7 && lane?["scheduled"] as? Int == 5, "\(status.text)")
            #expect((lane?["oldest_due_seconds"] as? Double ?? 0) >= 90, "\(status.text)")
            #expect(status.problems.contains { $0.hasPrefix("7 due notification(s) of app second,") }, "\(status.problems)")
            #expect(daemon.process.isRunning)
        }
    }
}
