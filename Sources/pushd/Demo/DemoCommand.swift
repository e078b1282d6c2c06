import APNs
import APNsMock
import Posix
import Spawn
import Glibc
import Metrics
import QueueStore
import Synchronization

/// `pushd demo`: the whole product on one machine, then a report.
///
/// Starts a throwaway PostgreSQL and an in-process apns-mock (throwaway CA, server
/// certificate and ES256 key), migrates, registers the campaign's device tokens, builds
/// a campaign from them (a few percent answer 410 Unregistered or BadDeviceToken, and a
/// few requests 503), streams transactional INSERTs through plain `psql`, runs the
/// pipeline until everything is settled, shows progress, prints a report and a few
/// lines scraped from /metrics, and removes everything it made.
enum DemoCommand {
    struct Options {
        var targets = 200_000
        var transactional = 1000
    }

    static func run(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        var options = Options()
        if let text = parsed.value("targets") {
            guard let value = Int(text), (1...50_000_000).contains(value) else {
                throw UsageError(message: "--targets must be a whole number from 1 to 50000000", usage: "usage: pushd demo [--targets N]")
            }
            options.targets = value
        }
        let interrupted = RunState()
        let signals = try SignalWatcher([SIGINT, SIGTERM])
        let watcher = Task.detached {
            for await _ in signals.signals { interrupted.stops.wrappingAdd(1, ordering: .relaxed) }
        }
        defer {
            watcher.cancel()
            signals.cancel()
        }
        // Unbuffered, so progress shows as it happens also when the output is a pipe or a log.
        let output: @Sendable (String) -> Void = { StandardStreams.writeOutput($0 + "\n") }
        return try Demo(options: options, output: output, interrupted: interrupted).run()
    }
}

private final class Demo {
    let options: DemoCommand.Options
    let output: @Sendable (String) -> Void
    let interrupted: RunState
    let started = Timestamp()
    let directory: String
    let interactive = isatty(1) == 1

    init(options: DemoCommand.Options, output: @escaping @Sendable (String) -> Void, interrupted: RunState) {
        self.options = options
        self.output = output
        self.interrupted = interrupted
        directory = FileSystem.temporaryDirectory + "/pushd-demo-\(getpid())"
    }

    var wasInterrupted: Bool { interrupted.stops.load(ordering: .relaxed) > 0 }

    func step(_ number: Int, _ text: String) {
        output("[\(number)/7] \(text)")
    }

