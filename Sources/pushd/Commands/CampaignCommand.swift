import APNs
import Posix
import Glibc
import QueueStore

/// `pushd campaign create | import | start | pause | resume | cancel | status | list`.
enum CampaignCommand {
    static let applicationName = "pushd-campaign"

    // MARK: create

    static func create(_ parsed: ParsedCommand, _ context: CommandContext,
                       standardInput: () -> [UInt8] = { StandardStreams.readInput() }) throws -> Int32 {
        guard let app = parsed.value("app"), !app.isEmpty else {
            throw CommandContext.Failure("campaign create needs --app NAME: the app whose tokens the campaign addresses")
        }
        guard AppName.isValid(app) else {
            throw CommandContext.Failure("--app '\(app)' must be \(AppName.rule)")
        }
        // A campaign for an app no instance is configured for would never be sent, so the
        // app is checked against the configuration (--config, else the default file).
        let config: PushdConfig
        do {
            config = try context.loadConfig(parsed)
        } catch {
            throw CommandContext.Failure("campaign create checks --app against pushd's configuration, and none could be read: \(error); give --config FILE")
        }
        guard let configured = config.apps.first(where: { $0.name == app }) else {
            let known = config.apps.map(\.name).joined(separator: ", ")
            throw CommandContext.Failure("--app '\(app)' is not an app of the configuration (apps: \(known))")
        }
        let bundleID: String? = configured.bundleID

        let pushType = try Self.pushType(parsed.value("push-type") ?? "alert")
        var authentication: AuthenticationMode = Pipeline.authenticatesByCertificate(configured) ? .certificate : .token
        var connection: PGConnection?
        if authentication == .certificate && !pushType.supportsCertificateAuthentication {
            // A live instance with a token key for the app takes such targets from the others;
            // with none, every target would be refused at send time (TokenAuthenticationRequired).
            let fleet = try context.connect(parsed, config: config, applicationName: applicationName)
            connection = fleet
            let entry = InstanceRegistration.tokenEntry(app: app)
            guard try InstanceStore().sentElsewhere(fleet, id: "", wanted: [entry]).contains(entry) else {
                throw CommandContext.Failure("--push-type \(pushType): APNs accepts \(pushType) pushes only with token (JWT) authentication, and app '\(app)' signs with a certificate and \(EnvironmentCoverage.noTokenKeyInFleet(app: app)); give the app a token key (token: team_id, key_id, key_file) or choose another push type")
            }
            context.errorOutput("app '\(app)' signs with a certificate in this configuration: its \(pushType) campaign is sent by the live instance(s) with a token key for it")
            authentication = .token
        }
        let priority = try CommandValue.integer(parsed, "priority", in: 1...10) ?? (pushType == .background ? 5 : 10)
        guard Priority(rawValue: priority) != nil else {
            throw CommandContext.Failure("--priority \(priority) is not an APNs priority: use 10 (now), 5 (conserve power) or 1 (lowest)")
        }
        let rate = try CommandValue.integer(parsed, "rate", in: 1...10_000_000) ?? configured.campaignRate
            ?? config.defaultCampaignRate
        let startAt = try CommandValue.time(parsed, "start-at")
        let collapseID = parsed.value("collapse-id")
        if let collapseID, collapseID.utf8.count > NotificationLimits.maxCollapseIDBytes {
            throw CommandContext.Failure("--collapse-id is \(collapseID.utf8.count) bytes; APNs allows at most \(NotificationLimits.maxCollapseIDBytes)")
        }

        // Where targets from a file are sent; targets imported from registered tokens keep their own.
        let environment = parsed.value("environment")
        if let environment, PushdConfig.Environment(rawValue: environment) == nil {
            throw CommandContext.Failure("--environment '\(environment)' is not one of: production, sandbox")
        }

        let payload = try CommandValue.payload(parsed, readStandardInput: standardInput)
        if let payload {
            try validate(payload: payload, pushType: pushType, priority: priority, bundleID: bundleID, authentication: authentication)
        }
        let name = parsed.value("name") ?? "\(app) \(TimeText.moment(Timestamp()))"
        guard (1...200).contains(name.count) else {
            throw CommandContext.Failure("--name must be 1 to 200 characters, got \(name.count)")
        }

        let id = try CampaignStore().create(try connection ?? context.connect(parsed, config: config, applicationName: applicationName), NewCampaign(
            app: app, name: name, pushType: pushType.rawValue, priority: priority, environment: environment,
            payload: payload.map { String(decoding: $0, as: UTF8.self) }, collapseID: collapseID, startAt: startAt, rateLimit: rate))
        if payload == nil {
            context.errorOutput("campaign \(id) has no payload of its own: every imported target needs one ('token,{…}' lines)")
        }
        context.output(String(id))
        return 0
    }

