@testable import APNsMock
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

@Suite(.serialized) struct IdleClaimerTests {
    @Test func oneIdleWorkerWatchesTheQueueWhileTheOthersRest() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            var config = harness.config()
            config.transactionalWorkers = 4
            config.batchSize = 1
            // A probe every 50 ms, and a busy window longer than the test: no worker that found
            // work goes to sleep on NOTIFY while it is counted.
            config.transactionalWait = JobWaitPolicy(pollInterval: 0.05, busyWindow: 600, sleepTimeout: 1)
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Date().addingTimeInterval(5)) }
            let connection = try database.connect()
            // Forty jobs at once, one per batch: every worker finds work.
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"x"}}' FROM generate_series(1, 40) g
                """)
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.acceptedLog.count == 40 })

            let before = pipeline.context.idleQueueQueries.load(ordering: .relaxed)
            Thread.sleep(forTimeInterval: 2)
            let spent = pipeline.context.idleQueueQueries.load(ordering: .relaxed) - before
            // One watcher probing every 50 ms sends at most 40 statements in 2 s, and each of the
            // three resting workers one claim a second; four workers each polling sent 300 and more.
            // A slower machine sends fewer, never more.
            #expect(spent <= 60, "idle workers sent \(spent) statements in 2 s looking for jobs")
            #expect(harness.mock.acceptedLog.count == 40)
        }
    }

    @Test func aJobInsertedSoonAfterAnotherIsWokenByItsNotifyNotByAProbe() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            var config = harness.config()
            // Probes and sleeps 3 s apart: a job that waits for either is late by seconds.
            config.transactionalWait.pollInterval = 3
            config.transactionalWait.sleepTimeout = 3
            let pipeline = try harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Date().addingTimeInterval(5)) }
            let connection = try database.connect()
            let insert = "INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"x\"}}')"
            try connection.query(insert, [DaemonHarness.token(1)])
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.acceptedLog.count == 1 })

            Thread.sleep(forTimeInterval: 0.2)
            let inserted = Date()
            try connection.query(insert, [DaemonHarness.token(2)])
            #expect(DaemonHarness.wait(seconds: 20) { harness.mock.acceptedLog.count == 2 })
            let waited = Date().timeIntervalSince(inserted)
            // The insert's NOTIFY wakes the watching worker: well before its 3 s probe or sleep.
            #expect(waited < 1.5, "the second job was accepted \(waited) s after its INSERT")
        }
    }

    @Test func theWatchPassesToTheLongestRestingWorkerWhenTheWatcherFindsWork() {
        var state = IdleClaimers.State(lastWork: 0)
        var watches = [state.becameIdle(0), state.becameIdle(1), state.becameIdle(2), state.becameIdle(0)]
        // The first idle worker watches, the others rest, and the watcher keeps the watch while it finds nothing.
        #expect(watches == [true, false, false, true])
        state.foundWork(0, now: 5)
        #expect(state.watcher == 1)
        #expect(state.resting == [2])
        #expect(state.shouldWake(1) && !state.shouldWake(2))
        #expect(state.lastWork == 5)
        // A resting worker whose time-out claim found work leaves the queue of resting ones.
        state.foundWork(2, now: 4)
        #expect(state.resting.isEmpty && state.watcher == 1 && state.lastWork == 5)
        // Every worker busy: nobody watches, and the first to go idle takes the watch.
        state.foundWork(1, now: 6)
        #expect(state.watcher == nil)
        watches = [state.becameIdle(2), state.becameIdle(0)]
        #expect(watches == [true, false])
        state.left(2)
        #expect(state.watcher == 0 && state.resting.isEmpty)
    }
}
