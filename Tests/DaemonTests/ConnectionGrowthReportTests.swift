import Dispatcher
import Foundation
import Metrics
import Testing
@testable import pushd

/// A connection added by growth and judged: pushd counts the verdict in
/// pushd_apns_connection_growths_total and writes one connection_growth line with the rates.
@Suite struct ConnectionGrowthReportTests {
    private func report(_ verdict: ConnectionGrowthVerdict) throws -> (exposition: String, lines: [[String: Any]]) {
        try report { $0.connectionGrowthJudged(verdict) }
    }

    private func report(_ body: (AppDispatcherMetrics) -> Void) throws -> (exposition: String, lines: [[String: Any]]) {
        let metrics = try PushdMetrics(version: "test")
        let path = NSTemporaryDirectory() + "pushd-growth-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let hook = AppDispatcherMetrics(app: "shop", environment: "production", lane: Lane.campaign.rawValue, metrics: metrics,
                                        logger: Logger(level: .info, sink: FileLogSink(path: path)))
        body(hook)
        let lines = try String(contentsOfFile: path, encoding: .utf8).split(separator: "\n").map {
            try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] ?? [:]
        }
        return (metrics.registry.expositionText(), lines)
    }

    @Test func aConnectionGivenUpIsCountedAndLoggedWithTheRatesAndTheHoldOff() throws {
        let (text, lines) = try report(ConnectionGrowthVerdict(kept: false, connections: 1, ratePerSecondBefore: 9_800,
                                                               ratePerSecondAfter: 10_100, ratePerSecondRequired: 14_700,
                                                               growthHeldOffMilliseconds: 60_000))
        #expect(text.contains("pushd_apns_connection_growths_total{app=\"shop\",environment=\"production\",result=\"given_up\"} 1"))
        #expect(text.contains("pushd_apns_connection_growths_total{app=\"shop\",environment=\"production\",result=\"kept\"} 0"))
        #expect(lines.count == 1)
        let line = try #require(lines.first)
        #expect(line["event"] as? String == "connection_growth")
        #expect(line["result"] as? String == "given_up")
        #expect(line["lane"] as? String == "campaign")
        #expect(line["rate_before"] as? Int == 9_800 && line["rate_after"] as? Int == 10_100 && line["rate_needed"] as? Int == 14_700)
        #expect(line["held_off_ms"] as? Int == 60_000)
        let message = try #require(line["msg"] as? String)
        #expect(message.contains("did not raise the answer rate") && message.contains("adds none for 60 s"), "\(message)")
    }

    @Test func aConnectionKeptIsCountedAsKept() throws {
        let (text, lines) = try report(ConnectionGrowthVerdict(kept: true, connections: 3, ratePerSecondBefore: 10_000,
                                                               ratePerSecondAfter: 14_000, ratePerSecondRequired: 12_500,
                                                               growthHeldOffMilliseconds: 0))
        #expect(text.contains("pushd_apns_connection_growths_total{app=\"shop\",environment=\"production\",result=\"kept\"} 1"))
        #expect(text.contains("pushd_apns_connection_growths_total{app=\"shop\",environment=\"production\",result=\"given_up\"} 0"))
        #expect(lines.first?["result"] as? String == "kept")
        #expect(lines.first?["connections"] as? Int == 3)
    }

    @Test func aTrialsStartIsCountedAndLoggedWithWhatTriggeredIt() throws {
        let (text, lines) = try report {
            $0.connectionGrowthStarted(ConnectionGrowthStart(connectionsBefore: 1, connections: 2, requestsWaiting: 740,
                                                             waitedMilliseconds: 260, ratePerSecondBefore: 1_403, streamsOnTrial: 125))
        }
        #expect(text.contains("pushd_apns_connection_growths_total{app=\"shop\",environment=\"production\",result=\"started\"} 1"))
        #expect(text.contains("pushd_apns_connection_growths_total{app=\"shop\",environment=\"production\",result=\"kept\"} 0"))
        let line = try #require(lines.first)
        #expect(lines.count == 1)
        #expect(line["level"] as? String == "info")
        #expect(line["event"] as? String == "connection_growth" && line["result"] as? String == "started")
        #expect(line["trigger"] as? String == "requests_waiting_for_a_stream")
        #expect(line["requests_waiting"] as? Int == 740 && line["waited_ms"] as? Int == 260)
        #expect(line["connections_before"] as? Int == 1 && line["connections"] as? Int == 2)
        #expect(line["rate_before"] as? Int == 1_403 && line["streams_on_trial"] as? Int == 125)
        let message = try #require(line["msg"] as? String)
        #expect(message.contains("740 notifications") && message.contains("(1 → 2)") && message.contains("125 streams"), "\(message)")
    }

    @Test func aTrialAbandonedIsCountedApartAndLoggedWithItsReason() throws {
        let (text, lines) = try report(ConnectionGrowthVerdict(kept: false, abandoned: .workRanOut, connections: 1, ratePerSecondBefore: 1_403,
                                                               ratePerSecondAfter: 0, ratePerSecondRequired: 1_578,
                                                               growthHeldOffMilliseconds: 0))
        #expect(text.contains("pushd_apns_connection_growths_total{app=\"shop\",environment=\"production\",result=\"abandoned\"} 1"))
        #expect(text.contains("pushd_apns_connection_growths_total{app=\"shop\",environment=\"production\",result=\"given_up\"} 0"))
        let line = try #require(lines.first)
        #expect(line["result"] as? String == "abandoned" && line["reason"] as? String == "work_ran_out")
        #expect(line["held_off_ms"] as? Int == 0)
        let message = try #require(line["msg"] as? String)
        #expect(message.contains("was not judged") && message.contains("ran out of notifications"), "\(message)")
    }
}
