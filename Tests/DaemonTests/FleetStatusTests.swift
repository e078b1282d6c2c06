import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Two real `pushd run` processes register in pushd.instances; `pushd status --json`, run as
/// the real binary, shows them and exits 0 while the fleet is healthy and 1 when it is
/// degraded: work of an app nobody serves, instances serving different apps, an instance
/// gone silent, an app paused for its credentials.
@Suite(.serialized) struct FleetStatusTests {
    struct Status {
        var exitCode: Int32
        var json: [String: Any]
        var text: String

        var instances: [[String: Any]] { json["instances"] as? [[String: Any]] ?? [] }
        var alive: [[String: Any]] { instances.filter { $0["state"] as? String == "alive" } }
        var problems: [String] { json["problems"] as? [String] ?? [] }
    }

    static func status(_ database: IsolatedDatabase) throws -> Status {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: DaemonProcessTests.binary)
        process.arguments = ["status", "--json", "--database-url", database.url]
        process.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        let data = output.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        let text = String(decoding: data, as: UTF8.self)
        let json = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] ?? [:]
        return Status(exitCode: process.terminationStatus, json: json, text: text)
    }

    /// The harness's configuration file with a second app, `news`, served with the same key.
    static func configWithNews(_ harness: DaemonHarness) throws -> String {
        let path = try harness.writeConfigFile()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let news = """

          - name: news
            bundle_id: com.example.news
            environment: sandbox
            token:
              team_id: \(DaemonHarness.teamID)
              key_id: \(DaemonHarness.keyID)
              key_file: \(harness.keyFile)
        """
        let newsPath = harness.directory + "/pushd-news.yml"
        try (text + news).write(toFile: newsPath, atomically: true, encoding: .utf8)
        return newsPath
    }

    static func stop(_ process: ChildProcess) {
        guard process.isRunning else { return }
        kill(process.processIdentifier, SIGTERM)
        if !DaemonProcessTests.waitForExit(process, seconds: 15) { kill(process.processIdentifier, SIGKILL) }
    }

    @Test func twoInstancesAreListedAndAHealthyFleetExitsZero() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let config = try harness.writeConfigFile()

            // Before any instance runs, due jobs wait with nobody to send them: degraded.
            // (A running instance would dead-letter jobs of an app it does not know.)
            let connection = try database.connect()
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'news', $1, '{\"aps\":{\"alert\":\"hi\"}}' FROM generate_series(1, 7)",
                                 [DaemonHarness.token(31)])
            var status = try Self.status(database)
            #expect(status.exitCode == 1, "\(status.text)")
            #expect(status.problems.contains("no live pushd instance: nothing is being sent"), "\(status.problems)")
            #expect(status.problems.contains { $0.contains("7 due notification(s) of app news, which no live instance serves") }, "\(status.problems)")
            let queue = status.json["queue"] as? [[String: Any]] ?? []
            let news = queue.first { $0["app"] as? String == "news" && $0["lane"] as? String == "transactional" }
            #expect(news?["due"] as? Int == 7)
            #expect(news?["served"] as? Bool == false)
            try connection.query("DELETE FROM pushd.jobs")

            let first = try DaemonProcessTests.start(config: config, log: harness.directory + "/first.log")
            defer { Self.stop(first) }
            let second = try DaemonProcessTests.start(config: config, log: harness.directory + "/second.log")
            defer { Self.stop(second) }

            #expect(try DaemonHarness.wait(seconds: 30) {
                status = try Self.status(database)
                return status.alive.count == 2
            }, "\(status.text)")
            #expect(status.exitCode == 0, "\(status.text)")
            #expect(status.json["healthy"] as? Bool == true)
            let pids = Set(status.alive.compactMap { $0["pid"] as? Int })
            #expect(pids == [Int(first.processIdentifier), Int(second.processIdentifier)])
            for instance in status.alive {
                #expect(instance["version"] as? String == VersionCommand.pushdVersion)
                #expect((instance["libcurl_version"] as? String)?.hasPrefix("8.") == true, "\(instance)")
                #expect(instance["apps"] as? [String] == ["shop"])
                #expect((instance["silent_seconds"] as? Double ?? 99) < 15)
            }
            #expect(status.json["versions"] as? [String] == [VersionCommand.pushdVersion])

            // The same facts as gauges on each instance's /metrics.
            let port = try #require(PrometheusScrapeTests.metricsPort(log: harness.directory + "/first.log"))
            var metrics = ""
            #expect(DaemonHarness.wait(seconds: 15) {
                metrics = PrometheusScrapeTests.get("http://127.0.0.1:\(port)/metrics").map { String(decoding: $0, as: UTF8.self) } ?? ""
                return metrics.contains("pushd_fleet_instances{status=\"alive\"} 2")
            }, "\(metrics.split(separator: "\n").filter { $0.hasPrefix("pushd_fleet") })")
            #expect(metrics.contains("pushd_fleet_versions 1"))
            #expect(metrics.contains("pushd_fleet_app_sets 1"))

            // A clean stop removes the instance's row.
            Self.stop(second)
            status = try Self.status(database)
            #expect(status.instances.count == 1, "\(status.text)")
        }
    }

    @Test func differentAppSetsAndAnInstanceGoneSilentAreDegraded() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let first = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: harness.directory + "/first.log")
            defer { Self.stop(first) }
            let second = try DaemonProcessTests.start(config: try Self.configWithNews(harness), log: harness.directory + "/second.log")
            defer { Self.stop(second) }

            var status = try Self.status(database)
            #expect(try DaemonHarness.wait(seconds: 30) {
                status = try Self.status(database)
                return status.alive.count == 2
            }, "\(status.text)")
            #expect(status.exitCode == 1)
            #expect(status.problems.contains { $0.hasPrefix("instances serve different app sets: [news,shop] on ") }, "\(status.problems)")
            let port = try #require(PrometheusScrapeTests.metricsPort(log: harness.directory + "/first.log"))
            #expect(DaemonHarness.wait(seconds: 15) {
                let metrics = PrometheusScrapeTests.get("http://127.0.0.1:\(port)/metrics").map { String(decoding: $0, as: UTF8.self) } ?? ""
                return metrics.contains("pushd_fleet_app_sets 2")
            })

            // kill -9 the one serving news: its row stays; a minute of silence makes it gone.
            kill(second.processIdentifier, SIGKILL)
            #expect(DaemonProcessTests.waitForExit(second, seconds: 5))
            let connection = try database.connect()
            try connection.query("UPDATE pushd.instances SET heartbeat_at = now() - interval '61 seconds' WHERE pid = $1",
                                 [Int(second.processIdentifier)])
            status = try Self.status(database)
            #expect(status.exitCode == 1)
            #expect(status.alive.count == 1)
            let gone = status.instances.first { $0["state"] as? String == "gone" }
            #expect(gone?["pid"] as? Int == Int(second.processIdentifier))
            #expect(status.problems.contains { $0.contains("has been silent for") }, "\(status.problems)")
            #expect(!status.problems.contains { $0.contains("different app sets") }, "a gone instance serves nothing")
        }
    }

    /// A real instance with only a certificate for `shop` beside one with a token key: status
    /// shows what each advertises and that the first leaves its production and token work to
    /// the second; once the keyed one stops, status says no live instance has a key for `shop`.
    @Test func whatEachInstanceAdvertisesAndLeavesToTheOthersIsShown() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TokenCoverageTests.fleet(database)
            defer { fleet.stop() }
            let harness = fleet.harness
            let keyed = try fleet.start(config: try harness.writeConfigFile(), log: harness.directory + "/keyed.log")
            let certificate = try fleet.start(config: try TokenCoverageTests.writeCertificateConfig(fleet),
                                              log: harness.directory + "/certificate.log")

            var status = try Self.status(database)
            #expect(try DaemonHarness.wait(seconds: 30) {
                status = try Self.status(database)
                return status.alive.count == 2
            }, "\(status.text)")
            #expect(status.exitCode == 0, "\(status.problems)")
            let byPid = Dictionary(status.alive.map { ($0["pid"] as? Int ?? 0, $0) }, uniquingKeysWith: { first, _ in first })
            let a = try #require(byPid[Int(certificate.processIdentifier)], "\(status.text)")
            let b = try #require(byPid[Int(keyed.processIdentifier)], "\(status.text)")
            #expect(a["environments"] as? [String] == ["shop/sandbox"], "\(status.text)")
            #expect(b["environments"] as? [String] == ["shop/production", "shop/sandbox", "shop/token"], "\(status.text)")
            #expect(a["configured_environments"] as? [String: String] == ["shop": "sandbox"], "\(status.text)")
            #expect(a["left_to_other_instances"] as? [[String: String]] == [
                ["app": "shop", "what": "production", "reason": "NoCredentialsForEnvironment"],
                ["app": "shop", "what": "token", "reason": "TokenAuthenticationRequired"],
            ], "\(status.text)")
            #expect((b["left_to_other_instances"] as? [Any])?.isEmpty == true, "\(status.text)")
            #expect(!(status.json["notes"] as? [String] ?? []).contains { $0.contains("token key") })

            Self.stop(keyed)
            status = try Self.status(database)
            #expect(status.alive.count == 1, "\(status.text)")
            #expect((status.json["notes"] as? [String] ?? []).contains { $0.hasPrefix("no live instance has a token key for app shop: ") },
                    "\(status.text)")
            #expect((status.alive.first?["left_to_other_instances"] as? [Any])?.isEmpty == true, "\(status.text)")
        }
    }

    @Test func anAppPausedForItsCredentialsIsRecordedAndDegraded() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, trustsPushdKey: false)
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: harness.directory + "/pushd.log")
            defer { Self.stop(process) }
            let connection = try database.connect()
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(8)])
            var status = try Self.status(database)
            #expect(try DaemonHarness.wait(seconds: 30) {
                status = try Self.status(database)
                return !(status.json["paused_apps"] as? [[String: Any]] ?? []).isEmpty
            }, "\(status.text)")
            #expect(status.exitCode == 1)
            let paused = try #require((status.json["paused_apps"] as? [[String: Any]])?.first)
            #expect(paused["app"] as? String == "shop")
            #expect(paused["reason"] as? String == "InvalidProviderToken")
            #expect(status.problems.contains { $0.hasPrefix("app shop is paused on ") })
            let recorded = try connection.query("SELECT paused->>'shop' FROM pushd.instances").require(String.self, row: 0, column: 0)
            #expect(recorded == "InvalidProviderToken")
        }
    }
}
