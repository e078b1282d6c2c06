import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd status` through the command-line parser, against a real database.
@Suite struct StatusCommandTests {
    @Test func anEmptyFleetPrintsEachSectionAndExitsOne() throws {
        try IsolatedDatabase.with { database in
            let run = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(run.exitCode == 1)
            let text = run.output.text
            #expect(text.hasPrefix("pushd status at "))
            #expect(text.contains(": DEGRADED\n  problem: no live pushd instance: nothing is being sent"))
            for heading in ["Instances: 0 alive, 0 gone", "Queue", "Campaigns", "Dead letters in the last hour", "Paused apps and held scopes"] {
                #expect(text.contains("\n\(heading)\n"), "\(heading) missing in:\n\(text)")
            }
        }
    }

    @Test func aDatabaseWithoutTheRegistryAsksForMigrate() throws {
        try IsolatedDatabase.with(migrated: false) { database in
            let run = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains("run `pushd migrate`"), "\(run.output.errorText)")
        }
    }

    @Test func anIntervalOutsideItsRangeIsRefusedWithTheOptionNamed() throws {
        let run = try CommandRun(["status", "--watch", "--interval", "0", "--database-url", "postgresql://nobody@127.0.0.1:1/none"], StatusCommand.run)
        #expect(run.exitCode == 1)
        #expect(run.output.errorText.contains("--interval '0' must be a whole number from 1 to 3600"))
    }

    /// `--watch --json` is for scripts: one JSON document per line, one line per sample.
    @Test func watchWithJSONWritesOneDocumentPerLine() throws {
        try IsolatedDatabase.with { database in
            let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("pushd").path
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: binary)
            process.arguments = ["status", "--watch", "--json", "--interval", "1", "--database-url", database.url]
            process.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
            let output = Pipe()
            process.standardOutput = output
            try process.run()
            // Ends the command if it has not written two lines by then, so the read below
            // cannot hang. Two samples take about two seconds, longer on a loaded machine;
            // unflushed, they would come only with a full pipe buffer (checked below).
            // SIGKILL: the test process may hand its children a mask that blocks SIGTERM.
            let pid = process.processIdentifier
            let watchdog = DispatchWorkItem { kill(pid, SIGKILL) }
            DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: watchdog)
            defer { watchdog.cancel() }
            var received = Data()
            while received.filter({ $0 == UInt8(ascii: "\n") }).count < 2 {
                let chunk = output.fileHandleForReading.availableData
                if chunk.isEmpty { break }
                received.append(chunk)
            }
            kill(pid, SIGKILL)
            process.waitUntilExit()
            let lines = String(decoding: received, as: UTF8.self).split(separator: "\n")
            #expect(lines.count >= 2)
            // Each sample is written as it is taken: two lines, not a 4 KB buffer's worth.
            #expect(received.count < 4096, "\(received.count) bytes came with the first two lines")
            for line in lines.prefix(2) {
                let document = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
                #expect(document?["healthy"] as? Bool == false)
                #expect(document?["problems"] as? [String] == ["no live pushd instance: nothing is being sent"])
            }
        }
    }
}

/// `pushd status` against a database that takes no writes: it says so, and that the
/// instances' silence comes from it.
@Suite struct StatusReadOnlyDatabaseTests {
    @Test func aReadOnlyDatabaseIsAProblemAndExplainsTheSilentHeartbeats() throws {
        try IsolatedDatabase.with { database in
            // Opened before the database turns read-only, so it can still write (the setting
            // applies to new sessions).
            let connection = try database.connect()
            defer { connection.close() }
            try StatusCoverageTests.register(connection, host: "web1", environments: ["shop/sandbox"])
            try connection.query("ALTER DATABASE \(database.name) SET default_transaction_read_only = on")
            defer { _ = try? connection.query("ALTER DATABASE \(database.name) RESET default_transaction_read_only") }

            // At once: the instance is alive, and nothing can be written.
            let fresh = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(fresh.exitCode == 1, "\(fresh.output.text)")
            #expect(fresh.output.text.contains(": DEGRADED\n  problem: the database is read-only (transaction_read_only is on: "
                                               + "default_transaction_read_only set for the server, the database or the role): "
                                               + "pushd can record nothing (no heartbeat, claim, outcome or checkpoint) and sends nothing "
                                               + "until it takes writes again"), "\(fresh.output.text)")

            // Later: the heartbeat has stood still for over a minute, because it cannot be written.
            try connection.query("UPDATE pushd.instances SET heartbeat_at = now() - interval '73 seconds'")
            let later = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            let text = later.output.text
            #expect(later.exitCode == 1)
            #expect(text.contains("  problem: the database is read-only "), "\(text)")
            #expect(text.contains("  problem: no live pushd instance shown: none can write its heartbeat to the read-only database, "
                                  + "so running ones look gone; nothing is being sent"), "\(text)")
            #expect(text.contains("has been silent for 1m13s: the database takes no writes, so no heartbeat can be written; it may still be running"),
                    "\(text)")
            #expect(!text.contains("killed, frozen or cut off"), "\(text)")

            let json = try CommandRun(["status", "--json", "--database-url", database.url], StatusCommand.run)
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.output.text.utf8)) as? [String: Any])
            #expect(document["database_writes"] as? String == "read_only", "\(json.output.text)")
            #expect(document["healthy"] as? Bool == false)
        }
    }

    @Test func aWritableDatabaseIsNotCalledReadOnly() throws {
        try IsolatedDatabase.with { database in
            let json = try CommandRun(["status", "--json", "--database-url", database.url], StatusCommand.run)
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.output.text.utf8)) as? [String: Any])
            #expect(document["database_writes"] as? String == "yes", "\(json.output.text)")
            #expect(!json.output.text.contains("read-only"), "\(json.output.text)")
        }
    }
}

/// A campaign scheduled to start later is shown as scheduled work with its start time, not
/// as a due backlog.
@Suite struct StatusScheduledCampaignTests {
    @Test func aCampaignScheduledTwoDaysOutIsScheduledNotDueAndShowsItsStart() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            let campaigns = CampaignStore()
            let startAt = Timestamp(timeIntervalSince1970: (Timestamp().timeIntervalSince1970 + 2 * 86_400 + 1800).rounded())
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "a", payload: #"{"aps":{"alert":"hi"}}"#, startAt: startAt))
            try campaigns.importTargets(connection, campaignID: id, targets: (1...1000).map { (String(format: "%064x", $0), nil) })
            #expect(try campaigns.start(connection, id: id) == .scheduled)
            try StatusCoverageTests.register(connection, host: "web1", environments: ["shop/sandbox"])

            let run = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            let text = run.output.text
            let rows = text.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
            #expect(rows.contains(["shop", "campaign", "0", "1000", "0", "-", "yes"]), "\(text)")
            let campaignRow = try #require(text.split(separator: "\n").first { $0.hasSuffix(" a") }, "\(text)")
            #expect(campaignRow.contains(" scheduled ") && campaignRow.contains("  \(TimeText.moment(startAt)) (in 2d00h)  a"), "\(text)")
            #expect(run.exitCode == 0, "\(text)")

            let json = try CommandRun(["status", "--json", "--database-url", database.url], StatusCommand.run)
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.output.text.utf8)) as? [String: Any])
            let queue = try #require((document["queue"] as? [[String: Any]])?.first { $0["lane"] as? String == "campaign" }, "\(json.output.text)")
            #expect(queue["due"] as? Int == 0 && queue["scheduled"] as? Int == 1000, "\(json.output.text)")
            let campaign = try #require((document["campaigns"] as? [[String: Any]])?.first, "\(json.output.text)")
            #expect(campaign["status"] as? String == "scheduled")
            #expect(campaign["start_at"] as? String == startAt.iso8601, "\(json.output.text)")
        }
    }
}

/// `pushd status` shows what each live instance advertises in the registry and what it
/// leaves to the others, read back from the database.
@Suite struct StatusCoverageTests {
    static func register(_ connection: PGConnection, host: String, environments: [String]) throws {
        _ = try InstanceStore().heartbeat(connection, InstanceRegistration(host: host, pid: 7, version: "1.0.0", libcurlVersion: "8.14.1",
                                                                           apps: ["shop"], environments: environments,
                                                                           startedAt: Timestamp()), paused: [:])
    }

    @Test func registeredCredentialsAndWorkLeftToOtherInstancesAreShownFromTheDatabase() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            try Self.register(connection, host: "web1", environments: ["shop/sandbox"])
            try Self.register(connection, host: "web2", environments: ["shop/production", "shop/sandbox", "shop/token"])

            let run = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            let text = run.output.text
            #expect(run.exitCode == 0, "\(text)")
            let rows = text.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
            #expect(rows.contains(["web1/7", "shop", "sandbox", "no", "production,token"]), "\(text)")
            #expect(rows.contains(["web2/7", "shop", "production,sandbox", "yes", "-"]), "\(text)")
            #expect(!text.contains("no live instance has a token key"), "\(text)")

            let json = try CommandRun(["status", "--json", "--database-url", database.url], StatusCommand.run)
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.output.text.utf8)) as? [String: Any])
            let instances = document["instances"] as? [[String: Any]] ?? []
            let web1 = try #require(instances.first { $0["id"] as? String == "web1/7" }, "\(json.output.text)")
            #expect(web1["environments"] as? [String] == ["shop/sandbox"])
            #expect(web1["left_to_other_instances"] as? [[String: String]] == [
                ["app": "shop", "what": "production", "reason": "NoCredentialsForEnvironment"],
                ["app": "shop", "what": "token", "reason": "TokenAuthenticationRequired"],
            ], "\(json.output.text)")

            // The keyed instance stops: nothing is left to others any more, and the token work
            // of shop has no live instance to go to.
            try InstanceStore().remove(connection, id: "web2/7")
            let alone = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(alone.exitCode == 0, "\(alone.output.text)")
            #expect(alone.output.text.contains("  note: no live instance has a token key for app shop: "), "\(alone.output.text)")
            let after = alone.output.text.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
            #expect(after.contains(["web1/7", "shop", "sandbox", "no", "-"]), "\(alone.output.text)")
        }
    }
}

/// `pushd status` shows each app's broadcast channels and broadcast jobs, and what blocks them.
@Suite struct StatusBroadcastTests {
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#

    @Test func channelsAndBroadcastJobsPerAppAreShownAndWhatWaitsTooLongDegrades() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            // A live instance serves shop; news is served by none.
            _ = try InstanceStore().heartbeat(connection, InstanceRegistration(host: "web1", pid: 7, version: "1.0.0", libcurlVersion: "8.14.1",
                                                                               apps: ["shop"], startedAt: Timestamp()), paused: [:])
            try connection.query("""
                INSERT INTO pushd.channels (app, channel_id, state, outcome, attempts, run_at) VALUES
                    ('shop', 'AAAAAQ==', 'active', 'created', 1, now()),
                    ('shop', 'AAAAAg==', 'active', 'created', 1, now()),
                    ('shop', NULL, 'failed', '400 BadRequest', 1, now()),
                    ('shop', 'AAAAAw==', 'pending_delete', '503 ServiceUnavailable', 2, now() + interval '30 seconds'),
                    ('shop', NULL, 'pending_create', NULL, 0, now() - interval '2 minutes'),
                    ('news', NULL, 'pending_create', NULL, 0, now())
                """)
            for _ in 0..<3 {
                try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('shop', 'AAAAAQ==', $1)", [Self.update])
            }
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, run_at) VALUES ('shop', 'AAAAAQ==', $1, now() + interval '1 hour')",
                                 [Self.update])
            // One waits for a retry after a 500, due since two minutes ago; another was given up on.
            try connection.query("""
                UPDATE pushd.broadcast_jobs SET run_at = now() - interval '2 minutes', attempts = 1, last_error = '500 InternalServerError'
                WHERE id = (SELECT min(id) FROM pushd.broadcast_jobs)
                """)
            let doomed = try connection.query("SELECT max(id) FROM pushd.broadcast_jobs WHERE run_at <= now()").require(Int64.self, row: 0, column: 0)
            try BroadcastQueue().dead(connection, id: doomed, status: 400, reason: "BadRequest")

            let run = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            let text = run.output.text
            #expect(run.exitCode == 1, "\(text)")
            #expect(text.contains("\nBroadcast channels and jobs\n"), "\(text)")
            let rows = text.split(separator: "\n").map { $0.split(separator: " ", omittingEmptySubsequences: true).map(String.init) }
            // APP ACTIVE CREATING DELETING FAILED JOBS DUE SCHEDULED RETRYING OLDEST DEAD 1H SERVED
            let shop = rows.first { $0.first == "shop" && $0.last == "yes" && $0.count == 11 }
            #expect(shop.map { Array($0[0...7]) + [$0[9]] } == ["shop", "2", "1", "1", "1", "2", "1", "1", "1"], "\(text)")
            let news = rows.first { $0.first == "news" && $0.last == "NO" && $0.count == 11 }
            #expect(news.map { Array($0[1...5]) } == ["0", "1", "0", "0", "0"], "\(text)")
            #expect(text.contains("problem: broadcast jobs of app shop have been due for 2m") && text.contains("(last error: 500 InternalServerError)"), "\(text)")
            #expect(text.contains("problem: channel requests of app shop have been due for 2m"), "\(text)")
            #expect(text.contains("problem: 1 channel request(s) of app news, which no live instance serves, are waiting"), "\(text)")
            #expect(text.contains("note: 1 channel request(s) of app shop wait for a retry (last outcome: 503 ServiceUnavailable)"), "\(text)")
            #expect(text.contains("note: 1 channel request(s) of app shop failed for good"), "\(text)")

            let json = try CommandRun(["status", "--json", "--database-url", database.url], StatusCommand.run)
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.output.text.utf8)) as? [String: Any])
            let broadcast = document["broadcast"] as? [[String: Any]] ?? []
            let entry = try #require(broadcast.first { $0["app"] as? String == "shop" }, "\(json.output.text)")
            let channels = entry["channels"] as? [String: Any] ?? [:]
            let jobs = entry["jobs"] as? [String: Any] ?? [:]
            #expect(entry["served"] as? Bool == true)
            #expect(channels["active"] as? Int == 2 && channels["pending_create"] as? Int == 1 && channels["pending_delete"] as? Int == 1)
            #expect(channels["failed"] as? Int == 1 && channels["retrying"] as? Int == 1)
            #expect(channels["last_outcome"] as? String == "503 ServiceUnavailable")
            #expect(jobs["due"] as? Int == 2 && jobs["scheduled"] as? Int == 1 && jobs["retrying"] as? Int == 1)
            #expect(jobs["dead_last_hour"] as? Int == 1 && jobs["last_error"] as? String == "500 InternalServerError")
            #expect((jobs["oldest_due_seconds"] as? Double ?? 0) >= 120)
        }
    }
}

/// `pushd status` shows how many chunks of each running campaign are being sent, and a running
/// campaign that has had chunks to send and no worker on them for long degrades.
@Suite struct StatusCampaignWorkerTests {
    let campaigns = CampaignStore()

    @Test func aRunningCampaignNoWorkerHasTakenForLongDegradesAndOneBeingSentDoesNot() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            try StatusCoverageTests.register(connection, host: "web1", environments: ["shop/production"])
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "spring", payload: #"{"aps":{"alert":"Spring sale"}}"#))
            try campaigns.importTargets(connection, campaignID: id, targets: (1...4).map { (String(repeating: "a\($0)", count: 32), nil) })
            try campaigns.start(connection, id: id)

            // Just started: nobody has taken a chunk yet, which is not a problem.
            let fresh = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(fresh.exitCode == 0, "\(fresh.output.text)")
            let freshRow = fresh.output.text.split(separator: "\n").first { $0.contains("spring") }.map(String.init) ?? ""
            #expect(freshRow.contains(" 0 chunks "), "\(fresh.output.text)")

            // Started a minute ago and still no worker on it.
            try connection.query("UPDATE pushd.campaigns SET started_at = now() - interval '1 minute' WHERE id = $1", [id])
            let waiting = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(waiting.exitCode == 1, "\(waiting.output.text)")
            #expect(waiting.output.text.contains("problem: campaign \(id) of app shop has had chunks to send and no worker sending any for 1m"),
                    "\(waiting.output.text)")
            let json = try CommandRun(["status", "--json", "--database-url", database.url], StatusCommand.run)
            let document = try #require(try JSONSerialization.jsonObject(with: Data(json.output.text.utf8)) as? [String: Any])
            let row = try #require((document["campaigns"] as? [[String: Any]])?.first, "\(json.output.text)")
            #expect(row["chunks_sending"] as? Int == 0)
            #expect((row["waiting_for_worker_seconds"] as? Double ?? 0) >= 59, "\(json.output.text)")

            // A worker takes its chunk: it is being sent.
            _ = try #require(try campaigns.leaseChunk(connection, owner: "web1/7", apps: ["shop"], leaseSeconds: 30))
            let sending = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            #expect(sending.exitCode == 0, "\(sending.output.text)")
            let sendingRow = sending.output.text.split(separator: "\n").first { $0.contains("spring") }.map(String.init) ?? ""
            #expect(sendingRow.contains(" 1 chunk "), "\(sending.output.text)")
        }
    }

    /// Read from the database: the only campaign waiting is not blamed on workers busy with
    /// other campaigns (there are none; the workers are not taking chunks, e.g. cut off from
    /// the database), and its RATE is not shown as current; once an older campaign has a chunk
    /// being sent, a newer one waiting is blamed on it by name.
    @Test func theOnlyCampaignWaitingIsNotBlamedOnBusyWorkersAndAnotherBeingSentIs() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            defer { connection.close() }
            try StatusCoverageTests.register(connection, host: "web1", environments: ["shop/production"])
            func campaign(_ name: String) throws -> Int64 {
                let id = try campaigns.create(connection, NewCampaign(app: "shop", name: name, payload: #"{"aps":{"alert":"Sale"}}"#))
                try campaigns.importTargets(connection, campaignID: id, targets: (1...4).map { (String(repeating: "b\($0)", count: 32), nil) })
                try campaigns.start(connection, id: id)
                try connection.query("UPDATE pushd.campaigns SET started_at = now() - interval '1 minute', sent = 600 WHERE id = $1", [id])
                return id
            }
            let older = try campaign("spring")
            let alone = try CommandRun(["status", "--database-url", database.url], StatusCommand.run)
            let text = alone.output.text
            #expect(alone.exitCode == 1, "\(text)")
            #expect(text.contains("problem: campaign \(older) of app shop has had chunks to send and no worker sending any for 1m")
                    && text.contains("no other campaign has a chunk being sent, so the campaign workers that serve the app are not taking chunks"),
                    "\(text)")
            #expect(!text.contains("busy with other campaigns"), "\(text)")
            let row = text.split(separator: "\n").first { $0.hasSuffix(" spring") }.map(String.init) ?? ""
            #expect(row.contains(" none now ") && !row.contains("/s "), "\(text)")

            let newer = try campaign("summer")
            _ = try #require(try campaigns.leaseChunk(connection, owner: "web1/7/campaign-0", apps: ["shop"], leaseSeconds: 30))
            let busy = try CommandRun(["status", "--database-url", database.url], StatusCommand.run).output.text
            #expect(busy.contains("problem: campaign \(newer) of app shop has had chunks to send and no worker sending any for 1m"), "\(busy)")
            #expect(busy.contains("busy with other campaigns' chunks (leased oldest campaign first; being sent: campaign \(older) (1 chunk))"), "\(busy)")
        }
    }
}
