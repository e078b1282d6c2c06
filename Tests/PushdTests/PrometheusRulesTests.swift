import Foundation
import Testing

/// deploy/prometheus passes promtool: the scrape configuration loads, and the alert rules'
/// unit tests pass and cover every alert, firing and silent.
@Suite struct PrometheusRulesTests {
    static let rules = "deploy/prometheus/pushd-alerts.yml"
    static let ruleTests = "deploy/prometheus/pushd-alerts.test.yml"

    @Test func scrapeConfigurationPassesPromtoolCheckConfig() throws {
        let result = try DeployTool.run("/usr/bin/promtool", ["check", "config", DeployTool.path("deploy/prometheus/prometheus.yml")])
        #expect(result.status == 0, "\(result.output)\(result.errors)")
        #expect(result.output.contains("is valid prometheus config file syntax"))
    }

    @Test func alertRuleTestsPassPromtoolTestRules() throws {
        let result = try DeployTool.run("/usr/bin/promtool", ["test", "rules", "pushd-alerts.test.yml"],
                                        in: DeployTool.path("deploy/prometheus"))
        #expect(result.status == 0, "\(result.output)\(result.errors)")
        #expect(result.output.contains("SUCCESS"))
    }

    /// promtool runs the cases it is given and says nothing of alerts without one: an
    /// alert added to the rules without a firing and a silent case fails here.
    @Test func everyAlertHasAFiringAndASilentRuleTest() throws {
        let alerts = try Self.alertNames()
        #expect(alerts.count >= 9)
        let cases = try Self.ruleTestCases()
        for alert in alerts {
            let mine = cases.filter { $0.alert == alert }
            #expect(mine.contains { $0.fires }, "\(alert) has no rule test in which it fires (\(Self.ruleTests))")
            #expect(mine.contains { !$0.fires }, "\(alert) has no rule test in which it stays silent (\(Self.ruleTests))")
        }
        let unknown = Set(cases.map(\.alert)).subtracting(alerts)
        #expect(unknown.isEmpty, "rule tests name alerts that \(Self.rules) lacks: \(unknown.sorted())")
    }

    static func alertNames() throws -> Set<String> {
        let documents = try DeployTool.yamlDocuments(rules)
        let file = try #require(documents.first as? [String: Any])
        let groups = try #require(file["groups"] as? [[String: Any]])
        var names = Set<String>()
        for group in groups {
            for rule in group["rules"] as? [[String: Any]] ?? [] {
                if let alert = rule["alert"] as? String { names.insert(alert) }
            }
        }
        return names
    }

    static func ruleTestCases() throws -> [(alert: String, fires: Bool)] {
        let documents = try DeployTool.yamlDocuments(ruleTests)
        let file = try #require(documents.first as? [String: Any])
        let tests = try #require(file["tests"] as? [[String: Any]])
        var cases = [(alert: String, fires: Bool)]()
        for test in tests {
            for check in test["alert_rule_test"] as? [[String: Any]] ?? [] {
                guard let alert = check["alertname"] as? String else { continue }
                let expected = check["exp_alerts"] as? [Any] ?? []
                cases.append((alert, !expected.isEmpty))
            }
        }
        return cases
    }
}
