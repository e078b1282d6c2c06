import Foundation
import Testing

/// The alert rules fire on the situations they are written for (`promtool test rules`).
@Suite struct AlertRuleTests {
    @Test func workOfAnAppNoRunningInstanceIsConfiguredForPagesAndAServedAppDoesNot() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/promtool")
        process.arguments = ["test", "rules", DeployFilesTests.root.appendingPathComponent("deploy/prometheus/pushd-alerts.test.yml").path]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        #expect(process.terminationStatus == 0, "\(text)")
        #expect(text.contains("SUCCESS"))
    }
}