    func run() throws -> Int32 {
        try FileSystem.createDirectory(directory)
        defer { try? FileSystem.remove(directory) }
        output("pushd demo: a campaign of \(options.targets) device tokens and \(options.transactional) transactional pushes, end to end on this machine")

        let postgres = try ThrowawayPostgres()
        defer { postgres.stop() }
        step(1, "throwaway PostgreSQL at \(postgres.url)")

        let certificates = try CertificateGenerator.generate(into: directory + "/certs")
        let keyFile = directory + "/AuthKey_DEMOKEY123.p8"
        try openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", keyFile])
        chmod(keyFile, 0o600)
        try openssl(["pkey", "-in", keyFile, "-pubout", "-out", directory + "/key.pub"])
        let keyID = "DEMOKEY123", teamID = "DEMOTEAM12", bundleID = "com.example.demo"

        // Tokens: the campaign's come from pushd.device_tokens; a few are dead at APNs.
        let campaignTokens = (0..<options.targets).map { Self.token(UInt64($0) &* 0x9E37_79B9_7F4A_7C15 | 1) }
        let learned = Int64(Timestamp().addingTimeInterval(60).timeIntervalSince1970 * 1000)
        var unregistered = [String: Int64]()
        var bad = Set<String>()
        for (index, token) in campaignTokens.enumerated() {
            if index % 50 == 3 { unregistered[token] = learned } else if index % 100 == 7 { bad.insert(token) }
        }
        var mockConfiguration = MockConfiguration(certificateChainFile: certificates.serverCertificate,
                                                  privateKeyFile: certificates.serverKey)
        mockConfiguration.authentication = .token(keys: [ProviderKey(keyID: keyID, teamID: teamID,
                                                                     publicKeyPEM: try FileSystem.readText(directory + "/key.pub"))],
                                                  startAtOneStream: true)
        mockConfiguration.allowedBundleIDs = [bundleID]
        mockConfiguration.channelManagementPort = 0
        mockConfiguration.faults = FaultConfiguration(unregisteredTokens: unregistered, badDeviceTokens: bad, serviceUnavailableRate: 0.002)
        let mock = try APNsMockServer(configuration: mockConfiguration)
        let mockPort = try mock.start()
        defer { mock.stop() }
        step(2, "apns-mock on 127.0.0.1:\(mockPort): throwaway CA and server certificate, ES256 key \(keyID), "
             + "\(unregistered.count) tokens answer 410 Unregistered, \(bad.count) BadDeviceToken, 0.2% of requests 503")

        let connection = try QueueSession.connect(url: postgres.url, applicationName: "pushd-demo")
        try Migrator().migrate(connection)
        let version = try Migrator().appliedVersions(connection).last ?? 0
        step(3, "schema pushd migrated to version \(version)")

        let importStart = Timestamp()
        try connection.copyIn("COPY pushd.device_tokens (app, token, environment) FROM STDIN") { writer in
            for token in campaignTokens { try writer.writeRow(["demo", token, "sandbox"]) }
        }
        let store = CampaignStore()
        let campaignID = try store.create(connection, NewCampaign(
            app: "demo", name: "demo campaign", pushType: "alert",
            payload: #"{"aps":{"alert":{"title":"Spring sale","body":"20% off everything today"},"sound":"default","thread-id":"sale"}}"#))
        let imported = try store.importFromDeviceTokens(connection, campaignID: campaignID).imported
        _ = try store.start(connection, id: campaignID)
        step(4, "registered \(campaignTokens.count) device tokens and built campaign \(campaignID) of \(imported) targets from them in "
             + Timestamp().timeIntervalSince(importStart).fixed(1) + " s")

        var config = PushdConfig(databaseURL: postgres.url, apps: [
            PushdConfig.App(name: "demo", bundleID: bundleID, environment: .sandbox,
                            credentials: .token(teamID: teamID, keyID: keyID, keyFile: keyFile), campaignRate: nil),
        ])
        config.apns.hostOverride = "127.0.0.1:\(mockPort)"
        config.apns.channelHostOverride = "127.0.0.1:\(mock.channelManagementPort ?? 0)"
        config.apns.caFile = certificates.caCertificate
        config.transactionalWorkers = 2
        config.retry.baseDelayMilliseconds = 50
        config.retry.maxDelayMilliseconds = 1000
        let metrics = try PushdMetrics(version: VersionCommand.pushdVersion)
        let server = try MetricsServer(registry: metrics.registry, configuration: MetricsServerConfiguration(host: "127.0.0.1", port: 0))
        defer { server.stop() }
        let logger = Logger(level: .warning, sink: FileLogSink(path: directory + "/pushd.log"))
        let pipeline = try Pipeline(config: config, metrics: metrics, logger: logger, instance: "demo")
        let pipelineStart = Timestamp()
        pipeline.start()
        server.setReady(true, detail: "demo")
        var psql = try startTransactionalStream(url: postgres.url)
        step(5, "pushd is sending (metrics on http://127.0.0.1:\(server.port)/metrics); psql is inserting \(options.transactional) transactional pushes")

        var campaign = try store.campaign(connection, id: campaignID)
        var lastLine = Timestamp.distantPast
        var finishedAt: Timestamp?
        while !wasInterrupted {
            campaign = try store.campaign(connection, id: campaignID)
            let pending = try connection.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0)
            let psqlRunning = psql.isRunning()
            let done = campaign?.status == .done && !psqlRunning && pending == 0
            if done || Timestamp().timeIntervalSince(lastLine) >= 1 {
                lastLine = Timestamp()
                progress(campaign, pending: pending, psqlRunning: psqlRunning, since: pipelineStart)
            }
            if done {
                finishedAt = Timestamp()
                break
            }
            if Timestamp().timeIntervalSince(pipelineStart) > 1800 {
                output("\nthe demo did not finish within 30 minutes; see \(directory)/pushd.log")
                break
            }
            PosixThread.sleep(seconds: 0.2)
        }
        if interactive { output("") }
        let broadcastsDone = finishedAt != nil && !wasInterrupted ? try broadcastStep(connection: connection, mock: mock) : false
        let scrape = scrapeMetrics(port: server.port)
        pipeline.stop(deadline: Timestamp().addingTimeInterval(5))
        psql.terminate()
        if wasInterrupted {
            output("interrupted: stopping and cleaning up")
            return 1
        }
        report(pipeline: pipeline, campaign: try store.campaign(connection, id: campaignID), connection: connection, mock: mock,
               elapsed: (finishedAt ?? Timestamp()).timeIntervalSince(pipelineStart), scrape: scrape)
        connection.close()
        return finishedAt == nil || !broadcastsDone ? 1 : 0
    }

    /// A Live Activity channel the way an application uses one: created in SQL, broadcast to
    /// by INSERT, deleted in SQL; the running pushd carries each out against apns-mock.
    func broadcastStep(connection: PGConnection, mock: APNsMockServer) throws -> Bool {
        func waitFor(_ seconds: Double, _ condition: () throws -> Bool) rethrows -> Bool {
            let deadline = Timestamp().addingTimeInterval(seconds)
            while Timestamp() < deadline {
                if try condition() { return true }
                PosixThread.sleep(seconds: 0.1)
            }
            return try condition()
        }
        let row = try connection.query("SELECT pushd.create_channel('demo', 'most-recent')").require(Int64.self, row: 0, column: 0)
        var channel: String?
        let created = try waitFor(20) {
            let result = try connection.query("SELECT channel_id FROM pushd.channels WHERE id = $1 AND state = 'active'", [row])
            if result.rowCount > 0 { channel = try result.require(String.self, row: 0, column: 0) }
            return channel != nil
        }
        guard created, let channel else {
            output("the channel was not created within 20 s; see pushd.channels and \(directory)/pushd.log")
            return false
        }
        let updates = 3
        for score in 1...updates {
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload) VALUES ('demo', $1, $2)", [channel,
                #"{"aps":{"timestamp":\#(Int(Timestamp().timeIntervalSince1970)),"event":"update","content-state":{"home":\#(score),"away":0}}}"#])
        }
        let sent = waitFor(20) { mock.stats.broadcastsAccepted[channel] == updates }
        try connection.query("SELECT pushd.delete_channel('demo', $1)", [channel])
        let deleted = try waitFor(20) {
            try connection.query("SELECT count(*) FROM pushd.channels WHERE id = $1 AND state = 'deleted'", [row])
                .require(Int.self, row: 0, column: 0) == 1
        }
        step(6, "broadcast: channel \(channel) created with pushd.create_channel, \(mock.stats.broadcastsAccepted[channel] ?? 0) of \(updates) "
             + "Live Activity updates broadcast to it by INSERT, then \(deleted ? "deleted" : "not deleted") with pushd.delete_channel")
        return sent && deleted
    }

