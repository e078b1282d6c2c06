import Foundation
import Testing

/// The shipped operations files must load in the tools that read them.
@Suite struct DeployFilesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func alertRulesPassPromtool() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/promtool")
        process.arguments = ["check", "rules", Self.root.appendingPathComponent("deploy/prometheus/pushd-alerts.yml").path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(text)")
        #expect(text.contains("SUCCESS"))
    }

    @Test func dashboardIsJSONWithPanels() throws {
        let data = try Data(contentsOf: Self.root.appendingPathComponent("deploy/grafana/pushd-dashboard.json"))
        let dashboard = try #require(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try #require(dashboard["panels"] as? [[String: Any]])
        #expect(panels.count >= 10)
        for panel in panels {
            let targets = try #require(panel["targets"] as? [[String: Any]])
            #expect(targets.allSatisfy { ($0["expr"] as? String)?.contains("pushd_") == true || ($0["expr"] as? String)?.contains("process_") == true })
        }
    }
}
