import Foundation
import Locking
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The watch that tells the campaign workers of a pause or a cancel, on a real PostgreSQL server.
@Suite(.serialized) struct CampaignStopWatchTests {
    /// A lease whose statement began before a cancel committed still hands out a chunk, held a
    /// moment after the cancel's notification arrived while no chunk of the campaign was held.
    /// The watch sees that chunk's campaign stopped within milliseconds, not at its next look
    /// (up to `lookInterval` later: 518 notifications of a campaign paced at 2,000/s went out
    /// after `pushd campaign cancel` returned when it came between two chunks).
    @Test func aCampaignCancelledBetweenTwoOfItsChunksIsSeenStoppedAtOnce() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let store = CampaignStore()
            let sending = Lock(Set<Int64>())
            let watch = CampaignStopWatch(databaseURL: database.url, logger: Logger(level: .info, sink: MemoryLogSink()),
                                          databaseError: { Issue.record("database error: \($0)") },
                                          sending: { sending.withLock { $0 } })
            watch.start()
            defer { watch.stop() }
            var delays = [Double]()
            for round in 1...5 {
                let id = try store.create(connection, NewCampaign(app: "shop", name: "round \(round)", pushType: "alert",
                                                                  payload: #"{"aps":{"alert":"hi"}}"#))
                _ = try store.importTargets(connection, campaignID: id, targets: [(token: String(repeating: "ab", count: 32), payload: nil)])
                #expect(try store.start(connection, id: id) == .running)
                // A chunk of it is sent, then none is held for a while (between two chunks).
                sending.withLock { $0 = [id] }
                usleep(400_000)
                #expect(!watch.isStopped(id))
                sending.withLock { $0 = [] }
                usleep(400_000)

                #expect(try store.cancel(connection, id: id) == .cancelled)
                sending.withLock { $0 = [id] }
                let heldAt = RateLimiter.monotonicSeconds()
                while !watch.isStopped(id) && RateLimiter.monotonicSeconds() - heldAt < 2 { usleep(1000) }
                delays.append(RateLimiter.monotonicSeconds() - heldAt)
                sending.withLock { $0 = [] }
            }
            #expect(delays.allSatisfy { $0 < 0.05 },
                    "seconds from holding a chunk of a campaign cancelled meanwhile to its workers being told: \(delays.map { String(format: "%.3f", $0) })")
        }
    }
}

extension CampaignStopWatchTests {
    /// A pause of a campaign being sent is seen at once; its resume is seen at the next look.
    @Test func aPauseIsSeenAtOnceAndAResumeAtTheNextLook() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let store = CampaignStore()
            let id = try store.create(connection, NewCampaign(app: "shop", name: "sale", pushType: "alert",
                                                              payload: #"{"aps":{"alert":"hi"}}"#))
            _ = try store.importTargets(connection, campaignID: id, targets: [(token: String(repeating: "cd", count: 32), payload: nil)])
            #expect(try store.start(connection, id: id) == .running)
            let watch = CampaignStopWatch(databaseURL: database.url, logger: Logger(level: .info, sink: MemoryLogSink()),
                                          databaseError: { Issue.record("database error: \($0)") },
                                          sending: { [id] })
            watch.start()
            defer { watch.stop() }
            usleep(400_000)
            #expect(!watch.isStopped(id))

            #expect(try store.pause(connection, id: id) == .paused)
            let pausedAt = RateLimiter.monotonicSeconds()
            while !watch.isStopped(id) && RateLimiter.monotonicSeconds() - pausedAt < 2 { usleep(1000) }
            let seen = RateLimiter.monotonicSeconds() - pausedAt
            #expect(seen < 0.05, "a pause seen after \(seen) s")

            _ = try store.resume(connection, id: id)
            let resumedAt = RateLimiter.monotonicSeconds()
            while watch.isStopped(id) && RateLimiter.monotonicSeconds() - resumedAt < 2 { usleep(1000) }
            let goesOn = RateLimiter.monotonicSeconds() - resumedAt
            #expect(goesOn < CampaignStopWatch.lookInterval + 0.2, "a resume seen after \(goesOn) s")
        }
    }
}