    static func pushType(_ text: String) throws -> PushType {
        guard let type = PushType(rawValue: text) else {
            throw CommandContext.Failure("--push-type '\(text)' is not one of: \(PushType.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return type
    }

    /// A campaign payload must be a JSON object that the notification rules accept for its push
    /// type, checked once here rather than failing for every target at send time.
    static func validate(payload: [UInt8], pushType: PushType, priority: Int, bundleID: String?,
                         authentication: AuthenticationMode = .token) throws {
        if let error = JSONParser.checkObject(payload) {
            throw CommandContext.Failure("the payload is not a JSON object: \(error)")
        }
        // Without the configuration the real topic is unknown: a stand-in one checks everything else.
        let topic = pushType.topic(forBundleID: bundleID ?? "com.example.campaign") ?? bundleID ?? "com.example.campaign"
        let token = try APNs.DeviceToken(String(repeating: "0", count: 64))
        let notification = Notification(token: token, topic: topic, pushType: pushType,
                                        priority: Priority(rawValue: priority), payload: payload)
        let issues = NotificationValidator.issues(in: notification, authentication: authentication).filter { bundleID != nil || $0.field != "apns-topic" }
        if !issues.isEmpty {
            throw CommandContext.Failure("the payload breaks APNs rules for \(pushType) pushes:\n" +
                                         issues.map { "  \($0)" }.joined(separator: "\n"))
        }
    }

    // MARK: import

    /// What a send would refuse in a target's own payload for `pushType`, in words for the line
    /// of the import that carries it; nil when it may be sent.
    static func payloadProblem(_ payload: [UInt8], pushType: PushType) -> String? {
        let issues = NotificationValidator.payloadIssues(payload, pushType: pushType)
        guard !issues.isEmpty else { return nil }
        return issues.map { issue in
            switch issue.rule {
            case .payloadNotJSONObject: "the payload is not valid JSON: \(issue.message)"
            case .payloadTooLarge: "the payload is \(payload.count) bytes; \(pushType) pushes may have at most \(pushType.maxPayloadSize)"
            default: "the payload breaks APNs rules for \(pushType) pushes: \(issue)"
            }
        }.joined(separator: "; ")
    }

    static func importTargets(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let id = try CommandValue.campaignID(parsed.positionals[0])
        let source = parsed.positionals.count > 1 ? parsed.positionals[1] : nil
        let fromTokens = parsed.has("from-tokens")
        switch (source, fromTokens) {
        case (nil, false):
            throw CommandContext.Failure("campaign import needs a FILE of targets, '-' for standard input, or --from-tokens")
        case (.some, true):
            throw CommandContext.Failure("give either a FILE or --from-tokens, not both")
        default: break
        }
        let environment = parsed.value("environment")
        if let environment {
            guard fromTokens else { throw CommandContext.Failure("--environment only applies with --from-tokens") }
            guard PushdConfig.Environment(rawValue: environment) != nil else {
                throw CommandContext.Failure("--environment '\(environment)' is not one of: production, sandbox")
            }
        }
        let config = try context.configIfGiven(parsed)
        let chunkSize = config?.campaignChunkSize ?? CampaignStore.defaultChunkSize
        let connection = try context.connect(parsed, config: config, applicationName: applicationName)
        let store = CampaignStore()
        let started = Timestamp()
        let result: TargetImportResult
        let origin: String
        if fromTokens {
            result = try store.importFromDeviceTokens(connection, campaignID: id, environment: environment, chunkSize: chunkSize)
            origin = "registered \(environment.map { "\($0) " } ?? "")tokens"
        } else {
            // Each target's own payload is checked as its send will check it, before anything is
            // written: a line APNs would refuse fails the import with its number, rather than the
            // target failing at send time. A campaign that does not exist is refused by the import.
            let pushType = try store.campaign(connection, id: id).flatMap { PushType(rawValue: $0.pushType) }
            var check: TargetLineParser.PayloadCheck?
            if let pushType {
                check = { payload in payloadProblem(payload, pushType: pushType) }
            }
            if source == "-" {
                result = try store.importTargets(connection, campaignID: id, fromDescriptor: STDIN_FILENO,
                                                 sourceName: "standard input", chunkSize: chunkSize, checkPayload: check)
                origin = "standard input"
            } else {
                result = try store.importTargets(connection, campaignID: id, fromFile: source!, chunkSize: chunkSize, checkPayload: check)
                origin = source!
            }
        }
        let imported = result.imported
        let seconds = Timestamp().timeIntervalSince(started)
        // A rate over a handful of rows says nothing.
        let speed = seconds > 0 && imported >= 1000 ? ", \(Int((Double(imported) / seconds).rounded())) targets/s" : ""
        context.output("imported \(imported) target\(imported == 1 ? "" : "s"), \(result.duplicatesDropped) duplicate\(result.duplicatesDropped == 1 ? "" : "s") dropped, \(result.prunedDropped == 0 ? "" : "\(result.prunedDropped) pruned token\(result.prunedDropped == 1 ? "" : "s") left out, ")into campaign \(id) from \(origin) in \(seconds.fixed(2)) s\(speed)")
        if let campaign = try store.campaign(connection, id: id) {
            context.output("campaign \(id) now has \(campaign.targets) targets in \(campaign.chunksTotal) chunks")
        }
        return 0
    }

    // MARK: state changes

    static func start(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        try change(parsed, context) { store, connection, id in
            let status = try store.start(connection, id: id)
            if status == .scheduled, let campaign = try store.campaign(connection, id: id) {
                return "campaign \(id): scheduled, sending starts at \(TimeText.moment(campaign.startAt))"
            }
            return "campaign \(id): \(status.rawValue)"
        }
    }

    static func pause(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        try change(parsed, context) { store, connection, id in
            "campaign \(id): \(try store.pause(connection, id: id).rawValue); workers stop at their next checkpoint"
        }
    }

    static func resume(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        try change(parsed, context) { store, connection, id in
            "campaign \(id): \(try store.resume(connection, id: id).rawValue)"
        }
    }

    static func cancel(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        try change(parsed, context) { store, connection, id in
            let status = try store.cancel(connection, id: id)
            // Chunks being sent stay until their workers have recorded what APNs answered.
            let dropped = try store.dropTargets(connection, id: id)
            let sending = try store.chunksStillSending(connection, id: id)
            let counts = try store.campaign(connection, id: id).map { " after \($0.sent) sent and \($0.failed) failed" } ?? ""
            var line = "campaign \(id): \(status.rawValue)\(counts); \(dropped) stored target\(dropped == 1 ? "" : "s") dropped"
            if sending > 0 {
                line += "; \(sending) chunk\(sending == 1 ? " is" : "s are") being sent: \(sending == 1 ? "it stops" : "they stop") at the next checkpoint (within seconds), the answers to \(sending == 1 ? "its" : "their") requests in flight are counted, then the workers drop \(sending == 1 ? "its" : "their") unsent targets"
            }
            return line
        }
    }

    private static func change(_ parsed: ParsedCommand, _ context: CommandContext,
                               _ body: (CampaignStore, PGConnection, Int64) throws -> String) throws -> Int32 {
        let id = try CommandValue.campaignID(parsed.positionals[0])
        let connection = try context.connect(parsed, config: try context.configIfGiven(parsed), applicationName: applicationName)
        context.output(try body(CampaignStore(), connection, id))
        return 0
    }

    // MARK: status and list

    static func status(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let id = try CommandValue.campaignID(parsed.positionals[0])
        let interval = try parsed.value("interval").map { text -> Double in
            guard let seconds = Double(text), seconds >= 0.05, seconds <= 3600 else {
                throw CommandContext.Failure("--interval '\(text)' must be a number of seconds from 0.05 to 3600")
            }
            return seconds
        }
        let connection = try context.connect(parsed, config: try context.configIfGiven(parsed), applicationName: applicationName)
        let read = { () throws -> CampaignFigures in
            guard let campaign = try CampaignStore().campaign(connection, id: id) else {
                throw CommandContext.Failure("campaign \(id) does not exist")
            }
            return CampaignFigures(campaign)
        }
        var campaign = try read()
        if parsed.has("watch") {
            let terminal = isatty(STDOUT_FILENO) == 1
            if terminal {
                // Interrupted mid-line, the shell prompt would land behind the bar: end the line first.
                // Only async-signal-safe calls here.
                signal(SIGINT) { _ in
                    _ = write(STDOUT_FILENO, "\n", 1)
                    _exit(130)
                }
                // A parent may have left SIGINT blocked; the person at the terminal still expects Ctrl-C to work.
                var interrupt = sigset_t()
                sigemptyset(&interrupt)
                sigaddset(&interrupt, SIGINT)
                pthread_sigmask(SIG_UNBLOCK, &interrupt, nil)
            }
            var watch = CampaignWatch(interval: interval ?? (terminal ? 1 : 5), drawsBar: terminal, write: terminal ? { text in
                StandardStreams.writeOutput(text)
            } : { text in context.output(text) })
            campaign = try watch.run(first: campaign, read: read)
        }
        for line in CampaignReport.statusLines(campaign, now: Timestamp()) { context.output(line) }
        if let held = try CampaignStore().refusal(connection, campaignID: id) {
            context.output("held:       \(held.explanation)")
        }
        return 0
    }

    static func list(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let limit = try CommandValue.integer(parsed, "limit", in: 1...100_000) ?? 50
        var status: CampaignStatus?
        if let text = parsed.value("status") {
            guard let known = CampaignStatus(rawValue: text) else {
                throw CommandContext.Failure("--status '\(text)' is not one of: \(CampaignStatus.allCases.map(\.rawValue).joined(separator: ", "))")
            }
            status = known
        }
        let connection = try context.connect(parsed, config: try context.configIfGiven(parsed), applicationName: applicationName)
        let rows = try CampaignStore().campaigns(connection, app: parsed.value("app"), status: status, limit: limit)
        guard !rows.isEmpty else {
            context.output("no campaigns")
            return 0
        }
        let table = [["ID", "APP", "STATUS", "TARGETS", "SENT", "FAILED", "PRUNED", "CREATED", "NAME"]] + rows.map { row in
            [String(row.id), row.app, row.status.rawValue, String(row.targets), String(row.sent), String(row.failed),
             String(row.pruned), TimeText.moment(row.createdAt), row.name]
        }
        for line in TextTable.render(table) { context.output(line) }
        return 0
    }
}

/// `campaign status --watch`: samples the campaign until it is done or cancelled. On a
/// terminal one line is redrawn in place; elsewhere a plain line is written per sample.
struct CampaignWatch {
    var interval: Double
    var drawsBar: Bool
    /// Raw text for a terminal (the caller adds no newline); one line per call otherwise.
    var write: (String) -> Void
    var now: () -> Timestamp = Timestamp.init
    private var meter = RateMeter()

    init(interval: Double, drawsBar: Bool, write: @escaping (String) -> Void) {
        self.interval = interval
        self.drawsBar = drawsBar
        self.write = write
    }

    mutating func run(first: CampaignFigures, read: () throws -> CampaignFigures) throws -> CampaignFigures {
        var campaign = first
        while true {
            show(campaign)
            if campaign.status.isFinal { break }
            usleep(UInt32(interval * 1_000_000))
            campaign = try read()
        }
        if drawsBar { write("\n") }
        return campaign
    }

    private mutating func show(_ campaign: CampaignFigures) {
        let moment = now()
        let rate = meter.observe(processed: CampaignReport.processed(campaign), at: moment)
            ?? CampaignReport.averageRate(campaign, now: moment)
        if drawsBar {
            // Carriage return and erase-line: the bar replaces itself instead of scrolling.
            write("\r\u{1B}[2K" + CampaignReport.progressBar(campaign, rate: campaign.status.isFinal ? CampaignReport.averageRate(campaign, now: moment) : rate))
        } else {
            write(CampaignReport.plainLine(campaign, rate: rate, now: moment))
        }
    }
}
