import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A real Prometheus server (Debian's `prometheus`), configured from
/// deploy/prometheus/prometheus.yml, scrapes a running `pushd run`: the target comes up,
/// the alert rules load, and a counter that pushd moves is seen moving.
@Suite(.serialized) struct PrometheusScrapeTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The port pushd's metrics endpoint took, from its start-up log line.
    static func metricsPort(log: String) -> Int? {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        guard let range = text.range(of: "\"metrics\":\"127.0.0.1:[0-9]+\"", options: .regularExpression) else { return nil }
        return Int(text[range].dropFirst("\"metrics\":\"127.0.0.1:".count).dropLast())
    }

    /// One instant query against Prometheus's HTTP API: the first result's value, nil when
    /// the result is empty or Prometheus does not answer yet.
    static func query(_ expression: String, port: Int) -> Double? {
        guard let body = get("http://127.0.0.1:\(port)/api/v1/query", form: ["query=\(expression)"]),
              let answer = try? JSONSerialization.jsonObject(with: body) as? [String: Any],
              answer["status"] as? String == "success",
              let data = answer["data"] as? [String: Any],
              let result = (data["result"] as? [[String: Any]])?.first,
              let value = result["value"] as? [Any], value.count == 2,
              let text = value[1] as? String else { return nil }
        return Double(text)
    }

    static func get(_ url: String, form: [String] = []) -> Data? {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        process.arguments = ["-s", "--fail", "--max-time", "5", "-G"] + form.flatMap { ["--data-urlencode", $0] } + [url]
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return nil }
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return process.terminationStatus == 0 ? data : nil
    }

    @Test func prometheusScrapesPushdRunAndSeesItsCounterMove() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try harness.writeConfigFile()
            let log = harness.directory + "/pushd.log"
            let pushd = try DaemonProcessTests.start(config: config, log: log)
            defer {
                kill(pushd.processIdentifier, SIGTERM)
                if !DaemonProcessTests.waitForExit(pushd, seconds: 10) { kill(pushd.processIdentifier, SIGKILL) }
            }
            var pushdPort: Int?
            #expect(DaemonHarness.wait(seconds: 20) { pushdPort = Self.metricsPort(log: log); return pushdPort != nil })
            let target = try #require(pushdPort, "no metrics address in \(log)")

            // The shipped configuration, pointed at this pushd and scraping every second.
            let prometheusDirectory = harness.directory + "/prometheus"
            try FileManager.default.createDirectory(atPath: prometheusDirectory + "/data", withIntermediateDirectories: true)
            let shipped = try String(contentsOf: Self.root.appendingPathComponent("deploy/prometheus/prometheus.yml"), encoding: .utf8)
            #expect(shipped.contains("127.0.0.1:9464") && shipped.contains("scrape_interval: 15s"))
            let adapted = shipped.replacingOccurrences(of: "127.0.0.1:9464", with: "127.0.0.1:\(target)")
                .replacingOccurrences(of: "scrape_interval: 15s", with: "scrape_interval: 1s")
                .replacingOccurrences(of: "evaluation_interval: 15s", with: "evaluation_interval: 1s")
                .replacingOccurrences(of: "scrape_timeout: 5s", with: "scrape_timeout: 1s")
            try adapted.write(toFile: prometheusDirectory + "/prometheus.yml", atomically: true, encoding: .utf8)
            try FileManager.default.copyItem(atPath: Self.root.appendingPathComponent("deploy/prometheus/pushd-alerts.yml").path,
                                             toPath: prometheusDirectory + "/pushd-alerts.yml")

            let port = try ThrowawayPostgres.freePort()
            let prometheus = ChildProcess()
            prometheus.executableURL = URL(fileURLWithPath: "/usr/bin/prometheus")
            prometheus.arguments = ["--config.file=\(prometheusDirectory)/prometheus.yml",
                                    "--storage.tsdb.path=\(prometheusDirectory)/data",
                                    "--web.listen-address=127.0.0.1:\(port)"]
            let prometheusLog = prometheusDirectory + "/prometheus.log"
            _ = FileManager.default.createFile(atPath: prometheusLog, contents: nil)
            prometheus.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: prometheusLog))
            prometheus.standardError = prometheus.standardOutput
            try prometheus.run()
            defer {
                prometheus.terminate()
                prometheus.waitUntilExit()
            }
            func prometheusLogText() -> String { (try? String(contentsOfFile: prometheusLog, encoding: .utf8)) ?? "" }

            // Stops early when Prometheus exits (a configuration it refuses).
            var up = false
            _ = DaemonHarness.wait(seconds: 60) {
                up = Self.query("up{job=\"pushd\"}", port: port) == 1
                return up || !prometheus.isRunning
            }
            #expect(up, "up{job=\"pushd\"} never became 1:\n\(prometheusLogText())")
            guard up else { return }

            // The shipped alert rules are loaded by the real server.
            let rules = Self.get("http://127.0.0.1:\(port)/api/v1/rules").map { String(decoding: $0, as: UTF8.self) } ?? ""
            #expect(rules.contains("\"PushdDown\""), "\(rules)")

            // Before any work the counter has no sample; after 40 jobs Prometheus sees 40.
            let before = Self.query("sum(pushd_notifications_sent_total{job=\"pushd\"})", port: port) ?? 0
            #expect(before == 0)
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1, '{\"aps\":{\"alert\":\"hi\"}}' FROM generate_series(1, 40)",
                                 [DaemonHarness.token(4242)])
            var seen: Double?
            let moved = DaemonHarness.wait(seconds: 60) {
                seen = Self.query("sum(pushd_notifications_sent_total{job=\"pushd\"})", port: port)
                return seen == 40
            }
            #expect(moved, "Prometheus saw pushd_notifications_sent_total = \(String(describing: seen)); the mock accepted \(harness.mock.stats.accepted)")
        }
    }
}
