import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd run` needs no more than the `pushd_daemon` group role: an application enqueuing
/// as `pushd_enqueue` is served by a daemon logged in as `pushd_daemon`, transactional jobs,
/// per-user fan-out and a campaign alike.
@Suite(.serialized) struct DaemonRoleTests {
    @Test func runWorksAsTheDaemonRoleForAnApplicationThatOnlyEnqueues() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let owner = try database.connect()
            defer { owner.close() }
            let campaignID = try CampaignLaneTests.campaign(owner, count: 500)
            try LoginRole.with(memberOf: "pushd_enqueue", in: database) { application in
                try LoginRole.with(memberOf: "pushd_daemon", in: database) { daemon in
                    let app = try application.connect()
                    defer { app.close() }
                    try app.query("SELECT pushd.register_token('shop', $1, 'u1', 'sandbox')", [DaemonHarness.token(900_001)])
                    try app.query("SELECT pushd.register_token('shop', $1, 'u1', 'sandbox')", [DaemonHarness.token(900_002)])
                    for seed in 1...20 {
                        try app.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                      [DaemonHarness.token(800_000 + seed)])
                    }
                    #expect(try app.query("SELECT pushd.notify_user('shop', 'u1', '{\"aps\":{\"alert\":\"fan\"}}')")
                        .require(Int.self, row: 0, column: 0) == 2)

                    let config = try harness.writeConfigFile()
                    let text = try String(contentsOfFile: config, encoding: .utf8)
                    #expect(text.contains("url: \(database.url)\n"), "the daemon would run as the database owner")
                    try text.replacingOccurrences(of: "url: \(database.url)", with: "url: \(daemon.url)")
                        .write(toFile: config, atomically: true, encoding: .utf8)
                    let log = harness.directory + "/daemon-role.log"
                    let process = try DaemonProcessTests.start(config: config, log: log)
                    defer {
                        kill(process.processIdentifier, SIGTERM)
                        _ = DaemonProcessTests.waitForExit(process, seconds: 10)
                    }
                    let store = CampaignStore()
                    let finished = try DaemonHarness.wait(seconds: 60) {
                        try DaemonHarness.count(owner, "SELECT count(*) FROM pushd.jobs") == 0
                            && store.campaign(owner, id: campaignID)?.status == .done
                    }
                    let logText = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
                    #expect(finished, "\(logText)")
                    #expect(harness.mock.stats.accepted == 500 + 20 + 2)
                    #expect(!logText.contains("permission denied"), "\(logText)")
                    // The sessions that did the work were the daemon's.
                    #expect(try DaemonHarness.count(owner, "SELECT count(*) FROM pg_stat_activity WHERE usename = '\(daemon.name)'") > 0)
                    #expect(try DaemonHarness.count(owner, "SELECT count(*) FROM pushd.provider_tokens WHERE token IS NOT NULL") == 1)
                }
            }
        }
    }
}
