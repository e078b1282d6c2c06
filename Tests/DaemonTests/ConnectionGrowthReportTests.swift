import Dispatcher
import Foundation
import Metrics
import Testing
@testable import pushd

/// A connection added by growth and judged: pushd counts the verdict in
/// pushd_apns_connection_growths_total and writes one connection_growth line with the rates.
@Suite struct ConnectionGrowthReportTests {
    private func report(_ verdict: ConnectionGrowthVerdict) throws -> (exposition: String, lines: [[String: Any]]) {
        let metrics = try PushdMetrics(version: "test")
        let path = NSTemporaryDirectory() + "pushd-growth-\(UUID().uuidString).log"
        defer { try? FileManager.default.removeItem(atPath: path) }
        let hook = AppDispatcherMetrics(app: "shop", environment: "production", lane: Lane.campaign.rawValue, metrics: metrics,
                                        logger: Logger(level: .info, sink: FileLogSink(path: path)))
        hook.connectionGrowthJudged(verdict)
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
}