    func progress(_ campaign: Campaign?, pending: Int, psqlRunning: Bool, since start: Timestamp) {
        guard let campaign else { return }
        let processed = campaign.sent + campaign.failed
        let fraction = campaign.targets == 0 ? 1 : Double(processed) / Double(campaign.targets)
        let elapsed = max(0.001, Timestamp().timeIntervalSince(start))
        let width = 30
        let filled = Int(fraction * Double(width))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        let line = "  [\(bar)] \((fraction * 100).fixed(1, width: 5))%  \(processed)/\(campaign.targets) targets  "
            + "\((Double(processed) / elapsed).fixed(0))/s  transactional queue \(pending)\(psqlRunning ? " (psql inserting)" : "")"
        if interactive {
            StandardStreams.writeOutput("\r" + line)
        } else {
            output(line)
        }
    }

    func report(pipeline: Pipeline, campaign: Campaign?, connection: PGConnection, mock: APNsMockServer,
                elapsed: Double, scrape: [String]) {
        let tally = pipeline.context.tally
        let sent = tally.sent.load(ordering: .relaxed)
        let dead = (try? connection.query("SELECT count(*) FROM pushd.dead_jobs").require(Int.self, row: 0, column: 0)) ?? 0
        let pruned = (try? connection.query("SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NOT NULL")
            .require(Int.self, row: 0, column: 0)) ?? 0
        func milliseconds(_ seconds: Double?) -> String { seconds.map { ($0 * 1000).fixed(1) + " ms" } ?? "n/a" }
        step(7, "report")
        let failed = campaign?.failedByReason.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") ?? ""
        output("""
          sent             \(sent) (campaign \(campaign?.sent ?? 0), transactional \(sent - (campaign?.sent ?? 0)))
          accepted by mock \(mock.stats.accepted)\(mock.stats.accepted == sent ? " (= sent: nothing lost, nothing twice)" : "")
          campaign failed  \(campaign?.failed ?? 0) (\(failed))
          tokens pruned    \(pruned) in pushd.device_tokens
          dead-lettered    \(dead) transactional jobs in pushd.dead_jobs
          retried          \(tally.retried.load(ordering: .relaxed)) sends (503 ServiceUnavailable from the mock)
          throughput       \((Double(sent) / max(0.001, elapsed)).fixed(0)) notifications/s over \(elapsed.fixed(1)) s
          transactional    INSERT to accepted: p50 \(milliseconds(tally.latencyQuantile(0.5))), p99 \(milliseconds(tally.latencyQuantile(0.99)))

        a few lines of /metrics:
        """)
        for line in scrape { output("  " + line) }
    }

