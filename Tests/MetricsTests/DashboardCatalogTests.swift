import Foundation
import Testing
@testable import Metrics

/// deploy/grafana/pushd-dashboard.json queries only metrics pushd exposes, and every
/// metric pushd exposes is on it or listed, with a reason, in
/// deploy/grafana/not-on-dashboard.txt.
@Suite struct DashboardCatalogTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Every PromQL expression of every panel.
    static func expressions() throws -> [String] {
        let data = try Data(contentsOf: root.appendingPathComponent("deploy/grafana/pushd-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        var panels = try #require(dashboard["panels"] as? [[String: Any]])
        // Rows may nest their panels.
        panels += panels.flatMap { $0["panels"] as? [[String: Any]] ?? [] }
        return panels.flatMap { ($0["targets"] as? [[String: Any]] ?? []).compactMap { $0["expr"] as? String } }
    }

    /// The metric names an expression reads: identifiers starting with pushd_ or process_,
    /// with a histogram's _bucket, _sum and _count series mapped to the family.
    static func metricNames(in expression: String, histograms: Set<String>) -> Set<String> {
        // Label values in quotes ("pushd") are not metric names: drop them first.
        let unquoted = expression.replacingOccurrences(of: "\"[^\"]*\"|'[^']*'", with: " ", options: .regularExpression)
        let words = unquoted.split { !($0.isLetter || $0.isNumber || $0 == "_" || $0 == ":") }
        return Set(words.map(String.init).filter { $0.hasPrefix("pushd_") || $0.hasPrefix("process_") }.map { word in
            for suffix in ["_bucket", "_sum", "_count"] where word.hasSuffix(suffix) {
                let family = String(word.dropLast(suffix.count))
                if histograms.contains(family) { return family }
            }
            return word
        })
    }

    /// name → reason, from the deliberately-left-out list ("name  why" per line, # comments).
    static func leftOut() throws -> [String: String] {
        let text = try String(contentsOf: root.appendingPathComponent("deploy/grafana/not-on-dashboard.txt"), encoding: .utf8)
        var entries = [String: String]()
        for line in text.split(separator: "\n") where !line.hasPrefix("#") && !line.trimmingCharacters(in: .whitespaces).isEmpty {
            let parts = line.split(separator: " ", maxSplits: 1)
            entries[String(parts[0])] = parts.count > 1 ? parts[1].trimmingCharacters(in: .whitespaces) : ""
        }
        return entries
    }

    static func catalog() throws -> (names: Set<String>, histograms: Set<String>) {
        let metrics = try PushdMetrics(version: "1.0.0")
        let text = metrics.registry.expositionText()
        let histograms = Set(text.split(separator: "\n").compactMap { line -> String? in
            let words = line.split(separator: " ")
            guard words.count == 4, words[0] == "#", words[1] == "TYPE", words[3] == "histogram" else { return nil }
            return String(words[2])
        })
        return (Set(metrics.registry.names), histograms)
    }

    @Test func everyMetricTheDashboardQueriesIsInTheCatalog() throws {
        let catalog = try Self.catalog()
        let expressions = try Self.expressions()
        #expect(expressions.count >= 12)
        for expression in expressions {
            let names = Self.metricNames(in: expression, histograms: catalog.histograms)
            #expect(!names.isEmpty, "a panel queries no pushd metric: \(expression)")
            let unknown = names.subtracting(catalog.names)
            #expect(unknown.isEmpty, "the dashboard queries \(unknown.sorted()), which pushd does not expose: \(expression)")
        }
    }

    @Test func everyCatalogMetricIsOnTheDashboardOrDeliberatelyLeftOut() throws {
        let catalog = try Self.catalog()
        let queried = Set(try Self.expressions().flatMap { Self.metricNames(in: $0, histograms: catalog.histograms) })
        let leftOut = try Self.leftOut()
        let missing = catalog.names.subtracting(queried).subtracting(leftOut.keys)
        #expect(missing.isEmpty, "neither on the dashboard nor in deploy/grafana/not-on-dashboard.txt: \(missing.sorted())")
        for (name, reason) in leftOut {
            #expect(catalog.names.contains(name), "not-on-dashboard.txt lists \(name), which pushd does not expose")
            #expect(!queried.contains(name), "not-on-dashboard.txt lists \(name), but the dashboard shows it")
            #expect(!reason.isEmpty, "not-on-dashboard.txt gives no reason for \(name)")
        }
    }

    @Test func metricNamesAreReadFromPromQL() {
        let histograms: Set<String> = ["pushd_apns_request_duration_seconds"]
        #expect(Self.metricNames(in: "histogram_quantile(0.99, sum by (le) (rate(pushd_apns_request_duration_seconds_bucket[5m])))",
                                 histograms: histograms) == ["pushd_apns_request_duration_seconds"])
        #expect(Self.metricNames(in: "rate(process_cpu_seconds_total{job=\"pushd_x\"}[$__rate_interval])", histograms: histograms)
                == ["process_cpu_seconds_total"])
        #expect(Self.metricNames(in: "sum(pushd_a) / sum(pushd_b_count)", histograms: histograms) == ["pushd_a", "pushd_b_count"])
    }
}
