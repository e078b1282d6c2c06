import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd status` of a running `pushd run` whose sessions the database refuses (the role's
/// connection limit reached, here 0) when its only campaign starts: the campaign waits for a
/// worker, and status must not say the workers are busy with other campaigns' chunks (there
/// are none; more workers would take more sessions), nor show a rate nothing sends.
@Suite(.serialized) struct StatusWorkersCutOffTests {
    @Test func theOnlyCampaignWaitingWhileTheWorkersCannotConnectIsNotBlamedOnBusyWorkers() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let owner = try database.connect()
            defer { owner.close() }
            let store = CampaignStore()
            let id = try store.create(owner, NewCampaign(app: "shop", name: "spring sale", payload: #"{"aps":{"alert":"Sale"}}"#))
            _ = try store.importTargets(owner, campaignID: id, targets: (1...200).map { (token: DaemonHarness.token($0), payload: String?.none) })
            try LoginRole.with(memberOf: "pushd_daemon", in: database) { daemon in
                let config = try harness.writeConfigFile()
                let text = try String(contentsOfFile: config, encoding: .utf8)
                try text.replacingOccurrences(of: "url: \(database.url)", with: "url: \(daemon.url)")
                    .write(toFile: config, atomically: true, encoding: .utf8)
                let log = harness.directory + "/cut-off.log"
                let process = try DaemonProcessTests.start(config: config, log: log)
                defer {
                    _ = try? owner.execute(script: "ALTER ROLE \(daemon.name) CONNECTION LIMIT -1")
                    kill(process.processIdentifier, SIGTERM)
                    _ = DaemonProcessTests.waitForExit(process, seconds: 10)
                }
                let registered = try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(owner, "SELECT count(*) FROM pushd.instances") == 1 }
                #expect(registered, "\((try? String(contentsOfFile: log, encoding: .utf8)) ?? "")")

                try owner.execute(script: "ALTER ROLE \(daemon.name) CONNECTION LIMIT 0")
                _ = try owner.query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", [daemon.name])
                #expect(try store.start(owner, id: id) == .running)

                var report: FleetReport?
                _ = try DaemonHarness.wait(seconds: 30) {
                    report = FleetReport(try FleetSnapshot.read(owner))
                    return report?.problems.contains { $0.hasPrefix("campaign \(id) ") } == true
                }
                let problems = report?.problems ?? []
                let lines = report?.lines(now: Timestamp()) ?? []
                let waiting = problems.first { $0.hasPrefix("campaign \(id) ") } ?? ""
                #expect(waiting.contains("has had chunks to send and no worker sending any for"), "\(lines)")
                #expect(!waiting.contains("busy with other campaigns"), "\(lines)")
                #expect(waiting.contains("the campaign workers that serve the app are not taking chunks")
                        && waiting.contains("more campaign workers would not help"), "\(lines)")
                #expect(harness.mock.stats.accepted == 0)
                let row = lines.first { $0.hasSuffix(" spring sale") } ?? ""
                #expect(row.contains(" none now "), "\(lines)")
            }
        }
    }
}
