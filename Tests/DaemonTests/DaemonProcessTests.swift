import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The real `pushd` binary, started and signalled like an operator (or a crash) would.
@Suite(.serialized) struct DaemonProcessTests {
    /// The `pushd` executable built next to the test bundle.
    static var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("pushd").path
    }

    static func start(config: String, log: String) throws -> ChildProcess {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: binary)
        process.arguments = ["run", "--config", config]
        // The suite's own PUSHD_DATABASE_URL would override the file's database.
        process.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }

    static func waitForExit(_ process: ChildProcess, seconds: Double) -> Bool {
        DaemonHarness.wait(seconds: seconds) { !process.isRunning }
    }

    @Test func sigtermDrainsAndExitsZeroWithinTheDeadline() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let id = try CampaignLaneTests.campaign(connection, count: 20_000, rate: 2000)
            let config = try harness.writeConfigFile()
            let process = try Self.start(config: config, log: harness.directory + "/pushd.log")
            defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1000 })

            let signalled = Timestamp()
            kill(process.processIdentifier, SIGTERM)
            #expect(Self.waitForExit(process, seconds: 15))
            let log = (try? String(contentsOfFile: harness.directory + "/pushd.log", encoding: .utf8)) ?? ""
            #expect(process.terminationReason == .exit)
            #expect(process.terminationStatus == 0, "\(log)")
            // drain_timeout_s is 5 in this configuration.
            #expect(Timestamp().timeIntervalSince(signalled) < 8)
            #expect(log.contains("draining"))
            #expect(log.contains("pushd stopped"))
            // What was sent is recorded: the campaign's counters match the mock's.
            let campaign = try #require(try CampaignStore().campaign(connection, id: id))
            #expect(campaign.status == .running)
            #expect(campaign.sent == harness.mock.stats.accepted)
        }
    }

    @Test func killDashNineMidCampaignLosesNothingAndDuplicatesStayWithinTheInFlightBound() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let count = 20_000
            let id = try CampaignLaneTests.campaign(connection, count: count, rate: 4000)
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) SELECT 'shop', $1, '{\"aps\":{}}' FROM generate_series(1, 200)",
                                 [DaemonHarness.token(777_777)])
            // Leases of 10 s: the second process takes the killed one's chunks over when they run
            // out, and a lease keeper of its own held up for 2 s on a loaded machine does not let
            // one run out under its worker (sending again what it had sent since its checkpoint).
            let config = try harness.writeConfigFile()
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            let first = try Self.start(config: config, log: harness.directory + "/first.log")
            defer { if first.isRunning { kill(first.processIdentifier, SIGKILL) } }
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 5000 })
            kill(first.processIdentifier, SIGKILL)
            #expect(Self.waitForExit(first, seconds: 5))
            #expect(first.terminationReason == .uncaughtSignal)

            let second = try Self.start(config: config, log: harness.directory + "/second.log")
            defer {
                kill(second.processIdentifier, SIGTERM)
                _ = Self.waitForExit(second, seconds: 10)
            }
            let store = CampaignStore()
            #expect(try DaemonHarness.wait(seconds: 60) { try store.campaign(connection, id: id)?.status == .done })
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            let log = harness.mock.acceptedLog
            let campaignTokens = Set(log.map(\.token)).subtracting([DaemonHarness.token(777_777)])
            #expect(campaignTokens.count == count)
            let campaignSends = log.filter { $0.token != DaemonHarness.token(777_777) }.count
            // At least once: a chunk resumes from its last checkpoint, so what the dead process
            // sent after that (at most a chunk per campaign worker) may go out again.
            let duplicates = campaignSends - count
            #expect(duplicates >= 0 && duplicates <= 2 * 1000, "\(duplicates) duplicates")
            let campaign = try #require(try store.campaign(connection, id: id))
            #expect(campaign.sent == count)
        }
    }
}
