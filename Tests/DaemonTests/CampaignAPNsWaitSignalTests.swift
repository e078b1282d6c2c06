import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// What says that campaigns wait for APNs stays true and short: the gauge forgets a campaign
/// that stopped waiting because it was cancelled, and many campaigns waiting through one
/// outage are told in one line per app a minute, not one per campaign. The real binary, the
/// real mock answering 503 to everything.
@Suite(.serialized) struct CampaignAPNsWaitSignalTests {
    static let gauge = "pushd_campaigns_waiting_for_apns "

    static func gaugeValue(_ daemon: TLSFailurePausesAppTests.Daemon) -> String? {
        daemon.metrics().split(separator: "\n").first { $0.hasPrefix(gauge) }.map { String($0.dropFirst(gauge.count)) }
    }

    static func lines(_ daemon: TLSFailurePausesAppTests.Daemon, _ event: String) -> [Substring] {
        daemon.text.split(separator: "\n").filter { $0.contains("\"event\":\"\(event)\"") }
    }

    /// The log without the probes' lines, for a failure's message.
    static func story(_ daemon: TLSFailurePausesAppTests.Daemon) -> String {
        String(daemon.text.split(separator: "\n").filter { !$0.contains("\"event\":\"outage_probe\"") }.joined(separator: "\n").suffix(4000))
    }

    /// A running campaign to the app's environment: its chunks stop while that environment is
    /// down, rather than set each target aside (`CampaignWorker.stopWhileDown`).
    static func campaign(_ connection: PGConnection, first: Int, count: Int) throws -> Int64 {
        let store = CampaignStore()
        let id = try store.create(connection, NewCampaign(app: "shop", name: "sale", environment: "sandbox",
                                                          payload: #"{"aps":{"alert":"hi"}}"#))
        let targets = (first..<first + count).map { (token: DaemonHarness.token($0), payload: String?.none) }
        #expect(try store.importTargets(connection, campaignID: id, targets: targets).imported == count)
        #expect(try store.start(connection, id: id) == .running)
        return id
    }

    /// A daemon sending until APNs accepted `accepted` notifications, then answering 503 to
    /// everything, a probe a second.
    static func daemonInAnOutage(_ harness: DaemonHarness, after accepted: Int = 2000) throws -> TLSFailurePausesAppTests.Daemon {
        let config = try APNsStormTests.configFile(harness, baseMilliseconds: 1000, maxMilliseconds: 600_000,
                                                   extra: "  outage_probe_ms: 1000\n")
        let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: harness.directory + "/pushd.log")
        #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= accepted })
        try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
        return daemon
    }

    /// A campaign cancelled while it waits for APNs waits no more: the gauge drops to 0 and
    /// stays there once APNs answers. It used to keep the campaign for good, nothing of it
    /// left to send on the lane to show APNs back.
    @Test func theWaitingGaugeForgetsACampaignCancelledDuringTheOutage() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            // Large enough that most of it is still unsent when the lane is seen down.
            let id = try Self.campaign(connection, first: 1, count: 60_000)
            let daemon = try Self.daemonInAnOutage(harness)
            #expect(DaemonHarness.wait(seconds: 20) { Self.gaugeValue(daemon) == "1" }, "\(Self.story(daemon))")

            // What `pushd campaign cancel` does.
            #expect(try CampaignStore().cancel(connection, id: id) == .cancelled)
            _ = try CampaignStore().dropTargets(connection, id: id)
            try harness.mock.setFaults(.none)
            #expect(DaemonHarness.wait(seconds: 15) { Self.gaugeValue(daemon) == "0" },
                    "pushd_campaigns_waiting_for_apns is \(Self.gaugeValue(daemon) ?? "absent") 15 s after the campaign was cancelled and APNs answered again")
        }
    }

    /// Four campaigns of one app wait through one outage and are leased again after it: one
    /// `campaign_waiting_for_apns` line (the others counted in the next) and one
    /// `campaign_apns_back` line naming them all, instead of one per campaign each.
    @Test func manyCampaignsWaitingThroughOneOutageAreToldInOneLineEachWay() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            defer { connection.close() }
            let count = 4
            let ids = try (0..<count).map { try Self.campaign(connection, first: 1 + $0 * 15_000, count: 15_000) }
            let daemon = try Self.daemonInAnOutage(harness)
            #expect(DaemonHarness.wait(seconds: 30) { Self.gaugeValue(daemon) == "\(count)" },
                    "pushd_campaigns_waiting_for_apns is \(Self.gaugeValue(daemon) ?? "absent"): \(Self.story(daemon))")
            let waiting = Self.lines(daemon, "campaign_waiting_for_apns")
            #expect(waiting.count == 1, "\(waiting.count) campaign_waiting_for_apns lines for \(count) campaigns of one app: \(waiting)")

            try harness.mock.setFaults(.none)
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 60) { try ids.allSatisfy { try store.campaign(connection, id: $0)?.status == .done } })
            let back = Self.lines(daemon, "campaign_apns_back")
            #expect(back.count == 1, "\(back.count) campaign_apns_back lines for \(count) campaigns of one app: \(back)")
            #expect(back.first?.contains("of app shop are leased again: APNs answers again") == true, "\(back)")
        }
    }
}
