import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A capped chunk is sent over size ÷ rate seconds; its progress is written as its answers
/// come, so a crash in the middle of it sends again only what followed the last checkpoint.
@Suite(.serialized) struct RateCapProgressTests {
    @Test func aPacedChunkCheckpointsItsAnswersAndATakeoverResendsOnlyTheLastFewSeconds() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            // One chunk of 400 targets at 20 per second: 20 s of sending in one lease.
            let count = 400
            let rate = 20
            let id = try CampaignLaneTests.campaign(connection, count: count, rate: rate)
            let config = try harness.writeConfigFile()
            let first = try DaemonProcessTests.start(config: config, log: harness.directory + "/first.log")
            defer { if first.isRunning { kill(first.processIdentifier, SIGKILL) } }
            let store = CampaignStore()
            #expect(DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted >= 160 })

            // The checkpoint and the campaign's counter follow the answers: read before the
            // mock's count, neither is ahead of it, and neither stays at the chunk's start.
            let checkpoint = try DaemonHarness.count(connection, "SELECT coalesce(sum(checkpoint), 0)::int FROM pushd.campaign_chunks WHERE campaign_id = \(id)")
            let sent = try #require(try store.campaign(connection, id: id)).sent
            let accepted = harness.mock.stats.accepted
            #expect(checkpoint > 0 && checkpoint <= accepted, "checkpoint \(checkpoint) with \(accepted) accepted")
            #expect(sent > 0 && sent <= accepted, "sent \(sent) with \(accepted) accepted")
            // The lease's checkpoint interval is 1 s here; 5 s of sends leave room for a slow machine.
            #expect(accepted - checkpoint <= 5 * rate, "checkpoint \(checkpoint) with \(accepted) accepted")

            kill(first.processIdentifier, SIGKILL)
            #expect(DaemonProcessTests.waitForExit(first, seconds: 5))
            // What the killed process left: its last checkpoint, and what APNs accepted from it.
            let checkpointAtKill = try DaemonHarness.count(connection, "SELECT coalesce(sum(checkpoint), 0)::int FROM pushd.campaign_chunks WHERE campaign_id = \(id)")
            let acceptedAtKill = harness.mock.stats.accepted
            let second = try DaemonProcessTests.start(config: config, log: harness.directory + "/second.log")
            defer {
                kill(second.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(second, seconds: 10)
            }
            #expect(try DaemonHarness.wait(seconds: 90) { try store.campaign(connection, id: id)?.status == .done })
            let log = harness.mock.acceptedLog.map(\.token)
            #expect(Set(log).count == count)
            // The chunk resumes at its last checkpoint: what the killed process sent after it
            // (about a second's worth, and what was in flight) goes out again, not the chunk. The
            // bound is what the kill left, not a time: a slow machine checkpoints later, and the
            // mock may answer one or two more as the killed process's connection closes.
            let duplicates = log.count - count
            #expect(checkpointAtKill > 0 && acceptedAtKill >= checkpointAtKill, "checkpoint \(checkpointAtKill) with \(acceptedAtKill) accepted at the kill")
            #expect(duplicates >= 0 && duplicates <= acceptedAtKill - checkpointAtKill + 2,
                    "\(duplicates) targets were accepted twice; the killed process had \(acceptedAtKill) accepted, \(checkpointAtKill) checkpointed")
            #expect(try #require(try store.campaign(connection, id: id)).sent == count)
        }
    }
}
