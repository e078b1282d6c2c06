import Foundation
import Posix
import Testing
@testable import Metrics

@Suite struct ProcessMetricsTests {
    private func value(_ name: String, in text: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.dropFirst(name.count + 1))
        }
        return nil
    }

    @Test func processMetricsReadPlausibleValuesFromProc() throws {
        let registry = MetricRegistry()
        try ProcessMetrics.register(in: registry)
        try ProcessMetrics.register(in: registry)
        let text = registry.expositionText()
        let now = Timestamp().timeIntervalSince1970

        let resident = try #require(value("process_resident_memory_bytes", in: text))
        #expect(resident > 1_000_000)
        #expect(try #require(value("process_virtual_memory_bytes", in: text)) >= resident)
        let start = try #require(value("process_start_time_seconds", in: text))
        #expect(start > now - 3600 && start <= now + 1)
        #expect(try #require(value("process_cpu_seconds_total", in: text)) > 0)
        let open = try #require(value("process_open_fds", in: text))
        #expect(open >= 3)
        #expect(try #require(value("process_max_fds", in: text)) >= open)
        #expect(text.contains("# TYPE process_cpu_seconds_total counter\n"))
    }
}
