import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd campaign …` against a database of its own per test.
@Suite struct CampaignCommandTests {
    static let payload = #"{"aps":{"alert":{"title":"Sale","body":"Everything must go"}},"sale":7}"#

    static func token(_ seed: Int) -> String { String(format: "%064x", seed) }

    static func run(_ arguments: [String], _ database: IsolatedDatabase,
                    _ command: (ParsedCommand, CommandContext) throws -> Int32) throws -> CommandRun {
        // `campaign create` checks its app against a configuration: one with app shop.
        let files = try FileFixture()
        let config = arguments.first == "create" ? ["--config", try CheckConfigCommandTests.writeConfig(files, database: database.url)] : []
        return try CommandRun(["campaign"] + arguments + config + ["--database-url", database.url], command)
    }

    static func create(_ database: IsolatedDatabase, _ extra: [String] = []) throws -> Int64 {
        let run = try Self.run(["create", "--app", "shop", "--payload", payload] + extra, database) { try CampaignCommand.create($0, $1) }
        #expect(run.exitCode == 0, "\(run.output.errorText)")
        return try #require(Int64(run.output.text))
    }

    static func importTokens(_ database: IsolatedDatabase, _ id: Int64, count: Int, files: FileFixture) throws -> CommandRun {
        let list = (0..<count).map { token($0) }.joined(separator: "\n") + "\n"
        let file = try files.write("targets.txt", list)
        return try run(["import", String(id), file], database, CampaignCommand.importTargets)
    }

    // MARK: create

    @Test func createPrintsOnlyTheIdAndStoresEveryOption() throws {
        try IsolatedDatabase.with { database in
            let id = try Self.create(database, ["--name", "Spring sale", "--priority", "5", "--collapse-id", "sale",
                                                "--rate", "250", "--start-at", "2099-01-02T03:04:05Z"])
            let campaign = try #require(try CampaignStore().campaign(try database.connect(), id: id))
            #expect(campaign.app == "shop")
            #expect(campaign.name == "Spring sale")
            #expect(campaign.status == .draft)
            #expect(campaign.pushType == "alert")
            #expect(campaign.priority == 5)
            #expect(campaign.payload == Self.payload)
            #expect(campaign.rateLimit == 250)
            #expect(campaign.startAt == ISO8601DateFormatter().date(from: "2099-01-02T03:04:05Z").map { Timestamp(timeIntervalSince1970: $0.timeIntervalSince1970) })
        }
    }

    @Test func createStoresTheEnvironmentFileImportsGoTo() throws {
        try IsolatedDatabase.with { database in
            let id = try Self.create(database, ["--environment", "sandbox"])
            #expect(try database.connect().query("SELECT environment FROM pushd.campaigns WHERE id = $1", [id])
                .get(String.self, row: 0, column: 0) == "sandbox")
            let run = try Self.run(["create", "--app", "shop", "--payload", Self.payload, "--environment", "staging"], database) {
                try CampaignCommand.create($0, $1)
            }
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains("--environment 'staging' is not one of: production, sandbox"))
        }
    }

    @Test func createReadsThePayloadFromAFileOrStandardInput() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let file = try files.write("payload.json", "{\"aps\":{\"badge\":3}}\n")
            let fromFile = try Self.run(["create", "--app", "shop", "--payload-file", file], database) { try CampaignCommand.create($0, $1) }
            #expect(fromFile.exitCode == 0, "\(fromFile.output.errorText)")
            let stored = try CampaignStore().campaign(try database.connect(), id: try #require(Int64(fromFile.output.text)))
            #expect(stored?.payload == "{\"aps\":{\"badge\":3}}\n")

            let fromInput = try Self.run(["create", "--app", "shop", "--payload-file", "-"], database) {
                try CampaignCommand.create($0, $1, standardInput: { Array(#"{"aps":{"sound":"bell.caf"}}"#.utf8) })
            }
            let id = try #require(Int64(fromInput.output.text))
            #expect(try CampaignStore().campaign(try database.connect(), id: id)?.payload == #"{"aps":{"sound":"bell.caf"}}"#)
        }
    }

    @Test(arguments: [
        (["--payload", "[1,2]"], "the payload is not a JSON object"),
        (["--payload", #"{"aps":{"alert":"x"}"#], "the payload is not a JSON object: invalid JSON at byte"),
        (["--payload", #"{"aps":{"alert":"x"}}"#, "--push-type", "background"], "aps.alert: background pushes must not carry \"alert\""),
        (["--payload", #"{"aps":{"badge":"three"}}"#], "aps.badge"),
        (["--payload", #"{"aps":{"alert":""# + String(repeating: "a", count: 5000) + #""}}"#], "payload: 5020 bytes; alert payloads may have at most 4096"),
        (["--payload", "{}", "--payload-file", "/x"], "--payload or --payload-file, not both"),
        (["--payload-file", "/nonexistent/payload.json"], "--payload-file /nonexistent/payload.json cannot be read: no such file"),
        (["--payload", "{}", "--push-type", "carrier-pigeon"], "--push-type 'carrier-pigeon' is not one of: alert, background"),
        (["--payload", "{}", "--priority", "7"], "--priority 7 is not an APNs priority"),
        (["--payload", "{}", "--priority", "high"], "--priority 'high' must be a whole number from 1 to 10"),
        (["--payload", "{}", "--rate", "0"], "--rate '0' must be a whole number from 1 to 10000000"),
        (["--payload", "{}", "--start-at", "tomorrow"], "--start-at 'tomorrow' is not an ISO 8601 time"),
        (["--payload", "{}", "--collapse-id", String(repeating: "c", count: 65)], "--collapse-id is 65 bytes; APNs allows at most 64"),
    ])
    func createRefusesWhatAPNsOrTheDatabaseWouldRefuse(arguments: [String], expected: String) throws {
        try IsolatedDatabase.with { database in
            let run = try Self.run(["create", "--app", "shop"] + arguments, database) { try CampaignCommand.create($0, $1) }
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains(expected), "\(run.output.errorText)")
            #expect(try database.connect().query("SELECT count(*) FROM pushd.campaigns").require(Int.self, row: 0, column: 0) == 0)
        }
    }

    @Test func createNeedsAnApp() throws {
        try IsolatedDatabase.with { database in
            let run = try Self.run(["create", "--payload", "{}"], database) { try CampaignCommand.create($0, $1) }
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains("campaign create needs --app NAME"))
        }
    }

    @Test func createRefusesAnAppNameOutsideTheRuleAndWorksOnlyWithAConfiguration() throws {
        try IsolatedDatabase.with { database in
            for name in ["Shop", "shop.web", "-shop"] {
                let run = try Self.run(["create", "--app", name, "--payload", Self.payload], database) { try CampaignCommand.create($0, $1) }
                #expect(run.exitCode == 1)
                #expect(run.output.errorText.contains("--app '\(name)' must be 1 to 64 lower-case letters, digits, '-' or '_', starting with a letter or digit"),
                        "\(run.output.errorText)")
            }
            let files = try FileFixture()
            let missing = try CommandRun(["campaign", "create", "--app", "shop", "--payload", Self.payload, "--database-url", database.url,
                                          "--config", files.path("absent.yml")]) { try CampaignCommand.create($0, $1) }
            #expect(missing.exitCode == 1)
            #expect(missing.output.errorText.contains("campaign create checks --app against pushd's configuration, and none could be read"),
                    "\(missing.output.errorText)")
            // No --config and no default file: nothing to check the app against, so no campaign.
            #expect(!FileManager.default.fileExists(atPath: CommandContext.defaultConfigPath))
            let bare = try CommandRun(["campaign", "create", "--app", "nope", "--payload", Self.payload, "--database-url", database.url]) {
                try CampaignCommand.create($0, $1)
            }
            #expect(bare.exitCode == 1)
            #expect(bare.output.errorText.contains("campaign create checks --app against pushd's configuration, and none could be read"),
                    "\(bare.output.errorText)")
            #expect(try CampaignStore().campaigns(try database.connect(), limit: 10).isEmpty)
        }
    }

    @Test func createChecksTheAppAndTopicAgainstTheConfiguration() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let config = try CheckConfigCommandTests.writeConfig(files, database: database.url, extra: "campaigns:\n  default_rate: 900")
            let unknown = try CommandRun(["campaign", "create", "--config", config, "--app", "nope", "--payload", "{}"]) { try CampaignCommand.create($0, $1) }
            #expect(unknown.exitCode == 1)
            #expect(unknown.output.errorText.contains("--app 'nope' is not an app of the configuration (apps: shop)"))

            let known = try CommandRun(["campaign", "create", "--config", config, "--app", "shop", "--payload", Self.payload]) { try CampaignCommand.create($0, $1) }
            #expect(known.exitCode == 0, "\(known.output.errorText)")
            let campaign = try CampaignStore().campaign(try database.connect(), id: try #require(Int64(known.output.text)))
            #expect(campaign?.rateLimit == 900)
        }
    }

    /// APNs takes Live Activity and location pushes only with token authentication: for a
    /// certificate app such a campaign is refused when it is created, payload or not, instead
    /// of failing every target at send time.
    @Test(arguments: [("location", #"{"aps":{}}"#), ("liveactivity", nil)])
    func createRefusesAPushTypeTheAppsCertificateCannotSend(pushType: String, payload: String?) throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            try files.certificate("pem")
            let config = try CheckConfigCommandTests.writeConfig(files, database: database.url, apps: CheckConfigCommandTests.certificateApp(
                "legacy", "cert_file: \(files.path("pem.crt"))\nkey_file: \(files.path("pem.key"))"))
            let run = try CommandRun(["campaign", "create", "--config", config, "--app", "legacy", "--push-type", pushType]
                                     + (payload.map { ["--payload", $0] } ?? [])) { try CampaignCommand.create($0, $1) }
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains("APNs accepts \(pushType) pushes only with token (JWT) authentication, and app 'legacy' signs with a certificate"),
                    "\(run.output.errorText)")
            #expect(run.output.errorText.contains("no live instance of the fleet has a token key for app legacy"), "\(run.output.errorText)")
            #expect(try CampaignStore().campaigns(try database.connect(), limit: 10).isEmpty)
        }
    }

    /// While a live instance of the fleet has a token key for the app, the certificate in this
    /// configuration does not stop such a campaign: that instance sends it.
    @Test func createTakesATokenOnlyPushTypeWhileALiveInstanceHasATokenKeyForTheApp() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            try files.certificate("pem")
            let config = try CheckConfigCommandTests.writeConfig(files, database: database.url, apps: CheckConfigCommandTests.certificateApp(
                "legacy", "cert_file: \(files.path("pem.crt"))\nkey_file: \(files.path("pem.key"))"))
            let connection = try database.connect()
            try InstanceStore().heartbeat(connection, InstanceRegistration(host: "keyed", pid: 1, version: "test", libcurlVersion: "test", apps: ["legacy"],
                                                                           environments: ["legacy/production", "legacy/sandbox", "legacy/token"],
                                                                           startedAt: Timestamp()), paused: [:])
            let run = try CommandRun(["campaign", "create", "--config", config, "--app", "legacy", "--push-type", "location",
                                      "--payload", #"{"aps":{}}"#]) { try CampaignCommand.create($0, $1) }
            #expect(run.exitCode == 0, "\(run.output.errorText)")
            #expect(run.output.errorText.contains("sent by the live instance(s) with a token key for it"), "\(run.output.errorText)")
            #expect(try CampaignStore().campaigns(connection, limit: 10).map(\.pushType) == ["location"])
        }
    }

    @Test func aCampaignWithoutPayloadSaysTargetsNeedTheirOwn() throws {
        try IsolatedDatabase.with { database in
            let run = try Self.run(["create", "--app", "shop"], database) { try CampaignCommand.create($0, $1) }
            #expect(run.exitCode == 0)
            #expect(run.output.errorText.contains("has no payload of its own: every imported target needs one"))
        }
    }

    // MARK: import

    @Test func importFromAFileReportsRowsAndTime() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            let run = try Self.importTokens(database, id, count: 2500, files: files)
            #expect(run.exitCode == 0, "\(run.output.errorText)")
            let first = try #require(run.output.output.first)
            #expect(first.hasPrefix("imported 2500 targets, 0 duplicates dropped, into campaign \(id) from \(files.path("targets.txt")) in "))
            #expect(first.contains(" s, ") && first.hasSuffix(" targets/s"))
            #expect(run.output.output.last == "campaign \(id) now has 2500 targets in 3 chunks")
        }
    }

    @Test func importDropsAndReportsDuplicateTokensAcrossImportsAndAcceptsAByteOrderMark() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            // A spreadsheet export: byte order mark, CRLF, one token twice.
            let first = try files.write("first.csv", "\u{FEFF}" + [Self.token(1), Self.token(2), Self.token(1)].joined(separator: "\r\n") + "\r\n")
            let run = try Self.run(["import", String(id), first], database, CampaignCommand.importTargets)
            #expect(run.exitCode == 0, "\(run.output.errorText)")
            #expect(run.output.output.first?.hasPrefix("imported 2 targets, 1 duplicate dropped, into campaign \(id) from \(first) in ") == true,
                    "\(run.output.output)")
            let second = try files.write("second.csv", [Self.token(2), Self.token(3)].joined(separator: "\n"))
            let again = try Self.run(["import", String(id), second], database, CampaignCommand.importTargets)
            #expect(again.output.output.first?.hasPrefix("imported 1 target, 1 duplicate dropped, into campaign \(id) from \(second) in ") == true,
                    "\(again.output.output)")
            #expect(again.output.output.last == "campaign \(id) now has 3 targets in 2 chunks")
        }
    }

    @Test func importNamesTheBadLineOfAFile() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            let file = try files.write("targets.txt", "\(Self.token(1))\nnot-a-token\n")
            let run = try Self.run(["import", String(id), file], database, CampaignCommand.importTargets)
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains("\(file) line 2: the device token must be hexadecimal"))
            #expect(try CampaignStore().campaign(try database.connect(), id: id)?.targets == 0)
        }
    }

    @Test func importRefusesAPayloadOverThePushTypesLimitNamingTheLine() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            let large = #"{"aps":{"alert":""# + String(repeating: "a", count: 5000) + #""}}"#
            let lines = (1...6).map { "\(Self.token($0)),\(Self.payload)" } + ["\(Self.token(7)),\(large)"]
            let file = try files.write("bad.txt", lines.joined(separator: "\n") + "\n")
            let run = try Self.run(["import", String(id), file], database, CampaignCommand.importTargets)
            #expect(run.exitCode == 1, "\(run.output.output)")
            #expect(run.output.errorText.contains("\(file) line 7: the payload is 5020 bytes; alert pushes may have at most 4096"),
                    "\(run.output.errorText)")
            #expect(try CampaignStore().campaign(try database.connect(), id: id)?.targets == 0)

            // A voip campaign takes 5120 bytes: the same line is imported there.
            let voip = try Self.create(database, ["--push-type", "voip"])
            let voipFile = try files.write("voip.txt", "\(Self.token(7)),\(large)\n")
            let taken = try Self.run(["import", String(voip), voipFile], database, CampaignCommand.importTargets)
            #expect(taken.exitCode == 0, "\(taken.output.errorText)")
        }
    }

    @Test func importRefusesAPayloadThatIsNotValidJSONNamingTheFileLine() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            // More lines than one chunk of the staging copy, so that a position within a chunk
            // is not mistaken for the line.
            let lines = (1...3000).map { Self.token($0) } + [#"\#(Self.token(3001)),{"a":}"#]
            let file = try files.write("targets.txt", lines.joined(separator: "\n") + "\n")
            let run = try Self.run(["import", String(id), file], database, CampaignCommand.importTargets)
            #expect(run.exitCode == 1, "\(run.output.output)")
            #expect(run.output.errorText.contains("\(file) line 3001: the payload is not valid JSON: "), "\(run.output.errorText)")
            #expect(!run.output.errorText.contains("PostgreSQL"), "\(run.output.errorText)")
            #expect(try CampaignStore().campaign(try database.connect(), id: id)?.targets == 0)
        }
    }

    @Test func importFromRegisteredTokensFiltersByEnvironment() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            for seed in 0..<5 { try TokenStore().register(connection, app: "shop", token: Self.token(seed)) }
            for seed in 5..<7 { try TokenStore().register(connection, app: "shop", token: Self.token(seed), environment: "sandbox") }
            try TokenStore().register(connection, app: "other", token: Self.token(9))
            let id = try Self.create(database)
            let sandbox = try Self.run(["import", String(id), "--from-tokens", "--environment", "sandbox"], database, CampaignCommand.importTargets)
            #expect(sandbox.exitCode == 0, "\(sandbox.output.errorText)")
            #expect(sandbox.output.output.first?.hasPrefix("imported 2 targets, 0 duplicates dropped, into campaign \(id) from registered sandbox tokens in ") == true)
            let all = try Self.run(["import", String(id), "--from-tokens"], database, CampaignCommand.importTargets)
            #expect(all.output.output.first?.hasPrefix("imported 5 targets, 2 duplicates dropped, into campaign \(id) from registered tokens in ") == true)
        }
    }

    @Test(arguments: [
        (["import", "1"], "campaign import needs a FILE of targets, '-' for standard input, or --from-tokens"),
        (["import", "1", "/tmp/x", "--from-tokens"], "give either a FILE or --from-tokens, not both"),
        (["import", "1", "/tmp/x", "--environment", "sandbox"], "--environment only applies with --from-tokens"),
        (["import", "1", "--from-tokens", "--environment", "staging"], "--environment 'staging' is not one of: production, sandbox"),
        (["import", "0", "--from-tokens"], "'0' is not a campaign id"),
        (["import", "12345", "--from-tokens"], "campaign 12345 does not exist"),
        (["import", "12345", "/nonexistent/targets.txt"], "cannot open the target file /nonexistent/targets.txt"),
    ])
    func importExplainsWrongRequests(arguments: [String], expected: String) throws {
        try IsolatedDatabase.with { database in
            let run = try Self.run(arguments, database, CampaignCommand.importTargets)
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains(expected), "\(run.output.errorText)")
        }
    }

    // MARK: state changes

    @Test func startPauseResumeCancelFollowTheStatusMachine() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            let empty = try Self.run(["start", String(id)], database, CampaignCommand.start)
            #expect(empty.exitCode == 1)
            #expect(empty.output.errorText.contains("cannot start campaign \(id): campaign \(id) has no targets; import targets before starting it"))

            _ = try Self.importTokens(database, id, count: 10, files: files)
            let steps: [(String, (ParsedCommand, CommandContext) throws -> Int32, String)] = [
                ("start", CampaignCommand.start, "campaign \(id): running"),
                ("pause", CampaignCommand.pause, "campaign \(id): paused; workers stop at their next checkpoint"),
                ("resume", CampaignCommand.resume, "campaign \(id): running"),
                ("cancel", CampaignCommand.cancel, "campaign \(id): cancelled after 0 sent and 0 failed; 10 stored targets dropped"),
            ]
            for (command, function, expected) in steps {
                let run = try Self.run([command, String(id)], database, function)
                #expect(run.exitCode == 0, "\(command): \(run.output.errorText)")
                #expect(run.output.text == expected)
            }
            let again = try Self.run(["resume", String(id)], database, CampaignCommand.resume)
            #expect(again.exitCode == 1)
            #expect(again.output.errorText.contains("cannot resume campaign \(id): it is cancelled, and only a campaign that is paused can be"))
            let restart = try Self.run(["start", String(id)], database, CampaignCommand.start)
            #expect(restart.output.errorText.contains("it is cancelled, and only a campaign that is draft can be"))
        }
    }

    @Test func cancelKeepsTheChunkBeingSentUntilItsWorkerCountsItsAnswers() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            _ = try Self.importTokens(database, id, count: 10, files: files)
            #expect(try Self.run(["start", String(id)], database, CampaignCommand.start).exitCode == 0)
            let connection = try database.connect()
            let store = CampaignStore()
            let chunk = try #require(try store.leaseChunk(connection, owner: "w", apps: ["shop"], leaseSeconds: 30))

            let run = try Self.run(["cancel", String(id)], database, CampaignCommand.cancel)
            #expect(run.exitCode == 0, "\(run.output.errorText)")
            #expect(run.output.text == "campaign \(id): cancelled after 0 sent and 0 failed; 0 stored targets dropped; 1 chunk is being sent: it stops at the next checkpoint (within seconds), the answers to its requests in flight are counted, then the workers drop its unsent targets")
            // The worker learns of the cancel at its checkpoint and its answers are counted.
            #expect(try store.checkpoint(connection, chunk, ChunkProgress(position: 4, sent: 4), leaseSeconds: 30) == .stop(.cancelled))
            #expect(try store.release(connection, chunk, ChunkProgress(position: 6, sent: 2)) == .stop(.cancelled))
            #expect(try store.campaign(connection, id: id)?.sent == 6)
        }
    }

    @Test func aCampaignWithAFutureStartIsScheduled() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database, ["--start-at", "2099-06-01T12:00:00Z"])
            _ = try Self.importTokens(database, id, count: 3, files: files)
            let run = try Self.run(["start", String(id)], database, CampaignCommand.start)
            #expect(run.output.text == "campaign \(id): scheduled, sending starts at 2099-06-01 12:00:00Z")
        }
    }

    @Test(arguments: ["start", "pause", "resume", "cancel", "status"])
    func aMissingCampaignIsNamed(command: String) throws {
        try IsolatedDatabase.with { database in
            let function: (ParsedCommand, CommandContext) throws -> Int32 = switch command {
            case "start": CampaignCommand.start
            case "pause": CampaignCommand.pause
            case "resume": CampaignCommand.resume
            case "cancel": CampaignCommand.cancel
            default: CampaignCommand.status
            }
            let run = try Self.run([command, "4242"], database, function)
            #expect(run.exitCode == 1)
            #expect(run.output.errorText.contains("campaign 4242") && run.output.errorText.contains("does not exist"), "\(run.output.errorText)")
        }
    }

    // MARK: status and list

    /// Sends a chunk's worth of outcomes the way the pipeline records them.
    static func finishChunk(_ connection: PGConnection, failures: [String: Int], pruned: Int) throws -> Bool {
        guard let chunk = try CampaignStore().leaseChunk(connection, owner: "test-worker", apps: ["shop"], leaseSeconds: 60) else { return false }
        let failed = failures.values.reduce(0, +)
        try CampaignStore().finish(connection, chunk, ChunkProgress(position: chunk.size, sent: chunk.size - failed,
                                                                    failedByReason: failures, pruned: pruned))
        return true
    }

    /// Finishes the campaign's chunks one by one on another thread, starting once a watcher
    /// (a `pushd-campaign` session) has connected and taken its first sample, with pauses long
    /// enough for the watcher to see each step (it samples every 0.1 s; 1.5 s leave room for a
    /// watcher held up on a loaded machine).
    static func finishChunksOnceWatched(_ database: IsolatedDatabase, failures: [String: Int], pruned: Int) {
        let worker = Thread {
            guard let connection = try? database.connect() else { return }
            for _ in 0..<400 {
                let watching = try? connection.query(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pushd-campaign' AND datname = current_database()"
                ).require(Int.self, row: 0, column: 0)
                if watching == 1 { break }
                usleep(25_000)
            }
            usleep(1_500_000)
            while (try? Self.finishChunk(connection, failures: failures, pruned: pruned)) == true { usleep(1_500_000) }
        }
        worker.start()
    }

    @Test func statusShowsCountersFailuresByReasonAndRate() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database, ["--name", "Counted"])
            _ = try Self.importTokens(database, id, count: 2500, files: files)
            _ = try Self.run(["start", String(id)], database, CampaignCommand.start)
            let connection = try database.connect()
            #expect(try Self.finishChunk(connection, failures: ["Unregistered": 3, "BadDeviceToken": 1], pruned: 4))

            let run = try Self.run(["status", String(id)], database, CampaignCommand.status)
            #expect(run.exitCode == 0)
            let lines = run.output.output
            #expect(lines.first == "campaign \(id) \"Counted\": running")
            #expect(lines.contains("  targets    2500"))
            #expect(lines.contains("  sent       996"))
            #expect(lines.contains("  failed     4 (Unregistered 3, BadDeviceToken 1)"))
            #expect(lines.contains("  pruned     4"))
            #expect(lines.contains("  remaining  1500"))
            #expect(lines.contains("  progress   40.0% of 3 chunks, 1 finished"))
            #expect(lines.contains { $0.hasPrefix("  started    20") })
            #expect(lines.contains("  finished   -"))
        }
    }

    @Test func watchWritesPlainLinesUntilTheCampaignIsDone() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            _ = try Self.importTokens(database, id, count: 3000, files: files)
            _ = try Self.run(["start", String(id)], database, CampaignCommand.start)
            Self.finishChunksOnceWatched(database, failures: [:], pruned: 0)
            let result = try PushdBinary.run(["campaign", "status", String(id), "--watch", "--interval", "0.1", "--database-url", database.url])
            #expect(result.status == 0, "\(result.errors)")
            let lines = result.output.split(separator: "\n").map(String.init)
            let samples = lines.filter { $0.contains("  campaign \(id) ") }
            #expect(samples.count >= 3)
            #expect(samples.contains { $0.contains(" running  0/3000 (0.0%)") })
            #expect(samples.last?.contains(" done  3000/3000 (100.0%)  sent 3000  failed 0") == true)
            #expect(lines.contains("campaign \(id) \"\(try CampaignStore().campaign(try database.connect(), id: id)!.name)\": done"))
            #expect(!result.output.contains("\r"))
        }
    }

    @Test func watchOnATerminalRedrawsOneProgressLine() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            _ = try Self.importTokens(database, id, count: 2000, files: files)
            _ = try Self.run(["start", String(id)], database, CampaignCommand.start)
            Self.finishChunksOnceWatched(database, failures: ["Unregistered": 1], pruned: 1)
            // script(1) gives the command a pseudo-terminal, so isatty(1) holds as it does for a person.
            let command = [PushdBinary.path, "campaign", "status", String(id), "--watch", "--interval", "0.1", "--database-url", database.url]
                .map { "'" + $0 + "'" }.joined(separator: " ")
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
            process.arguments = ["-qefc", command, "/dev/null"]
            let transcript = files.path("transcript")
            _ = FileManager.default.createFile(atPath: transcript, contents: nil)
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: transcript))
            process.standardInput = FileHandle.nullDevice
            try process.run()
            process.waitUntilExit()
            let output = try String(contentsOfFile: transcript, encoding: .utf8)
            #expect(process.terminationStatus == 0, "\(output)")
            let redraws = output.components(separatedBy: "\r\u{1B}[2K").dropFirst()
            #expect(redraws.count >= 3, "\(output)")
            #expect(redraws.first?.hasPrefix("[........................]   0.0%  0/2000") == true, "\(output)")
            #expect(redraws.contains { $0.hasPrefix("[############............]  50.0%  1000/2000 (1 failed)") && $0.contains("ETA ") })
            #expect(redraws.last?.hasPrefix("[########################] 100.0%  2000/2000 (2 failed)") == true, "\(output)")
            #expect(output.contains("campaign \(id) ") && output.contains("\": done"))
        }
    }

    @Test func controlCOnATerminalEndsTheProgressLineBeforeExiting() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let id = try Self.create(database)
            let command = [PushdBinary.path, "campaign", "status", String(id), "--watch", "--interval", "0.1", "--database-url", database.url]
                .map { "'" + $0 + "'" }.joined(separator: " ")
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
            process.arguments = ["-qefc", command, "/dev/null"]
            let transcript = files.path("transcript")
            _ = FileManager.default.createFile(atPath: transcript, contents: nil)
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: transcript))
            let keyboard = Pipe()
            process.standardInput = keyboard
            try process.run()
            let connection = try database.connect()
            for _ in 0..<400 {
                let watching = try connection.query(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pushd-campaign' AND datname = current_database()"
                ).require(Int.self, row: 0, column: 0)
                if watching == 1 { break }
                usleep(25_000)
            }
            // Its first line drawn (so it has read the campaign and watches for SIGINT), up to 10 s.
            for _ in 0..<200 {
                if ((try? String(contentsOfFile: transcript, encoding: .utf8)) ?? "").contains("draft") { break }
                usleep(50_000)
            }
            // Ctrl-C typed on the terminal: the line discipline turns it into SIGINT.
            keyboard.fileHandleForWriting.write(Data([3]))
            for _ in 0..<200 where process.isRunning { usleep(50_000) }
            if process.isRunning { kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            try keyboard.fileHandleForWriting.close()
            let output = try String(contentsOfFile: transcript, encoding: .utf8)
            #expect(process.terminationStatus == 130, "\(output)")
            #expect(output.contains("draft"))
            #expect(output.hasSuffix("\r\n"), "\(output.debugDescription)")
        }
    }

    @Test func listShowsNewestFirstWithFilters() throws {
        try IsolatedDatabase.with { database in
            let first = try Self.create(database, ["--name", "First"])
            let second = try Self.create(database, ["--name", "Second"])
            _ = try Self.run(["cancel", String(first)], database, CampaignCommand.cancel)
            let all = try Self.run(["list"], database, CampaignCommand.list)
            #expect(all.output.output.first?.hasPrefix("ID  APP   STATUS     TARGETS  SENT  FAILED  PRUNED  CREATED") == true)
            #expect(all.output.output.dropFirst().map { $0.split(separator: " ").first.map(String.init) } == [String(second), String(first)])
            let cancelled = try Self.run(["list", "--status", "cancelled"], database, CampaignCommand.list)
            #expect(cancelled.output.output.count == 2)
            #expect(cancelled.output.output.last?.hasSuffix("First") == true)
            let none = try Self.run(["list", "--app", "other"], database, CampaignCommand.list)
            #expect(none.output.text == "no campaigns")
            let wrong = try Self.run(["list", "--status", "finished"], database, CampaignCommand.list)
            #expect(wrong.exitCode == 1)
            #expect(wrong.output.errorText.contains("--status 'finished' is not one of: draft, scheduled, running, paused, done, cancelled"))
        }
    }

    @Test func theBinaryCreatesImportsFromStandardInputAndExitsOneOnBadIds() throws {
        try IsolatedDatabase.with { database in
            let environment = ["PUSHD_DATABASE_URL": database.url]
            let files = try FileFixture()
            let config = try CheckConfigCommandTests.writeConfig(files, database: database.url)
            let created = try PushdBinary.run(["campaign", "create", "--config", config, "--app", "shop", "--payload", Self.payload],
                                              environment: environment)
            #expect(created.status == 0, "\(created.errors)")
            let id = try #require(Int64(created.output.trimmingCharacters(in: .whitespacesAndNewlines)))
            let input = (0..<5).map { Self.token($0) + (($0 == 0) ? #",{"aps":{"alert":"own"}}"# : "") }.joined(separator: "\n") + "\n"
            let imported = try PushdBinary.run(["campaign", "import", String(id), "-"], environment: environment, input: input)
            #expect(imported.status == 0, "\(imported.errors)")
            #expect(imported.output.hasPrefix("imported 5 targets, 0 duplicates dropped, into campaign \(id) from standard input in "))
            let bad = try PushdBinary.run(["campaign", "start", "nine"], environment: environment)
            #expect(bad.status == 1)
            #expect(bad.errors.contains("'nine' is not a campaign id"))
            let usage = try PushdBinary.run(["campaign", "start"], environment: environment)
            #expect(usage.status == 2)
            #expect(usage.errors.contains("missing ID"))
        }
    }
}

/// The progress display, from plain values.
@Suite struct CampaignReportTests {
    static func campaign(targets: Int, sent: Int, failed: Int = 0, status: CampaignStatus = .running,
                         startedAt: Timestamp? = Timestamp(timeIntervalSince1970: 1_000), finishedAt: Timestamp? = nil) -> CampaignFigures {
        CampaignFigures(id: 7, app: "shop", name: "Sale", status: status, pushType: "alert", priority: 10, rateLimit: nil,
                        targets: targets, sent: sent, failed: failed, failedByReason: failed > 0 ? ["Unregistered": failed] : [:],
                        pruned: failed, chunksTotal: 2, chunksDone: 1, createdAt: Timestamp(timeIntervalSince1970: 900),
                        startAt: nil, startedAt: startedAt, finishedAt: finishedAt)
    }

    @Test func theBarFillsWithProgressAndShowsRateAndETA() {
        let half = Self.campaign(targets: 2000, sent: 990, failed: 10)
        #expect(CampaignReport.progressBar(half, rate: 500) ==
                "[############............]  50.0%  1000/2000 (10 failed)  500/s  ETA 2s  running")
        let slow = Self.campaign(targets: 10_000, sent: 0)
        #expect(CampaignReport.progressBar(slow, rate: 2.5) == "[........................]   0.0%  0/10000  2.5/s  ETA 1h06m  running")
        let done = Self.campaign(targets: 10, sent: 10, status: .done)
        #expect(CampaignReport.progressBar(done, rate: nil) == "[########################] 100.0%  10/10  -  done")
    }

    @Test func averageRateCoversTheWholeRunOnceFinished() {
        let finished = Self.campaign(targets: 3000, sent: 3000, status: .done, finishedAt: Timestamp(timeIntervalSince1970: 1_010))
        #expect(CampaignReport.averageRate(finished, now: Timestamp(timeIntervalSince1970: 5_000)) == 300)
        let running = Self.campaign(targets: 3000, sent: 1000)
        #expect(CampaignReport.averageRate(running, now: Timestamp(timeIntervalSince1970: 1_100)) == 10)
        #expect(CampaignReport.eta(running, rate: 10) == 200)
        #expect(CampaignReport.averageRate(Self.campaign(targets: 5, sent: 0, startedAt: nil), now: Timestamp()) == nil)
    }

    @Test func theRateMeterSmoothsBetweenSamples() {
        var meter = RateMeter()
        let start = Timestamp(timeIntervalSince1970: 0)
        #expect(meter.observe(processed: 0, at: start) == nil)
        #expect(meter.observe(processed: 1000, at: start.addingTimeInterval(1)) == 1000)
        #expect(abs((meter.observe(processed: 1000, at: start.addingTimeInterval(2)) ?? 0) - 700) < 1e-9)
    }

    @Test func durationsReadLikeAClock() {
        #expect(TimeText.duration(42) == "42s")
        #expect(TimeText.duration(185) == "3m05s")
        #expect(TimeText.duration(7_800) == "2h10m")
        #expect(TimeText.duration(273_600) == "3d04h")
        #expect(TimeText.duration(.infinity) == "-")
    }

    @Test func onATerminalTheBarIsRedrawnInPlaceAndEndsWithANewline() throws {
        final class Box: @unchecked Sendable { var writes: [String] = [] }
        let box = Box()
        var samples = [Self.campaign(targets: 100, sent: 50), Self.campaign(targets: 100, sent: 100, status: .done,
                                                                             finishedAt: Timestamp(timeIntervalSince1970: 1_010))]
        var watch = CampaignWatch(interval: 0.05, drawsBar: true) { box.writes.append($0) }
        let last = try watch.run(first: Self.campaign(targets: 100, sent: 0)) { samples.removeFirst() }
        #expect(last.status == .done)
        #expect(box.writes.count == 4)
        #expect(box.writes.dropLast().allSatisfy { $0.hasPrefix("\r\u{1B}[2K[") })
        #expect(box.writes[2].contains("100/100") && box.writes[2].hasSuffix("done"))
        #expect(box.writes.last == "\n")
    }
}
