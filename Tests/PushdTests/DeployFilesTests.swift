import Foundation
import PushdTestSupport
import Testing

/// The shipped operations files must load in the tools that read them.
@Suite struct DeployFilesTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    @Test func alertRulesPassPromtool() throws {
        let process = ChildProcess()
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

    /// The container image, the demo, `make release` and the benchmarks ship and measure one
    /// build: scripts/build-release.sh, the Swift runtime linked in by the toolchain's lld.
    @Test func everyReleaseBuildIsTheReleaseScript() throws {
        func text(_ path: String) throws -> String {
            try String(contentsOf: Self.root.appendingPathComponent(path), encoding: .utf8)
        }
        let script = try text("scripts/build-release.sh")
        for flag in ["--static-swift-stdlib", "-use-ld=lld", "pack-relative-relocs", "-c release"] {
            #expect(script.contains(flag), "scripts/build-release.sh lacks \(flag)")
        }
        let users = ["Makefile", "scripts/demo.sh", "deploy/container/Containerfile", "Benchmarks/bench.sh",
                     "Benchmarks/DaemonBench/run.sh", "Benchmarks/DaemonBench/ratecap.sh", "Benchmarks/DaemonBench/throttled.sh",
                     "Benchmarks/ScrapeFlood/run.sh"]
        for path in users {
            let file = try text(path)
            #expect(file.contains("scripts/build-release.sh"), "\(path) does not build with scripts/build-release.sh")
            #expect(!file.contains("swift build -c release"), "\(path) builds release on its own")
            #expect(!file.contains("release-static"), "\(path) names the former release-static target")
        }
        #expect(try text("Makefile").contains("\nrelease:\n\tbash scripts/build-release.sh"))
    }

    /// The image builds with the toolchain series the suite runs on (no other has built this
    /// code), from the sources only: a host's .build must not go into the build context.
    @Test func containerImageBuildsWithTheTestedToolchainFromTheSourcesOnly() throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = ["swift", "--version"]
        var environment = ProcessInfo.processInfo.environment
        environment["PATH"] = (environment["PATH"] ?? "/usr/bin:/bin") + ":/opt/swift/usr/bin"
        process.environment = environment
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        process.waitUntilExit()
        let version = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        // "Swift version 6.3.1 (swift-6.3.1-RELEASE)": the series is 6.3.
        let words = version.split(whereSeparator: { $0 == " " || $0 == "\n" })
        let at = try #require(words.indices.first { words[$0] == "version" && $0 > 0 && words[$0 - 1] == "Swift" })
        let series = words[at + 1].split(separator: ".").prefix(2).joined(separator: ".")
        let containerfile = try String(contentsOf: Self.root.appendingPathComponent("deploy/container/Containerfile"), encoding: .utf8)
        let from = containerfile.split(separator: "\n").first { $0.hasPrefix("FROM ") && $0.contains("AS build") }
        #expect(from == "FROM docker.io/library/swift:\(series)-bookworm AS build", "toolchain \(version)")
        let ignored = try String(contentsOf: Self.root.appendingPathComponent(".dockerignore"), encoding: .utf8)
            .split(separator: "\n").map(String.init)
        for path in [".build/", ".git/"] {
            #expect(ignored.contains(path), ".dockerignore lacks \(path)")
        }
    }
}
