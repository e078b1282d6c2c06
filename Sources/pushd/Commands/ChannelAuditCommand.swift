import APNs
import Dispatcher
import Posix
import QueueStore

/// `pushd channels audit`: asks APNs for every channel of an app (`GET /1/apps/<bundle id>/all-channels`
/// on the environment's channel management host, with the app's provider token or on a
/// connection that presents its certificate for the environment) and sets the
/// answer beside `pushd.channels`. Exit 0 when they agree, 1 when they differ, 2 when the
/// comparison could not be made (configuration, credentials, APNs's answer, database).
enum ChannelAuditCommand {
    static func run(_ parsed: ParsedCommand, _ context: CommandContext) -> Int32 {
        do {
            return try audit(parsed, context)
        } catch {
            context.errorOutput("pushd channels audit: \(error)")
            return 2
        }
    }

    private static func audit(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let config = try context.loadConfig(parsed)
        guard let name = parsed.value("app") else { throw CommandContext.Failure("needs --app NAME") }
        let app = try SendCommand.chooseApp(name, config: config)
        var environment = app.environment
        if let text = parsed.value("environment") {
            guard let chosen = PushdConfig.Environment(rawValue: text) else {
                throw CommandContext.Failure("--environment '\(text)' is not one of: production, sandbox")
            }
            environment = chosen
        }
        // The database first: a comparison it cannot finish is not worth a request to APNs.
        let rows: [ChannelRow]
        do {
            let connection = try context.connect(parsed, config: config, applicationName: "pushd-channels")
            defer { connection.close() }
            rows = try ChannelStore().list(connection, app: app.name, includeDeleted: true)
        } catch {
            throw CommandContext.Failure("database: \(error)")
        }
        let atAPNs = try channelsAtAPNs(app: app, environment: environment, config: config, context)
        let audit = ChannelAudit(atAPNs: atAPNs, rows: rows, environment: environment.rawValue, appEnvironment: app.environment.rawValue)
        for line in report(audit, app: app.name, environment: environment, listed: atAPNs.count, configFile: parsed.value("config")) {
            context.output(line)
        }
        return audit.agrees ? 0 : 1
    }

    /// The ids APNs lists for the app in `environment`; an error that says what went wrong otherwise.
    static func channelsAtAPNs(app: PushdConfig.App, environment: PushdConfig.Environment, config: PushdConfig,
                               _ context: CommandContext) throws -> [String] {
        guard var configuration = try SendCommand.dispatcherConfiguration(for: app, environment: environment, config: config) else {
            throw CommandContext.Failure(AppSender.NoCredentials(app: app.name, environment: environment).description)
        }
        // The management API has hosts and ports of its own, as the daemon uses them.
        try configuration.applyChannelManagementHost(config.apns.channelHostOverride, environment: environment.apns)
        configuration.threads = 1
        configuration.connectionsPerThread = 1
        configuration.maxOutstanding = 1

        let requestID = APNsID()
        let request = ChannelRequest(bundleID: app.bundleID, operation: .listAll, requestID: requestID)
        let issues = request.issues(authentication: authentication(app, environment: environment))
        if !issues.isEmpty { throw CommandContext.Failure(SendCommand.Invalid(issues: issues).description) }
        let target = "GET https://\(configuration.host):\(configuration.port)\(request.path)"
        context.output("\(target) (app \(app.name), \(environment.rawValue), apns-request-id \(requestID.lowercasedString))")
        // nil for a certificate app: the connection's certificate authenticates the request.
        let authorization = try SendCommand.authorization(app, environment: environment, config: config, warn: context.errorOutput)
        let dispatchRequest = try DispatchRequest(method: .get, path: request.path,
                                                  headerLines: request.headerFields(authorization: authorization).map(\.line), body: [])
        let result = try BroadcastSendCommand.send(dispatchRequest, configuration: configuration)
        guard let response = result.response, response.status == 200 else {
            // The same words `pushd send` uses for a failed request or a refusal.
            let (lines, _) = SendCommand.describe(result)
            throw CommandContext.Failure("APNs did not list the channels of app \(app.name) (\(target)): "
                                         + lines.map { String($0.drop { $0 == " " }) }.joined(separator: "; "))
        }
        guard let ids = ChannelAnswer.channels(fromListBody: response.body) else {
            throw CommandContext.Failure("APNs answered 200 to \(target) with a body that is not {\"channels\":[…]}: "
                                         + String(decoding: response.body.prefix(200), as: UTF8.self))
        }
        return ids
    }

    private static func authentication(_ app: PushdConfig.App, environment: PushdConfig.Environment) -> AuthenticationMode {
        if case .token = app.credentials(for: environment) { return .token }
        return .certificate
    }

    /// The three groups: at APNs and unknown to pushd (each with the command that deletes it),
    /// recorded active and not at APNs, and how many agree.
    static func report(_ audit: ChannelAudit, app: String, environment: PushdConfig.Environment, listed: Int,
                       configFile: String?) -> [String] {
        var lines = ["APNs has \(listed) channel\(listed == 1 ? "" : "s") for app \(app) in \(environment.rawValue); "
                     + "\(audit.agreeing) of them recorded in pushd.channels"]
        let config = configFile.map { " --config \($0)" } ?? ""
        if audit.unknownToPushd.isEmpty {
            lines.append("at APNs, unknown to pushd: none")
        } else {
            lines.append("at APNs, unknown to pushd (\(audit.unknownToPushd.count)): each counts against the app's channel limit; "
                         + "delete one nobody uses with:")
            for id in audit.unknownToPushd {
                lines.append("  pushd channels delete\(config) --app \(app) --environment \(environment.rawValue) \(id)")
            }
        }
        if audit.missingAtAPNs.isEmpty {
            lines.append("recorded active in pushd.channels, not at APNs: none")
        } else {
            lines.append("recorded active in pushd.channels, not at APNs (\(audit.missingAtAPNs.count)): broadcasts to them are refused "
                         + "(ChannelNotRegistered)")
            let table = [["ID", "CHANNEL", "STORAGE", "CREATED"]] + audit.missingAtAPNs.map { row in
                [String(row.id), row.channelID ?? "-", row.storagePolicy, TimeText.moment(row.createdAt)]
            }
            for line in TextTable.render(table) { lines.append("  " + line) }
        }
        lines.append("agree: \(audit.agreeing)")
        if audit.pendingCreates > 0 {
            lines.append("note: \(audit.pendingCreates) channel creation\(audit.pendingCreates == 1 ? " is" : "s are") still pending; "
                         + "a channel being created shows as unknown until pushd records it: audit again once none is")
        }
        return lines
    }
}
