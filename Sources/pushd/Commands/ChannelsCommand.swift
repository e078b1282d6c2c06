import APNs
import Posix
import QueueStore

/// `pushd channels create|list|delete`: the broadcast channels of `pushd.channels`. Create and
/// delete queue the request (`pushd.create_channel`, `pushd.delete_channel`) for the running
/// daemon, which carries it out against APNs with the app's token key or certificate for the
/// environment; `--wait` waits for its outcome.
enum ChannelsCommand {
    static func create(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let config = try context.configIfGiven(parsed)
        let app = try appName(parsed, config: config)
        let policyText = parsed.value("storage") ?? "none"
        guard let policy = MessageStoragePolicy(name: policyText) else {
            throw CommandContext.Failure("--storage '\(policyText)' is not one of: none, most-recent")
        }
        let environment = try environmentName(parsed)
        let connection = try context.connect(parsed, config: config, applicationName: "pushd-channels")
        defer { connection.close() }
        try checkCredentials(app: app, environment: environment, config: config, connection: connection, context)
        let id = try ChannelStore().requestCreate(connection, app: app, storagePolicy: policy.name, environment: environment)
        context.output("channel request \(id) queued for app \(app) (storage \(policy.name)); the running pushd creates it")
        return try wait(parsed, context, connection: connection, id: id)
    }

    static func delete(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let config = try context.configIfGiven(parsed)
        let app = try appName(parsed, config: config)
        let text = parsed.positionals[0]
        do {
            _ = try ChannelID(text)
        } catch {
            throw CommandContext.Failure("'\(text)' is not a channel id: \(error)")
        }
        let environment = try environmentName(parsed)
        let connection = try context.connect(parsed, config: config, applicationName: "pushd-channels")
        defer { connection.close() }
        try checkCredentials(app: app, environment: environment, config: config, connection: connection, context)
        let id = try ChannelStore().requestDelete(connection, app: app, channelID: text, environment: environment)
        context.output("deletion of channel \(text) queued for app \(app) (request \(id)); the running pushd deletes it")
        return try wait(parsed, context, connection: connection, id: id)
    }

    static func list(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let config = try context.configIfGiven(parsed)
        let connection = try context.connect(parsed, config: config, applicationName: "pushd-channels")
        defer { connection.close() }
        let rows = try ChannelStore().list(connection, app: parsed.value("app"), includeDeleted: parsed.has("all"))
        guard !rows.isEmpty else {
            context.output(parsed.value("app").map { "no channels for app '\($0)'" } ?? "no channels")
            return 0
        }
        let table = [["ID", "APP", "CHANNEL", "ENVIRONMENT", "STORAGE", "STATE", "CREATED", "OUTCOME"]] + rows.map { row in
            [String(row.id), row.app, row.channelID ?? "-", row.environment ?? "-", row.storagePolicy, row.state,
             TimeText.moment(row.createdAt), row.outcome ?? "-"]
        }
        for line in TextTable.render(table) { context.output(line) }
        return 0
    }

    /// With `--wait SECONDS`, polls the row until the daemon has carried the request out:
    /// exit 0 when it succeeded, 1 when it failed or time ran out.
    private static func wait(_ parsed: ParsedCommand, _ context: CommandContext, connection: PGConnection, id: Int64) throws -> Int32 {
        guard let seconds = try CommandValue.integer(parsed, "wait", in: 1...3600) else { return 0 }
        let deadline = Timestamp().addingTimeInterval(Double(seconds))
        while Timestamp() < deadline {
            if let row = try ChannelStore().row(connection, id: id), !row.state.hasPrefix("pending_") {
                context.output("\(row.state): \(row.channelID ?? "-") (\(row.environment ?? "-")) \(row.outcome ?? "")")
                return row.state == "failed" ? 1 : 0
            }
            PosixThread.sleep(seconds: 0.2)
        }
        context.errorOutput("not carried out within \(seconds) s: is a pushd serving this app running? (pushd status)")
        return 1
    }

    /// APNs takes a channel request with the app's token key or its certificate for the
    /// environment (a certificate reaches one environment's host). A request to an environment
    /// the configured app has no credentials for is carried out only by a live instance that
    /// has them: with none, it is refused here rather than queued to fail. Without `--config`
    /// the app's credentials are not known; without `--environment` the request goes to the
    /// app's own environment (create) or the channel's (delete), which the daemon settles.
    private static func checkCredentials(app: String, environment: String?, config: PushdConfig?, connection: PGConnection,
                                         _ context: CommandContext) throws {
        guard let configured = config?.apps.first(where: { $0.name == app }),
              let environment = environment.flatMap(APNsEnvironment.init(name:)).map(BroadcastWorker.configured),
              configured.credentials(for: environment) == nil else { return }
        let entry = InstanceRegistration.environmentEntry(app: app, environment: environment.rawValue)
        let missing = AppSender.NoCredentials(app: app, environment: environment)
        guard try InstanceStore().sentElsewhere(connection, id: "", wanted: [entry]).contains(entry) else {
            throw CommandContext.Failure("\(missing); no live instance of the fleet has credentials for it either")
        }
        context.errorOutput("app '\(app)' has no credentials for \(environment.rawValue) in this configuration: its channel request is carried out by the live instance(s) that have them")
    }

    private static func appName(_ parsed: ParsedCommand, config: PushdConfig?) throws -> String {
        guard let app = parsed.value("app") else { throw CommandContext.Failure("needs --app NAME") }
        if let config, !config.apps.contains(where: { $0.name == app }) {
            throw CommandContext.Failure("--app '\(app)' is not an app of the configuration (apps: \(config.apps.map(\.name).joined(separator: ", ")))")
        }
        return app
    }

    private static func environmentName(_ parsed: ParsedCommand) throws -> String? {
        guard let text = parsed.value("environment") else { return nil }
        guard let environment = APNsEnvironment(name: text) else {
            throw CommandContext.Failure("--environment '\(text)' is not one of: production, sandbox")
        }
        return environment.rawValue
    }
}