    /// Transactional pushes the way an application sends them: plain INSERTs from psql,
    /// each its own transaction, a few milliseconds apart.
    func startTransactionalStream(url: String) throws -> Subprocess {
        var sql = "\\set ON_ERROR_STOP 1\n"
        for index in 0..<options.transactional {
            let token = Self.token(0xA5A5_0000_0000 + UInt64(index))
            sql += "INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('demo', '\(token)', "
                + "'{\"aps\":{\"alert\":{\"title\":\"Order \(1000 + index)\",\"body\":\"Your order has shipped\"}}}');\n"
            if index % 10 == 9 { sql += "SELECT pg_sleep(0.04);\n" }
        }
        let file = directory + "/transactional.sql"
        try FileSystem.write(sql, to: file)
        return try Subprocess.start(["/usr/bin/psql", "-X", "-q", "-o", "/dev/null", "-f", file, url],
                                    outputPath: directory + "/psql.out")
    }

    func scrapeMetrics(port: UInt16) -> [String] {
        let file = directory + "/metrics.txt"
        guard (try? Subprocess.run(["/usr/bin/curl", "-s", "--max-time", "5", "-o", file, "http://127.0.0.1:\(port)/metrics"],
                                   outputPath: directory + "/curl.out")) != nil,
              let text = try? FileSystem.readText(file) else {
            return ["(could not scrape /metrics with curl)"]
        }
        let wanted = ["pushd_notifications_sent_total", "pushd_tokens_pruned_total", "pushd_retries_total",
                      "pushd_job_delivery_latency_seconds_count", "pushd_apns_connections", "pushd_jwt_refreshes_total",
                      "pushd_broadcasts_sent_total", "pushd_channel_operations_total"]
        return text.split(separator: "\n").map(String.init).filter { line in
            wanted.contains { line.hasPrefix($0 + "{") } && !line.hasSuffix(" 0")
        }
    }

    func openssl(_ arguments: [String]) throws {
        try Subprocess.run(["/usr/bin/openssl"] + arguments, outputPath: directory + "/openssl.out")
    }

    static func token(_ seed: UInt64) -> String {
        let hex = String(seed, radix: 16)
        let part = String(repeating: "0", count: max(0, 16 - hex.count)) + hex
        return String(repeating: part, count: 4)
    }
}
