import Metrics
import Posix
import Testing
@testable import pushd

/// What the metrics port refuses or ends is counted, each one, and said in one warning line at
/// most a minute: the first at once, then the counts since the previous line.
@Suite struct EndpointRefusalLogTests {
    @Test func everyRefusalCountsAndOneLineAMinuteSaysHowManyOfEachReason() throws {
        let metrics = try PushdMetrics(version: "test")
        let sink = MemoryLogSink()
        let log = EndpointRefusalLog(metrics: metrics, logger: Logger(level: .info, sink: sink))
        #expect(metrics.registry.expositionText().contains("pushd_metrics_connections_refused_total{reason=\"answer_timeout\"} 0\n"),
                "each reason's series exists before the first refusal")
        let start = Timestamp()
        log.record(.perAddressLimit, now: start)
        log.record(.requestTimeout, now: start.addingTimeInterval(1))
        log.record(.requestTimeout, now: start.addingTimeInterval(30))
        log.record(.answerTimeout, now: start.addingTimeInterval(61))
        log.record(.answerTimeout, now: start.addingTimeInterval(62))
        let text = metrics.registry.expositionText()
        #expect(text.contains("pushd_metrics_connections_refused_total{reason=\"per_address_limit\"} 1\n"))
        #expect(text.contains("pushd_metrics_connections_refused_total{reason=\"request_timeout\"} 2\n"))
        #expect(text.contains("pushd_metrics_connections_refused_total{reason=\"answer_timeout\"} 2\n"))
        let lines = sink.lines
        #expect(lines.count == 2, "\(lines)")
        #expect(lines.first?.contains("refused or ended 1 connection(s)") == true && lines.first?.contains("per_address_limit 1") == true, "\(lines)")
        #expect(lines.last?.contains("refused or ended 3 connection(s)") == true, "\(lines)")
        #expect(lines.last?.contains("request_timeout 2, answer_timeout 1") == true, "\(lines)")
        #expect(lines.allSatisfy { $0.contains("\"event\":\"metrics_connections_refused\"") }, "\(lines)")
    }
}
