import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// Several `pushd run` processes with different app lists on one database (a rolling
/// deploy that adds an app, a canary): each sends only the apps it is configured for,
/// and the work of an app it does not know waits for an instance that does.
@Suite(.serialized) struct MixedFleetTests {
    static let secondBundleID = "com.example.second"

    /// The harness's configuration file, with a metrics port of our own and, when asked,
    /// a second app `second` under the same signing key.
    static func writeConfig(_ harness: DaemonHarness, name: String, metricsPort: UInt16, withSecond: Bool) throws -> String {
        var yaml = try String(contentsOfFile: try harness.writeConfigFile(), encoding: .utf8)
            .replacingOccurrences(of: "listen: 127.0.0.1:0", with: "listen: 127.0.0.1:\(metricsPort)")
        if withSecond {
            yaml += """

              - name: second
                bundle_id: \(secondBundleID)
                environment: sandbox
                token:
                  team_id: \(DaemonHarness.teamID)
                  key_id: \(DaemonHarness.keyID)
                  key_file: \(harness.keyFile)

            """
        }
        let path = harness.directory + "/" + name
        try yaml.write(toFile: path, atomically: true, encoding: .utf8)
        // Nothing may be sent twice and no takeover is timed: leases a stalled renewal cannot
        // lose on a loaded machine.
        try DaemonHarness.setLeaseSeconds(10, inConfigFile: path)
        return path
    }

    static func freePort() throws -> UInt16 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw CommandContext.Failure("no free port: \(String(cString: strerror(errno)))") }
        return UInt16(bigEndian: address.sin_port)
    }

    /// One scrape of a daemon's /metrics through curl.
    static func scrape(port: UInt16) -> String {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        process.arguments = ["-s", "--max-time", "5", "http://127.0.0.1:\(port)/metrics"]
        let pipe = Pipe()
        process.standardOutput = pipe
        guard (try? process.run()) != nil else { return "" }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return String(decoding: data, as: UTF8.self)
    }

    static func campaign(_ connection: PGConnection, app: String, tokens: ClosedRange<Int>) throws -> Int64 {
        let store = CampaignStore()
        let id = try store.create(connection, NewCampaign(app: app, name: "launch", payload: #"{"aps":{"alert":"New"}}"#))
        try store.importTargets(connection, campaignID: id, targets: tokens.map { (DaemonHarness.token($0), nil) })
        try store.start(connection, id: id)
        return id
    }

    @Test func twoDaemonsWithDifferentAppListsEachDeliverOnlyTheirAppsAndNothingIsDeadLettered() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let jobs = 300
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT app, lpad(to_hex(g + offs), 64, '0'), '{"aps":{"alert":"hi"}}'
                FROM (VALUES ('shop', 0), ('second', 1000000)) a(app, offs), generate_series(1, $1) g
                """, [jobs])
            let shopCampaign = try Self.campaign(connection, app: "shop", tokens: 1...3000)
            let secondCampaign = try Self.campaign(connection, app: "second", tokens: 10_001...13_000)

            // Instance B knows only shop and runs alone first: it must send all of shop and
            // leave all of second queued, untouched, and say so.
            let portB = try Self.freePort()
            let logB = harness.directory + "/b.log"
            let b = try DaemonProcessTests.start(config: try Self.writeConfig(harness, name: "b.yml", metricsPort: portB, withSecond: false), log: logB)
            defer { if b.isRunning { kill(b.processIdentifier, SIGTERM); _ = DaemonProcessTests.waitForExit(b, seconds: 10) } }
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 60) {
                try store.campaign(connection, id: shopCampaign)?.status == .done
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE app = 'shop'") == 0
            })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE app = 'second' AND attempts = 0 AND last_error IS NULL") == jobs)
            let waiting = try #require(try store.campaign(connection, id: secondCampaign))
            #expect(waiting.sent == 0 && waiting.failed == 0 && waiting.status == .running)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)

            #expect(DaemonHarness.wait(seconds: 10) {
                ((try? String(contentsOfFile: logB, encoding: .utf8)) ?? "").contains("not configured for 'second'")
            })
            let warning = try String(contentsOfFile: logB, encoding: .utf8).split(separator: "\n")
                .first { $0.contains("not configured for 'second'") } ?? ""
            #expect(warning.hasPrefix("{") && warning.contains(#""level":"warning""#) && warning.contains(#""app":"second""#), "\(warning)")
            var metrics = ""
            #expect(DaemonHarness.wait(seconds: 10) {
                metrics = Self.scrape(port: portB)
                return metrics.contains(#"pushd_queue_app_depth{app="second",lane="transactional"} \#(jobs)"#)
            }, "\(metrics)")
            #expect(metrics.contains(#"pushd_queue_app_depth{app="second",lane="campaign"} 3000"#))
            #expect(metrics.contains(#"pushd_app_configured{app="shop"} 1"#))
            #expect(!metrics.contains(#"pushd_app_configured{app="second"}"#))

            // Instance A knows both apps: it picks up second's work while B keeps running.
            let a = try DaemonProcessTests.start(config: try Self.writeConfig(harness, name: "a.yml", metricsPort: try Self.freePort(), withSecond: true),
                                                 log: harness.directory + "/a.log")
            defer { if a.isRunning { kill(a.processIdentifier, SIGTERM); _ = DaemonProcessTests.waitForExit(a, seconds: 10) } }
            #expect(try DaemonHarness.wait(seconds: 60) {
                try store.campaign(connection, id: secondCampaign)?.status == .done
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
            })

            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            for id in [shopCampaign, secondCampaign] {
                let campaign = try #require(try store.campaign(connection, id: id))
                #expect(campaign.sent == 3000 && campaign.failed == 0 && campaign.failedByReason.isEmpty, "campaign \(id): \(campaign)")
            }
            let accepted = harness.mock.acceptedLog
            let second = accepted.filter { $0.topic == Self.secondBundleID }
            let shop = accepted.filter { $0.topic == DaemonHarness.bundleID }
            #expect(second.count == jobs + 3000 && Set(second.map(\.token)).count == jobs + 3000)
            #expect(shop.count == jobs + 3000 && Set(shop.map(\.token)).count == jobs + 3000)
            #expect(accepted.count == 2 * (jobs + 3000))
        }
    }
}
