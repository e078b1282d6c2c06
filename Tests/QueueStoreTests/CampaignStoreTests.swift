import PushdTestSupport
import Posix
import Foundation
import QueueStore
import Testing

@Suite struct CampaignStoreTests {
    let campaigns = CampaignStore()

    func makeCampaign(_ connection: PGConnection, targets: Int, chunkSize: Int = 1000, rateLimit: Int? = nil,
                      startAt: Timestamp? = nil) throws -> Int64 {
        let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "winter sale", payload: Fixtures.payload,
                                                              startAt: startAt, rateLimit: rateLimit))
        try campaigns.importTargets(connection, campaignID: id, targets: (1...targets).map { (Fixtures.token($0), nil) },
                                    chunkSize: chunkSize)
        return id
    }

    func writeFile(_ text: String) throws -> String {
        let path = NSTemporaryDirectory() + "pushd-targets-\(UUID().uuidString).csv"
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func importFromAFileChunksTargetsWithPerTargetPayloads() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "news", payload: Fixtures.payload))
            let lines = ["# audience exported on Monday", Fixtures.token(1).uppercased(),
                         "\(Fixtures.token(2)),{\"aps\":{\"alert\":\"Hi\\tAnna, \\\"20%\\\" off\"}}\r", "",
                         "\(Fixtures.token(3))\t{\"aps\":{\"badge\":3}}", Fixtures.token(4), Fixtures.token(5)]
            let path = try writeFile(lines.joined(separator: "\n"))
            defer { try? FileManager.default.removeItem(atPath: path) }
            #expect(try campaigns.importTargets(connection, campaignID: id, fromFile: path, chunkSize: 2).imported == 5)
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.targets == 5)
            #expect(campaign.chunksTotal == 3)
            try campaigns.start(connection, id: id)
            var seen = [CampaignTarget]()
            while let chunk = try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30) {
                seen += chunk.targets
                try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size, sent: chunk.targets.count))
            }
            #expect(seen.map(\.token) == (1...5).map { Fixtures.token($0) })
            #expect(seen[1].payload == "{\"aps\":{\"alert\":\"Hi\\tAnna, \\\"20%\\\" off\"}}")
            #expect(seen[2].payload == "{\"aps\":{\"badge\":3}}")
            #expect(seen[0].payload == nil && seen[3].payload == nil)
            let done = try #require(try campaigns.campaign(connection, id: id))
            #expect(done.status == .done)
            #expect(done.sent == 5 && done.remaining == 0 && done.finishedAt != nil)
        }
    }

    @Test func aTokenListedTwiceOrAlreadyInTheCampaignIsDroppedAndCounted() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "news", payload: Fixtures.payload))
            // Upper case and lower case are the same token; the first line of a token wins.
            let first = try writeFile([Fixtures.token(1), "\(Fixtures.token(2)),{\"aps\":{\"badge\":1}}", Fixtures.token(1).uppercased(),
                                       Fixtures.token(3), "\(Fixtures.token(2)),{\"aps\":{\"badge\":2}}"].joined(separator: "\n"))
            defer { try? FileManager.default.removeItem(atPath: first) }
            #expect(try campaigns.importTargets(connection, campaignID: id, fromFile: first, chunkSize: 2)
                    == TargetImportResult(imported: 3, duplicatesDropped: 2))
            #expect(try campaigns.importTargets(connection, campaignID: id, targets: [(Fixtures.token(3), nil), (Fixtures.token(4), nil)])
                    == TargetImportResult(imported: 1, duplicatesDropped: 1))
            try TokenStore().register(connection, app: "shop", token: Fixtures.token(4))
            try TokenStore().register(connection, app: "shop", token: Fixtures.token(5))
            #expect(try campaigns.importFromDeviceTokens(connection, campaignID: id) == TargetImportResult(imported: 1, duplicatesDropped: 1))
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.targets == 5)
            try campaigns.start(connection, id: id)
            var seen = [CampaignTarget]()
            while let chunk = try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30) {
                seen += chunk.targets
                try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size, sent: chunk.targets.count))
            }
            #expect(seen.map(\.token) == (1...5).map { Fixtures.token($0) })
            #expect(seen[1].payload == "{\"aps\":{\"badge\":1}}")
        }
    }

    @Test func aFileStartingWithAByteOrderMarkIsImported() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "news", payload: Fixtures.payload))
            let path = try writeFile("\u{FEFF}" + [Fixtures.token(1), Fixtures.token(2)].joined(separator: "\r\n") + "\r\n")
            defer { try? FileManager.default.removeItem(atPath: path) }
            #expect(try campaigns.importTargets(connection, campaignID: id, fromFile: path).imported == 2)
        }
    }

    @Test func aTargetPayloadWithARepeatedKeyOrANonObjectApsIsRefusedAtImport() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "news", payload: Fixtures.payload))
            let repeated = Fixtures.pgError {
                try campaigns.importTargets(connection, campaignID: id, targets: [(Fixtures.token(1), nil),
                                                                                  (Fixtures.token(2), #"{"aps":{"badge":1,"badge":2}}"#)])
            }
            #expect(repeated?.message.hasPrefix("pushd.campaign_targets.payloads[2] has the key 'badge' twice in one object (at aps.badge)") == true,
                    "\(repeated?.message ?? "accepted")")
            let notObject = Fixtures.pgError {
                try campaigns.importTargets(connection, campaignID: id, targets: [(Fixtures.token(1), #"{"aps":[1]}"#)])
            }
            #expect(notObject?.message.hasPrefix(#"pushd.campaign_targets.payloads[1] must have "aps" as a JSON object, got a JSON array"#) == true,
                    "\(notObject?.message ?? "accepted")")
            let badArgs = Fixtures.pgError {
                try campaigns.importTargets(connection, campaignID: id, targets: [(Fixtures.token(1), #"{"aps":{"alert":{"loc-args":[1]}}}"#)])
            }
            #expect(badArgs?.message.hasPrefix(#"pushd.campaign_targets.payloads[1] must have "aps"."alert"."loc-args"[0] as a string, got 1"#) == true,
                    "\(badArgs?.message ?? "accepted")")
            #expect(try campaigns.campaign(connection, id: id)?.targets == 0)
        }
    }

    @Test func importNamesTheFileAndLineOfABadTargetAndAddsNothing() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "news", payload: Fixtures.payload))
            let path = try writeFile([Fixtures.token(1), Fixtures.token(2), "\(Fixtures.token(3).dropLast())x"].joined(separator: "\n"))
            defer { try? FileManager.default.removeItem(atPath: path) }
            let error = Fixtures.queueError { try campaigns.importTargets(connection, campaignID: id, fromFile: path) }
            #expect(error?.message == "\(path) line 3: the device token must be hexadecimal, found 'x' at column 64")
            let payloadPath = try writeFile("\(Fixtures.token(1)),[1]\n")
            defer { try? FileManager.default.removeItem(atPath: payloadPath) }
            let payloadError = Fixtures.queueError { try campaigns.importTargets(connection, campaignID: id, fromFile: payloadPath) }
            #expect(payloadError?.message.contains("line 1: the payload after the token must be a JSON object") == true)
            let brokenJSON = Fixtures.pgError {
                try campaigns.importTargets(connection, campaignID: id, targets: [(Fixtures.token(1), "{\"aps\":}")])
            }
            #expect(brokenJSON?.message.hasPrefix("pushd.campaign_targets.payloads[1] must be a JSON object but is not valid JSON") == true)
            #expect(try campaigns.campaign(connection, id: id)?.targets == 0)
            #expect(Fixtures.queueError { try campaigns.start(connection, id: id) }?.message
                    == "cannot start campaign \(id): campaign \(id) has no targets; import targets before starting it")
        }
    }

    @Test func workersRunACampaignToDoneWithCountersByReason() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 2500)
            #expect(try campaigns.start(connection, id: id) == .running)
            var chunks = 0
            while let chunk = try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30) {
                chunks += 1
                let half = chunk.size / 2
                #expect(try campaigns.checkpoint(connection, chunk, ChunkProgress(position: half, sent: half - 2,
                                                                                    failedByReason: ["Unregistered": 2], pruned: 2),
                                                 leaseSeconds: 30) == .proceed)
                try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size, sent: chunk.size - half - 1,
                                                                      failedByReason: ["BadDeviceToken": 1]))
            }
            #expect(chunks == 3)
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.status == .done)
            #expect(campaign.targets == 2500)
            #expect(campaign.sent == 2500 - 9)
            #expect(campaign.failed == 9)
            #expect(campaign.failedByReason == ["Unregistered": 6, "BadDeviceToken": 3])
            #expect(campaign.pruned == 6)
            #expect(campaign.remaining == 0)
            #expect(campaign.startedAt != nil && campaign.finishedAt != nil)
        }
    }

    @Test func aVanishedWorkersChunkIsFinishedByAnotherFromItsLastCheckpoint() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 1000)
            try campaigns.start(connection, id: id)
            let lost = try #require(try campaigns.leaseChunk(connection, owner: "worker-a", apps: ["shop", "news"], leaseSeconds: 1.5))
            #expect(try campaigns.checkpoint(connection, lost, ChunkProgress(position: 300, sent: 300), leaseSeconds: 1.5) == .proceed)
            #expect(try campaigns.leaseChunk(connection, owner: "worker-b", apps: ["shop", "news"], leaseSeconds: 30) == nil)
            usleep(2_000_000)
            let taken = try #require(try campaigns.leaseChunk(connection, owner: "worker-b", apps: ["shop", "news"], leaseSeconds: 30))
            #expect(taken.chunk == lost.chunk)
            #expect(taken.startIndex == 300)
            #expect(taken.targets.first?.index == 300)
            #expect(taken.targets.first?.token == Fixtures.token(301))
            #expect(taken.targets.count == 700)
            #expect(try campaigns.checkpoint(connection, lost, ChunkProgress(position: 600, sent: 300), leaseSeconds: 30) == .leaseLost)
            #expect(try campaigns.finish(connection, taken, ChunkProgress(position: 1000, sent: 700)) == .stop(.done))
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.status == .done && campaign.sent == 1000)
        }
    }

    @Test func pauseStopsWorkersAndLeasingAndResumeContinuesWhereItStopped() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 3000)
            try campaigns.start(connection, id: id)
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30))
            #expect(try campaigns.pause(connection, id: id) == .paused)
            let directive = try campaigns.checkpoint(connection, chunk, ChunkProgress(position: 400, sent: 400), leaseSeconds: 30)
            #expect(directive == .stop(.paused))
            try campaigns.release(connection, chunk, ChunkProgress(position: 400))
            #expect(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30) == nil)
            #expect(Fixtures.queueError { try campaigns.pause(connection, id: id) }?.message
                    == "cannot pause campaign \(id): it is paused, and only a campaign that is running or scheduled can be")
            #expect(try campaigns.resume(connection, id: id) == .running)
            let resumed = try #require(try campaigns.leaseChunk(connection, owner: "w2", apps: ["shop", "news"], leaseSeconds: 30))
            #expect(resumed.chunk == chunk.chunk && resumed.startIndex == 400)
            #expect(try campaigns.campaign(connection, id: id)?.sent == 400)
        }
    }

    @Test func cancelStopsTheCampaignAndItsTargetsCanThenBeDropped() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 2500)
            try campaigns.start(connection, id: id)
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30))
            #expect(Fixtures.queueError { try campaigns.dropTargets(connection, id: id) }?.message
                    == "campaign \(id) is running; only the targets of a done or cancelled campaign can be dropped")
            #expect(try campaigns.cancel(connection, id: id) == .cancelled)
            #expect(try campaigns.checkpoint(connection, chunk, ChunkProgress(position: 10, sent: 10), leaseSeconds: 30) == .stop(.cancelled))
            #expect(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30) == nil)
            #expect(Fixtures.queueError { try campaigns.resume(connection, id: id) } != nil)
            // The chunk being sent stays until its worker has recorded its last answers.
            #expect(try campaigns.dropTargets(connection, id: id) == 1500)
            #expect(try campaigns.chunksStillSending(connection, id: id) == 1)
            #expect(try campaigns.dropCancelledChunks(connection, apps: ["shop"]).isEmpty)
            #expect(try campaigns.release(connection, chunk, ChunkProgress(position: 15, sent: 5)) == .stop(.cancelled))
            #expect(try campaigns.chunksStillSending(connection, id: id) == 0)
            #expect(try campaigns.dropCancelledChunks(connection, apps: ["news"]).isEmpty)
            let swept = try campaigns.dropCancelledChunks(connection, apps: ["shop"])
            #expect(swept.map { [$0.campaignID, Int64($0.chunks), Int64($0.unsent)] } == [[id, 1, Int64(chunk.size - 15)]])
            #expect(try campaigns.dropTargets(connection, id: id) == 0)
            #expect(try connection.query("SELECT count(*) FROM pushd.campaign_targets").require(Int.self, row: 0, column: 0) == 0)
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.status == .cancelled && campaign.targets == 2500 && campaign.sent == 15)
            #expect(Fixtures.queueError { try campaigns.importTargets(connection, campaignID: id, targets: [(Fixtures.token(1), nil)]) }?
                .message == "cannot import targets: campaign \(id) is cancelled")
        }
    }

    @Test func campaignsAreListedNewestFirstByAppAndStatus() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let first = try makeCampaign(connection, targets: 10)
            let second = try makeCampaign(connection, targets: 20)
            let other = try campaigns.create(connection, NewCampaign(app: "news", name: "digest", payload: Fixtures.payload))
            try campaigns.start(connection, id: second)
            #expect(try campaigns.campaigns(connection, limit: 10).map(\.id) == [other, second, first])
            #expect(try campaigns.campaigns(connection, app: "shop", limit: 10).map(\.id) == [second, first])
            #expect(try campaigns.campaigns(connection, status: .running, limit: 10).map(\.id) == [second])
            #expect(try campaigns.campaigns(connection, app: "news", status: .running, limit: 10).isEmpty)
            #expect(try campaigns.campaigns(connection, limit: 1).map(\.id) == [other])
            let listed = try #require(try campaigns.campaigns(connection, app: "shop", limit: 1).first)
            #expect(listed == (try campaigns.campaign(connection, id: second)))
            #expect(listed.targets == 20 && listed.name == "winter sale" && listed.status == .running)
        }
    }

    @Test func aScheduledCampaignIsNotLeasedBeforeItsStartTime() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 10, startAt: Timestamp().addingTimeInterval(3600))
            #expect(try campaigns.start(connection, id: id) == .scheduled)
            #expect(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30) == nil)
            try connection.query("UPDATE pushd.campaigns SET start_at = now() - interval '1 second' WHERE id = $1", [id])
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30))
            #expect(chunk.campaignID == id)
            #expect(try campaigns.campaign(connection, id: id)?.status == .running)
        }
    }

    /// Chunks leased by a lease whose answer its worker did not read, given back: the lease
    /// each replaced is put back, so that a chunk whose earlier worker died mid-chunk is still
    /// taken over from that one (the next leaser warns that its targets since the checkpoint
    /// go again); a chunk that was free is free again; chunks the worker holds stay its own.
    @Test func aGivenBackLeasePutsBackTheLeaseItReplaced() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 300, chunkSize: 100)
            try campaigns.start(connection, id: id)
            let apps = ["shop", "news"]
            let dead = try #require(try campaigns.leaseChunk(connection, owner: "dead", apps: apps, leaseSeconds: 30))
            try connection.query("UPDATE pushd.campaign_chunks SET lease_until = now() - interval '1 second' WHERE campaign_id = $1 AND chunk = $2",
                                 [id, dead.chunk])
            let taken = try #require(try campaigns.leaseChunk(connection, owner: "w1", apps: apps, leaseSeconds: 30))
            #expect(taken.chunk == dead.chunk && taken.expiredOwner == "dead")
            let free = try #require(try campaigns.leaseChunk(connection, owner: "w1", apps: apps, leaseSeconds: 30))
            let held = try #require(try campaigns.leaseChunk(connection, owner: "w1", apps: apps, leaseSeconds: 30))
            #expect(free.expiredOwner == nil && held.expiredOwner == nil)

            let heldKey = CampaignStore.ChunkKey(campaignID: id, chunk: held.chunk)
            let given = try campaigns.releaseUnheldLeases(connection, owner: "w1", holding: [heldKey])
            #expect(Set(given.map(\.chunk.chunk)) == [taken.chunk, free.chunk])
            #expect(given.first { $0.chunk.chunk == taken.chunk }?.replacedOwner == "dead")
            #expect(given.first { $0.chunk.chunk == free.chunk }?.replacedOwner == nil)
            #expect(try campaigns.stillLeased(connection, owner: "w1", among: [heldKey, CampaignStore.ChunkKey(campaignID: id, chunk: taken.chunk)])
                    == [heldKey])

            let next = try #require(try campaigns.leaseChunk(connection, owner: "w2", apps: apps, leaseSeconds: 30))
            #expect(next.chunk == taken.chunk && next.expiredOwner == "dead")
            let after = try #require(try campaigns.leaseChunk(connection, owner: "w2", apps: apps, leaseSeconds: 30))
            #expect(after.chunk == free.chunk && after.expiredOwner == nil)
            #expect(try campaigns.leaseChunk(connection, owner: "w2", apps: apps, leaseSeconds: 30) == nil)

            // Released in the ordinary way, the chunk taken from "dead" is free: a lease of it
            // given back later leaves it free, not "dead"'s again.
            try campaigns.release(connection, next, ChunkProgress(position: next.startIndex))
            let again = try #require(try campaigns.leaseChunk(connection, owner: "w3", apps: apps, leaseSeconds: 30))
            #expect(again.chunk == next.chunk && again.expiredOwner == nil)
            let none = try campaigns.releaseUnheldLeases(connection, owner: "w3", holding: [])
            #expect(none.count == 1 && none.first?.replacedOwner == nil && none.first?.replacedUntil == nil)
            let last = try #require(try campaigns.leaseChunk(connection, owner: "w4", apps: apps, leaseSeconds: 30))
            #expect(last.chunk == next.chunk && last.expiredOwner == nil)
        }
    }

    @Test func aRateCappedCampaignHandsOutTheNextChunkOnlyWhenTheCapAllows() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 300, chunkSize: 100, rateLimit: 100)
            try campaigns.start(connection, id: id)
            let first = try #require(try campaigns.leaseChunk(connection, owner: "w1", apps: ["shop", "news"], leaseSeconds: 30))
            #expect(first.rateLimit == 100)
            #expect(try campaigns.leaseChunk(connection, owner: "w2", apps: ["shop", "news"], leaseSeconds: 30) == nil)
            let wait = try connection.query("""
                SELECT extract(epoch FROM next_lease_at - now())::float8 FROM pushd.campaigns WHERE id = $1
                """, [id]).require(Double.self, row: 0, column: 0)
            // 100 targets at 100/s put the next lease 1 s after this one (read a moment later).
            #expect(wait > 0.2 && wait <= 1.0)
        }
    }

    /// A chunk stopped with targets unsent (for an APNs outage) gives back the time its lease
    /// reserved for them at the cap, so the campaign's next chunk is leased at once; not to
    /// before now, not when a deferral has moved the next lease past the reservation since,
    /// not while another session holds the campaign's row, and not for an uncapped campaign.
    @Test func aStoppedChunkGivesBackTheTimeItsUnsentTargetsReservedAtTheCap() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 300, chunkSize: 100, rateLimit: 10)
            try campaigns.start(connection, id: id)
            let wait = {
                try connection.query("SELECT extract(epoch FROM next_lease_at - now())::float8 FROM pushd.campaigns WHERE id = $1", [id])
                    .get(Double.self, row: 0, column: 0)
            }
            // The latest the lease's reservation can end: its database time plus its targets' time at 10/s.
            let reserved = { (chunk: CampaignChunk) in
                Timestamp(timeIntervalSince1970: chunk.leaseUntil.timeIntervalSince1970 - 30 + Double(chunk.size - chunk.startIndex) / 10)
            }
            let first = try #require(try campaigns.leaseChunk(connection, owner: "w1", apps: ["shop"], leaseSeconds: 30))
            #expect(try wait().map { $0 > 9 && $0 <= 10 } == true)
            #expect(try campaigns.leaseChunk(connection, owner: "w2", apps: ["shop"], leaseSeconds: 30) == nil)
            // One target sent, 99 not: 9.9 of the 10 s come back, the sent target's tenth stays.
            #expect(try campaigns.givePaceBack(connection, campaignID: id, unsent: 99, rate: 10, reservedUntil: reserved(first)))
            #expect(try wait().map { $0 <= 0.1 } == true)
            try campaigns.release(connection, first, ChunkProgress(position: 1, sent: 1))
            Thread.sleep(forTimeInterval: 0.15)
            let second = try #require(try campaigns.leaseChunk(connection, owner: "w2", apps: ["shop"], leaseSeconds: 30))
            #expect(second.campaignID == id && second.chunk == first.chunk && second.startIndex == 1)
            #expect(try wait().map { $0 > 9 } == true)
            // The campaign's row locked by another session: nothing given back, nothing waited for.
            let other = try database.connect()
            defer { other.close() }
            _ = try other.execute(script: "BEGIN; SELECT 1 FROM pushd.campaigns WHERE id = \(id) FOR UPDATE")
            #expect(try !campaigns.givePaceBack(connection, campaignID: id, unsent: 99, rate: 10, reservedUntil: reserved(second)))
            _ = try other.execute(script: "COMMIT")
            #expect(try wait().map { $0 > 9 } == true)
            // More than was reserved: the next lease is not set before now.
            let before = Timestamp().timeIntervalSince1970
            #expect(try campaigns.givePaceBack(connection, campaignID: id, unsent: 10_000, rate: 10, reservedUntil: reserved(second)))
            let nextLease = try #require(try connection.query("SELECT extract(epoch FROM next_lease_at)::float8 FROM pushd.campaigns WHERE id = $1", [id])
                .get(Double.self, row: 0, column: 0))
            #expect(nextLease >= before - 0.01 && nextLease <= before + 1)
            #expect(try !campaigns.givePaceBack(connection, campaignID: id, unsent: 5, rate: 10, reservedUntil: reserved(second)), "nothing reserved is left to give back")
            #expect(try !campaigns.givePaceBack(connection, campaignID: id, unsent: 0, rate: 10, reservedUntil: reserved(second)))
            // A deferral since (a hold) moved the next lease past this lease's reservation: left alone.
            let third = try #require(try campaigns.leaseChunk(connection, owner: "w3", apps: ["shop"], leaseSeconds: 30))
            #expect(third.chunk != second.chunk)
            try campaigns.deferLeases(connection, campaignID: id, seconds: 60)
            #expect(try !campaigns.givePaceBack(connection, campaignID: id, unsent: 100, rate: 10, reservedUntil: reserved(third)))
            #expect(try wait().map { $0 > 59 } == true)
            let uncapped = try makeCampaign(connection, targets: 100, chunkSize: 100)
            try campaigns.start(connection, id: uncapped)
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w4", apps: ["shop"], leaseSeconds: 30, skipping: [id]))
            #expect(try !campaigns.givePaceBack(connection, campaignID: uncapped, unsent: 100, rate: 10, reservedUntil: reserved(chunk)))
        }
    }

    /// A capped campaign paused in the middle of a chunk: the chunk the pause stopped gives
    /// back the time its lease reserved for its unsent targets, so the campaign is leased at
    /// once when it is resumed, not after the rest of that time.
    @Test func aResumedCappedCampaignIsLeasedAtOnce() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try makeCampaign(connection, targets: 200, chunkSize: 100, rateLimit: 10)
            try campaigns.start(connection, id: id)
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w1", apps: ["shop"], leaseSeconds: 30))
            #expect(try campaigns.pause(connection, id: id) == .paused)
            #expect(try campaigns.release(connection, chunk, ChunkProgress(position: 5, sent: 5)) == .stop(.paused))
            let reservedUntil = Timestamp(timeIntervalSince1970: chunk.leaseUntil.timeIntervalSince1970 - 30 + 10)
            #expect(try campaigns.givePaceBack(connection, campaignID: id, unsent: 95, rate: 10, reservedUntil: reservedUntil))
            Thread.sleep(forTimeInterval: 0.6)
            #expect(try campaigns.resume(connection, id: id) == .running)
            let next = try #require(try campaigns.leaseChunk(connection, owner: "w2", apps: ["shop"], leaseSeconds: 30),
                                    "the 10 s its first lease reserved are not waited out after the pause")
            #expect(next.campaignID == id)
        }
    }

    @Test func aParkedTargetsAnswersAreCountedLikeAChunksIncludingTokensKeptByTheTimestampRule() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "parked", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: id, targets: (1...3).map { (Fixtures.token($0), nil) })
            try campaigns.start(connection, id: id)
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))
            let parked = chunk.targets.map {
                ParkedTarget(campaignID: id, chunk: chunk.chunk, position: $0.index, token: $0.token, payload: nil,
                             dueAt: Timestamp().addingTimeInterval(-1), attempts: 1, firstAttemptAt: Timestamp(), lastError: "ServiceUnavailable")
            }
            try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size), parking: parked)
            let batch = try #require(try campaigns.claimParked(connection, limit: 10, apps: ["shop"]))
            var outcomes = ParkedOutcomes()
            outcomes.sent = 1
            outcomes.failedByReason = ["Unregistered": 2]
            outcomes.pruned = 1
            outcomes.keptTokens = 1
            #expect(try campaigns.settleParked(connection, batch, outcomes) == [id])
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.status == .done)
            #expect(campaign.sent == 1 && campaign.failed == 2 && campaign.pruned == 1)
            #expect(campaign.keptTokens == 1)
        }
    }

    /// An instance with only a certificate for an app leaves the parked targets of the app's
    /// campaigns of a token-only push type to one with a token key; its other campaigns' it takes.
    @Test func aParkedClaimLeavingTokenOnlyPushesSkipsTheTargetsOfSuchCampaigns() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            func park(pushType: String, payload: String, seed: Int) throws -> Int64 {
                let id = try campaigns.create(connection, NewCampaign(app: "shop", name: pushType, pushType: pushType, payload: payload))
                try campaigns.importTargets(connection, campaignID: id, targets: [(Fixtures.token(seed), nil)])
                try campaigns.start(connection, id: id)
                let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))
                let parked = chunk.targets.map { target in
                    ParkedTarget(campaignID: id, chunk: chunk.chunk, position: target.index, token: target.token, payload: nil,
                                 dueAt: Timestamp().addingTimeInterval(-1), attempts: 0, firstAttemptAt: Timestamp(),
                                 lastError: "TokenAuthenticationRequired: left", environment: nil)
                }
                try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size), parking: parked)
                return id
            }
            let scores = try park(pushType: "liveactivity", payload: #"{"aps":{"timestamp":1,"event":"update","content-state":{}}}"#, seed: 1)
            let news = try park(pushType: "alert", payload: Fixtures.payload, seed: 2)
            let leaving = JobQueue.Leaving(home: ["shop": "production"], tokenOnly: ["shop"], tokenOnlyPushTypes: ["liveactivity", "location"])

            let batch = try #require(try campaigns.claimParked(connection, limit: 10, apps: ["shop"], leaving: leaving))
            #expect(batch.campaignID == news && batch.targets.map(\.token) == [Fixtures.token(2)])
            var outcomes = ParkedOutcomes()
            outcomes.sent = 1
            try campaigns.settleParked(connection, batch, outcomes)
            #expect(try campaigns.claimParked(connection, limit: 10, apps: ["shop"], leaving: leaving) == nil)
            // An instance with a key claims them.
            let keyed = try #require(try campaigns.claimParked(connection, limit: 10, apps: ["shop"]))
            #expect(keyed.campaignID == scores && keyed.targets.map(\.token) == [Fixtures.token(1)])
            try campaigns.settleParked(connection, keyed, outcomes)
        }
    }

    /// An instance without credentials for an environment leaves that environment's parked
    /// targets to one that has them: a target's environment is the one it was parked with,
    /// else its campaign's, else the app's; the plain claim takes them all.
    @Test func aParkedClaimLeavingAnEnvironmentTakesOnlyTheOtherEnvironmentsTargets() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            func park(campaignEnvironment: String?, targets: [(seed: Int, environment: String?)]) throws -> Int64 {
                let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "mixed", environment: campaignEnvironment,
                                                                      payload: Fixtures.payload))
                try campaigns.importTargets(connection, campaignID: id, targets: targets.map { (Fixtures.token($0.seed), nil) })
                try campaigns.start(connection, id: id)
                let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))
                let parked = zip(chunk.targets, targets).map { target, wanted in
                    ParkedTarget(campaignID: id, chunk: chunk.chunk, position: target.index, token: target.token, payload: nil,
                                 dueAt: Timestamp().addingTimeInterval(-1), attempts: 0, firstAttemptAt: Timestamp(),
                                 lastError: "NoCredentialsForEnvironment: left", environment: wanted.environment)
                }
                try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size), parking: parked)
                return id
            }
            // The app's own environment is production; the campaign names none.
            let mixed = try park(campaignEnvironment: nil, targets: [(1, "sandbox"), (2, "production"), (3, nil)])
            // A sandbox campaign's target parked without an environment goes to the sandbox.
            let beta = try park(campaignEnvironment: "sandbox", targets: [(4, nil)])
            let leaving = JobQueue.Leaving(environments: ["shop": "sandbox"], home: ["shop": "production"])

            let batch = try #require(try campaigns.claimParked(connection, limit: 10, apps: ["shop"], leaving: leaving))
            #expect(batch.campaignID == mixed)
            #expect(batch.targets.map(\.token).sorted() == [Fixtures.token(2), Fixtures.token(3)].sorted())
            var outcomes = ParkedOutcomes()
            outcomes.sent = 2
            try campaigns.settleParked(connection, batch, outcomes)
            #expect(try campaigns.claimParked(connection, limit: 10, apps: ["shop"], leaving: leaving) == nil)
            // Another app's leaving changes nothing for shop.
            let other = JobQueue.Leaving(environments: ["news": "sandbox"], home: ["news": "production"])
            let plain = try #require(try campaigns.claimParked(connection, limit: 10, apps: ["shop", "news"], leaving: other))
            #expect(plain.targets.count == 1)
            outcomes.sent = 1
            try campaigns.settleParked(connection, plain, outcomes)
            let last = try #require(try campaigns.claimParked(connection, limit: 10, apps: ["shop"]))
            #expect(last.targets.count == 1)
            try campaigns.settleParked(connection, last, outcomes)
            #expect(Set([plain.targets[0].token, last.targets[0].token]) == [Fixtures.token(1), Fixtures.token(4)])
            for id in [mixed, beta] { #expect(try campaigns.campaign(connection, id: id)?.status == .done) }
        }
    }

    /// A chunk stopped early is released past the targets it sent, its waiting ones parked in
    /// the same transaction; the next lease starts at the first target never sent. The targets
    /// whose answer held their topic or paused their app become due with the hold's end
    /// (`HeldWork.release`), the others keep their time.
    @Test func aChunkReleasedWithParkedTargetsIsLeasedAgainFromItsFirstUnsentTarget() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "stopped", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: id, targets: (1...6).map { (Fixtures.token($0), nil) })
            try campaigns.start(connection, id: id)
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))
            let later = Timestamp().addingTimeInterval(600)
            let reasons = ["HTTP 503 ServiceUnavailable", HeldWork.errorPrefix + "TopicDisallowed", HeldWork.pausedPrefix + "InvalidProviderToken"]
            let parked = chunk.targets.prefix(3).enumerated().map { offset, target in
                ParkedTarget(campaignID: id, chunk: chunk.chunk, position: target.index, token: target.token, payload: nil,
                             dueAt: later, attempts: 1, firstAttemptAt: Timestamp(), lastError: reasons[offset])
            }
            // Targets 0–2 wait, 3 was sent, 4 and 5 never were.
            #expect(try campaigns.release(connection, chunk, ChunkProgress(position: 4, sent: 1), parking: parked) == .proceed)
            #expect(try connection.query("SELECT count(*) FROM pushd.campaign_retries").require(Int.self, row: 0, column: 0) == 3)
            let again = try #require(try campaigns.leaseChunk(connection, owner: "w2", apps: ["shop"], leaseSeconds: 30))
            #expect(again.chunk == chunk.chunk)
            #expect(again.targets.map(\.index) == [4, 5])

            #expect(try HeldWork().release(connection, app: "shop") == 2)
            let due = try connection.query("SELECT last_error FROM pushd.campaign_retries WHERE due_at <= now() ORDER BY position")
                .rows.map { try $0.require(0, as: String.self) }
            #expect(due == Array(reasons.dropFirst()))
        }
    }

    @Test func aFileImportLeavesOutTokensPrunedForTheCampaignsAppAndEnvironment() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let tokens = TokenStore()
            // 1: pruned in production; 2: pruned in sandbox; 3: pruned for another app;
            // 4: pruned, then registered again; 5: live; 6: never heard of.
            try tokens.prune(connection, [
                TokenPrune(app: "shop", token: Fixtures.token(1), reason: "Unregistered", apnsTimestamp: nil, environment: "production"),
                TokenPrune(app: "shop", token: Fixtures.token(2), reason: "BadDeviceToken", apnsTimestamp: nil, environment: "sandbox"),
                TokenPrune(app: "blog", token: Fixtures.token(3), reason: "Unregistered", apnsTimestamp: nil),
                TokenPrune(app: "shop", token: Fixtures.token(4), reason: "Unregistered", apnsTimestamp: nil),
            ])
            try tokens.register(connection, app: "shop", token: Fixtures.token(4))
            try tokens.register(connection, app: "shop", token: Fixtures.token(5))
            let list = (1...6).map { (token: Fixtures.token($0).uppercased(), payload: String?.none) }

            let production = try campaigns.create(connection, NewCampaign(app: "shop", name: "p", environment: "production", payload: Fixtures.payload))
            #expect(try campaigns.importTargets(connection, campaignID: production, targets: list)
                    == TargetImportResult(imported: 5, duplicatesDropped: 0, prunedDropped: 1))
            // Imported again: all are in the campaign or pruned, and each is counted once.
            #expect(try campaigns.importTargets(connection, campaignID: production, targets: list)
                    == TargetImportResult(imported: 0, duplicatesDropped: 5, prunedDropped: 1))
            let anyEnvironment = try campaigns.create(connection, NewCampaign(app: "shop", name: "a", payload: Fixtures.payload))
            #expect(try campaigns.importTargets(connection, campaignID: anyEnvironment, targets: list)
                    == TargetImportResult(imported: 4, duplicatesDropped: 0, prunedDropped: 2))
            #expect(try campaigns.campaign(connection, id: anyEnvironment)?.targets == 4)
        }
    }

    @Test func importFromRegisteredTokensTakesLiveTokensMatchingTheFilter() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let tokens = TokenStore()
            for seed in 1...25 {
                try tokens.register(connection, app: "shop", token: Fixtures.token(seed), userID: "u\(seed % 5)",
                                    environment: seed % 2 == 0 ? "sandbox" : "production")
            }
            try tokens.register(connection, app: "blog", token: Fixtures.token(99))
            try tokens.prune(connection, app: "shop", token: Fixtures.token(1), reason: "Unregistered", apnsTimestamp: Timestamp().addingTimeInterval(60))
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "all", payload: Fixtures.payload))
            #expect(try campaigns.importFromDeviceTokens(connection, campaignID: id, environment: "production", chunkSize: 4).imported == 12)
            // u0 has five live tokens; the three in production are in the campaign already.
            #expect(try campaigns.importFromDeviceTokens(connection, campaignID: id, userIDs: ["u0"])
                    == TargetImportResult(imported: 2, duplicatesDropped: 3))
            let campaign = try #require(try campaigns.campaign(connection, id: id))
            #expect(campaign.targets == 14 && campaign.chunksTotal == 4)
            try campaigns.start(connection, id: id)
            var all = [String]()
            while let chunk = try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30) {
                all += chunk.targets.map(\.token)
                try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size, sent: chunk.size))
            }
            #expect(all.count == 14 && Set(all).count == 14)
            #expect(!all.contains(Fixtures.token(1)) && !all.contains(Fixtures.token(99)))
        }
    }

    /// Registered tokens are chunked by environment apart, each chunk records the environment
    /// its targets go to, and the lease passes over a campaign's chunks of one environment
    /// while handing out its others: a later import's production chunks are not held behind an
    /// earlier import's sandbox chunk.
    @Test func theLeasePassesOverTheChunksOfOneEnvironmentAndHandsOutTheOthers() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            try connection.query("""
                INSERT INTO pushd.device_tokens (app, token, environment)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), CASE WHEN g <= 10 THEN 'production' ELSE 'sandbox' END
                FROM generate_series(1, 18) g
                """)
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "registered", payload: Fixtures.payload))
            #expect(try campaigns.importFromDeviceTokens(connection, campaignID: id, chunkSize: 4).imported == 18)
            // A later import: production tokens registered since.
            try connection.query("""
                INSERT INTO pushd.device_tokens (app, token, environment)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), 'production' FROM generate_series(101, 106) g
                """)
            #expect(try campaigns.importFromDeviceTokens(connection, campaignID: id, chunkSize: 4).imported == 6)
            let tags = try connection.query("SELECT coalesce(environment, 'none') || ' ' || size FROM pushd.campaign_chunks WHERE campaign_id = \(id) ORDER BY chunk")
            #expect(try (0..<tags.rowCount).map { try tags.require(String.self, row: $0, column: 0) }
                    == ["production 4", "production 4", "production 2", "sandbox 4", "sandbox 4", "production 4", "production 2"])
            try campaigns.start(connection, id: id)
            var leased = [Int: String?]()
            while let chunk = try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30,
                                                        skippingChunksTo: ["sandbox": [id]]) {
                leased[chunk.chunk] = chunk.targetsEnvironment
                #expect(chunk.targets.environments.allSatisfy { chunk.targetsEnvironment == nil || $0 == chunk.targetsEnvironment })
                try campaigns.finish(connection, chunk, ChunkProgress(position: chunk.size, sent: chunk.size))
            }
            #expect(leased == [0: "production", 1: "production", 2: "production", 5: "production", 6: "production"])
            // Passed over whole, nothing; then the sandbox chunks, to the previous version's lease too.
            #expect(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30, skipping: [id]) == nil)
            #expect(try connection.query("SELECT leased_chunk FROM pushd.lease_campaign_chunk('old', 30, '{shop}', '{}')")
                        .require(Int.self, row: 0, column: 0) == 3)
            let sandbox = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30,
                                                                 skippingChunksTo: ["production": [id]]))
            #expect(sandbox.chunk == 4 && sandbox.targetsEnvironment == "sandbox")
            // A file import's chunk records none: never passed over by environment.
            try campaigns.importTargets(connection, campaignID: id, targets: [(String(repeating: "ef", count: 32), nil)])
            let file = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30,
                                                              skippingChunksTo: ["production": [id], "sandbox": [id]]))
            #expect(file.chunk == 7 && file.targetsEnvironment == nil)
            #expect(throws: QueueError.self) {
                try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30, skippingChunksTo: ["staging": [id]])
            }
        }
    }

    @Test func queueStatsReportDepthOldestAgeAndCampaignProgressInOneRead() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload, run_at)
                SELECT CASE WHEN g <= 3 THEN 'shop' ELSE 'blog' END, lpad(to_hex(g), 64, '0'), '{}',
                       CASE WHEN g = 5 THEN now() + interval '1 hour' ELSE now() - interval '30 seconds' END
                FROM generate_series(1, 5) g
                """)
            let id = try makeCampaign(connection, targets: 50)
            try campaigns.start(connection, id: id)
            let chunk = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop", "news"], leaseSeconds: 30))
            _ = try campaigns.checkpoint(connection, chunk, ChunkProgress(position: 20, sent: 18, failedByReason: ["Unregistered": 2], pruned: 2),
                                         leaseSeconds: 30)
            let stats = try QueueStats.read(connection)
            let shop = try #require(stats.lanes.first { $0.lane == .transactional && $0.app == "shop" })
            #expect(shop.depth == 3 && shop.scheduled == 0 && shop.oldestAge >= 30)
            let blog = try #require(stats.lanes.first { $0.lane == .transactional && $0.app == "blog" })
            #expect(blog.depth == 1 && blog.scheduled == 1)
            let lane = try #require(stats.lanes.first { $0.lane == .campaign })
            #expect(lane.app == "shop" && lane.depth == 30)
            #expect(stats.campaigns == [CampaignProgress(id: id, app: "shop", name: "winter sale", status: .running,
                                                         targets: 50, sent: 18, failed: 2, pruned: 2)])
        }
    }
}

/// A campaign scheduled to start later is no backlog: its targets count as scheduled, not
/// as due, until its start time has come.
@Suite struct CampaignQueueStatsTests {
    let campaigns = CampaignStore()

    @Test func queueStatsCountACampaignScheduledLaterAsScheduledNotDue() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let later = try campaigns.create(connection, NewCampaign(app: "shop", name: "later", payload: Fixtures.payload,
                                                                     startAt: Timestamp().addingTimeInterval(2 * 86_400)))
            try campaigns.importTargets(connection, campaignID: later, targets: (1...1000).map { (Fixtures.token($0), nil) })
            #expect(try campaigns.start(connection, id: later) == .scheduled)
            let now = try campaigns.create(connection, NewCampaign(app: "shop", name: "now", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: now, targets: (2001...2010).map { (Fixtures.token($0), nil) })
            #expect(try campaigns.start(connection, id: now) == .running)

            let lane = try #require(try QueueStats.read(connection).lanes.first { $0.lane == .campaign && $0.app == "shop" })
            #expect(lane.depth == 10 && lane.scheduled == 1000, "\(lane)")

            // Its start time has come (no worker has started it yet): now it is due.
            try connection.query("UPDATE pushd.campaigns SET start_at = now() - interval '1 second' WHERE id = \(later)")
            let due = try #require(try QueueStats.read(connection).lanes.first { $0.lane == .campaign && $0.app == "shop" })
            #expect(due.depth == 1010 && due.scheduled == 0, "\(due)")
        }
    }

    /// The campaign lane's oldest age follows the definition of due its depth uses: a
    /// scheduled campaign whose start time has come is due from that time, before a worker
    /// starts it and after (started late, its age still runs from its start time). Before,
    /// only running campaigns were aged, from when they were started: the lane counted the
    /// due campaign's targets at age 0, then restarted its age when a worker took it.
    @Test func theCampaignLaneAgesADueScheduledCampaignFromItsStartTimeStartedOrNot() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let scheduled = try campaigns.create(connection, NewCampaign(app: "shop", name: "morning", payload: Fixtures.payload,
                                                                         startAt: Timestamp().addingTimeInterval(3600)))
            try campaigns.importTargets(connection, campaignID: scheduled, targets: (1...20).map { (Fixtures.token($0), nil) })
            #expect(try campaigns.start(connection, id: scheduled) == .scheduled)
            func lane() throws -> LaneDepth {
                try #require(try QueueStats.read(connection).lanes.first { $0.lane == .campaign && $0.app == "shop" })
            }
            #expect(try lane().depth == 0 && lane().oldestAge == 0, "scheduled later: not due, no age")

            // Its start time came 90 s ago and no worker has taken it yet.
            try connection.query("UPDATE pushd.campaigns SET start_at = now() - interval '90 seconds' WHERE id = \(scheduled)")
            let due = try lane()
            #expect(due.depth == 20, "\(due)")
            #expect(due.oldestAge >= 90 && due.oldestAge < 120, "due for 90 s: \(due)")

            // A worker starts it now, 90 s late: still due since its start time.
            _ = try #require(try campaigns.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))
            #expect(try campaigns.campaign(connection, id: scheduled)?.status == .running)
            let started = try lane()
            #expect(started.depth == 20 && started.oldestAge >= 90 && started.oldestAge < 120, "\(started)")

            // A campaign started at once is due since it was started; the lane shows the older one.
            let now = try campaigns.create(connection, NewCampaign(app: "shop", name: "now", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: now, targets: (101...105).map { (Fixtures.token($0), nil) })
            #expect(try campaigns.start(connection, id: now) == .running)
            try connection.query("UPDATE pushd.campaigns SET started_at = now() - interval '30 seconds' WHERE id = \(now)")
            let both = try lane()
            #expect(both.depth == 25 && both.oldestAge >= 90 && both.oldestAge < 120, "\(both)")

            // Paused, the older one is not due: neither its targets nor its age count.
            #expect(try campaigns.pause(connection, id: scheduled) == .paused)
            let paused = try lane()
            #expect(paused.depth == 5 && paused.oldestAge >= 30 && paused.oldestAge < 60, "\(paused)")
        }
    }

    /// A paused campaign sends nothing until it is resumed: its targets are remaining, not due.
    @Test func queueStatsCountAPausedCampaignAsRemainingButNotDue() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let paused = try campaigns.create(connection, NewCampaign(app: "shop", name: "paused", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: paused, targets: (1...40).map { (Fixtures.token($0), nil) })
            #expect(try campaigns.start(connection, id: paused) == .running)
            #expect(try campaigns.pause(connection, id: paused) == .paused)
            let running = try campaigns.create(connection, NewCampaign(app: "shop", name: "running", payload: Fixtures.payload))
            try campaigns.importTargets(connection, campaignID: running, targets: (101...103).map { (Fixtures.token($0), nil) })
            #expect(try campaigns.start(connection, id: running) == .running)

            let stats = try QueueStats.read(connection)
            let lane = try #require(stats.lanes.first { $0.lane == .campaign && $0.app == "shop" })
            #expect(lane.depth == 3 && lane.scheduled == 0, "\(lane)")
            #expect(stats.campaigns.map(\.remaining).reduce(0, +) == 43)
        }
    }
}

@Suite struct CampaignImportSessionTests {
    @Test func importsAreNotCutShortByTheSessionStatementTimeout() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let campaigns = CampaignStore()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "big", payload: Fixtures.payload))
            try connection.execute(script: "SET statement_timeout = '5ms'")
            #expect(try campaigns.importTargets(connection, campaignID: id, targets: (1...50_000).map { (Fixtures.token($0), nil) }).imported == 50_000)
            #expect(try connection.query("SHOW statement_timeout").require(String.self, row: 0, column: 0) == "5ms")
        }
    }
}
