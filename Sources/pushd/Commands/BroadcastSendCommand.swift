import APNs
import Dispatcher
import Posix
import Locking

/// `pushd send --channel ID`: one broadcast now, to every device subscribed to the channel,
/// with the app's provider token or, for a certificate app, on a connection that presents its
/// certificate for the environment (APNs takes a broadcast with either), and APNs's answer printed.
enum BroadcastSendCommand {
    static func run(_ parsed: ParsedCommand, _ context: CommandContext, config: PushdConfig,
                    standardInput: () -> [UInt8]) throws -> Int32 {
        let app = try SendCommand.chooseApp(parsed.value("app"), config: config)
        // Kept apart from the app's own: its credentials for another environment are that
        // environment's certificate or key, not the ones of its configured environment.
        var environment = app.environment
        if let given = parsed.value("environment") {
            guard let chosen = PushdConfig.Environment(rawValue: given) else {
                throw CommandContext.Failure("--environment '\(given)' is not one of: production, sandbox")
            }
            environment = chosen
        }
        if parsed.value("token") != nil { throw CommandContext.Failure("--channel and --token exclude each other: a send goes to one channel or one device") }
        if let type = parsed.value("push-type"), type != PushType.liveactivity.rawValue {
            throw CommandContext.Failure("--push-type '\(type)': a broadcast is always liveactivity")
        }
        let channelText = parsed.value("channel") ?? ""
        let channel: ChannelID
        do {
            channel = try ChannelID(channelText)
        } catch {
            throw CommandContext.Failure("--channel: \(error)")
        }
        guard let payload = try CommandValue.payload(parsed, readStandardInput: standardInput) else {
            throw CommandContext.Failure("a broadcast needs --payload JSON or --payload-file FILE (a Live Activity update with timestamp and event)")
        }
        let priority = try parsed.value("priority").map { text -> Priority in
            guard let value = Priority(headerValue: text), PriorityRules.liveActivity.contains(value) else {
                throw CommandContext.Failure("--priority '\(text)' is not one of: 10, 5 (Live Activity updates take no other)")
            }
            return value
        }
        let expiration = try parsed.value("expiration").map { text -> Int64 in
            guard let value = Int64(text), value >= 0 else { throw CommandContext.Failure("--expiration '\(text)' must be epoch seconds (0: deliver once)") }
            return value
        }
        let apnsID = try parsed.value("apns-id").map { text -> APNsID in
            guard let value = APNsID(text) else { throw CommandContext.Failure("--apns-id '\(text)' is not a UUID") }
            return value
        }
        let broadcast = BroadcastNotification(bundleID: app.bundleID, channelID: channel, priority: priority, expiration: expiration,
                                              apnsID: apnsID, payload: payload)
        let authentication: AuthenticationMode
        if case .token = app.credentials(for: environment) { authentication = .token } else { authentication = .certificate }
        let issues = broadcast.issues(authentication: authentication)
        if !issues.isEmpty {
            context.errorOutput(SendCommand.Invalid(issues: issues).description)
            return 1
        }
        guard var configuration = try SendCommand.dispatcherConfiguration(for: app, environment: environment, config: config) else {
            throw CommandContext.Failure(AppSender.NoCredentials(app: app.name, environment: environment).description)
        }
        configuration.threads = 1
        configuration.connectionsPerThread = 1
        configuration.maxOutstanding = 1
        let port = configuration.port == 443 ? "" : ":\(configuration.port)"
        context.output("POST https://\(configuration.host)\(port)\(broadcast.path) (app \(app.name), channel \(channel), \(payload.count) bytes)")
        if parsed.has("dry-run") {
            for field in broadcast.headerFields(authorization: SendCommand.authorizationPlaceholder(app, environment: environment)) {
                context.output("  \(field.line)")
            }
            context.output("  " + String(decoding: payload, as: UTF8.self))
            context.output("dry run: nothing was sent")
            return 0
        }
        // nil for a certificate app: the connection's certificate authenticates the broadcast.
        let authorization = try SendCommand.authorization(app, environment: environment, config: config, warn: context.errorOutput)
        let request = try DispatchRequest(path: broadcast.path, headerLines: broadcast.headerFields(authorization: authorization).map(\.line),
                                          body: payload)
        let (lines, code) = SendCommand.describe(try send(request, configuration: configuration))
        for line in lines { context.output(line) }
        return code
    }

    /// One broadcast request on a connection of its own; the answer, or a failure after the
    /// engine's own timeouts (plus a margin against a hang).
    static func send(_ request: DispatchRequest, configuration: DispatcherConfiguration) throws -> DispatchResult {
        let answer = Lock<DispatchResult?>(nil)
        let done = Semaphore()
        let dispatcher = try HTTP2Dispatcher(configuration: configuration) { result in
            answer.withLock { $0 = result }
            done.signal()
        }
        defer { dispatcher.shutdown(drainTimeoutMilliseconds: 0) }
        dispatcher.submit(request, tag: 1)
        let limit = Double(configuration.connectTimeoutMilliseconds + max(configuration.requestTimeoutMilliseconds, 1000)) / 1000 + 5
        guard done.wait(timeout: limit), let result = answer.withLock({ $0 }) else {
            throw CommandContext.Failure("no answer from \(configuration.host):\(configuration.port) within \(Int(limit)) s")
        }
        return result
    }
}
