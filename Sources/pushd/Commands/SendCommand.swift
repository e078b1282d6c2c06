import APNs
import Dispatcher
import Glibc
import Posix
import QueueStore
import Synchronization
import Locking

/// `pushd send`: one notification, built from flags or given as JSON, validated like every
/// job, sent once with the app's configured credentials, and APNs's answer printed. For
/// trying credentials and tokens; the exit code is 0 only when APNs accepted it.
enum SendCommand {
    /// Everything decided before the network: the app, the notification and where it goes.
    struct Prepared: Sendable {
        var app: PushdConfig.App
        var environment: PushdConfig.Environment
        var notification: APNsNotification
        var configuration: DispatcherConfiguration
    }

    /// The notification breaks APNs rules; each issue names its field and rule.
    struct Invalid: Error, CustomStringConvertible {
        var issues: [ValidationIssue]
        var description: String {
            (["the notification breaks APNs rules, nothing was sent:"] + issues.map { "  \($0)" }).joined(separator: "\n")
        }
    }

    static func run(_ parsed: ParsedCommand, _ context: CommandContext,
                    standardInput: () -> [UInt8] = { StandardStreams.readInput() }) throws -> Int32 {
        let config = try context.loadConfig(parsed)
        if parsed.value("channel") != nil {
            return try BroadcastSendCommand.run(parsed, context, config: config, standardInput: standardInput)
        }
        let prepared: Prepared
        do {
            prepared = try prepare(parsed, config: config, standardInput: standardInput)
        } catch let invalid as Invalid {
            context.errorOutput(invalid.description)
            return 1
        }
        let notification = prepared.notification
        let configuration = prepared.configuration
        let port = configuration.port == 443 ? "" : ":\(configuration.port)"
        // The token is shortened as in the logs: terminals and shell histories are not the place for it.
        context.output("POST https://\(configuration.host)\(port)/3/device/\(notification.token.redacted) (app \(prepared.app.name), topic \(notification.topic), \(notification.pushType), \(notification.payload.count) bytes)")
        if parsed.has("dry-run") {
            for field in notification.headerFields(authorization: authorizationPlaceholder(prepared.app, environment: prepared.environment)) {
                context.output("  \(field.line)")
            }
            context.output("  " + String(decoding: notification.payload, as: UTF8.self))
            context.output("dry run: nothing was sent")
            return 0
        }
        let result = try send(notification, app: prepared.app, environment: prepared.environment, configuration: configuration,
                              authorization: authorization(prepared.app, environment: prepared.environment, config: config,
                                                           warn: context.errorOutput))
        let (lines, code) = describe(result, certificateApp: Pipeline.authenticatesByCertificate(prepared.app), environment: prepared.environment)
        for line in lines { context.output(line) }
        if let reason = result.response?.reason, let hint = environmentKeyHint(prepared.app, environment: prepared.environment, reason: reason) {
            context.output("  " + hint)
        }
        return code
    }

    /// What `pushd run` does with a credential answer about a key the app uses for `environment`
    /// only (`PipelineContext.environmentKeyVerdict`): it holds that environment, not the app.
    static func environmentKeyHint(_ app: PushdConfig.App, environment: PushdConfig.Environment, reason: String) -> String? {
        guard PipelineContext.environmentKeyReasons.contains(reason),
              case .token(_, let keyID, _) = app.credentials(for: environment),
              let other = PushdConfig.Environment.allCases.first(where: { $0 != environment }),
              app.credentials(for: other) != app.credentials(for: environment) else { return nil }
        return "the key \(keyID) signs for \(environment.rawValue) only: pushd run holds the app's notifications to \(environment.rawValue) and keeps sending to \(other.rawValue); check \(environment.rawValue)_token"
    }

    // MARK: Building

    static func prepare(_ parsed: ParsedCommand, config: PushdConfig,
                        standardInput: () -> [UInt8] = { StandardStreams.readInput() }) throws -> Prepared {
        let app = try chooseApp(parsed.value("app"), config: config)
        var environment = app.environment
        if let given = parsed.value("environment") {
            guard let chosen = PushdConfig.Environment(rawValue: given) else {
                throw CommandContext.Failure("--environment '\(given)' is not one of: production, sandbox")
            }
            environment = chosen
        }
        guard let tokenText = parsed.value("token") else {
            throw CommandContext.Failure("send needs --token HEX: the device token to send to")
        }
        let token: APNs.DeviceToken
        do {
            token = try APNs.DeviceToken(tokenText)
        } catch {
            throw CommandContext.Failure("--token: \(error)")
        }
        let (payload, inferredType) = try payload(parsed, standardInput: standardInput)
        let pushType = try parsed.value("push-type").map(CampaignCommand.pushType) ?? inferredType
        let priority = try parsed.value("priority").map { text -> Priority in
            guard let number = Int(text), let priority = Priority(rawValue: number) else {
                throw CommandContext.Failure("--priority '\(text)' is not an APNs priority: use 10 (now), 5 (conserve power) or 1 (lowest)")
            }
            return priority
        } ?? (pushType == .background ? .conservePower : nil)
        let expiration = try parsed.value("expiration").map { text -> Int64 in
            guard let seconds = Int64(text) else {
                throw CommandContext.Failure("--expiration '\(text)' must be seconds since the epoch, or 0 to deliver only once")
            }
            if OutcomePolicy.expiredBeforeSending(seconds, now: Timestamp()) != nil {
                // APNs would take it and deliver it late: `pushd run` fails such a job unsent.
                throw CommandContext.Failure("--expiration \(text) has passed (\(Int(Timestamp().timeIntervalSince1970) - Int(seconds)) s ago): APNs would deliver the notification late; give a time to come, or 0 to deliver only once")
            }
            return seconds
        } ?? pushType.requiredExpiration
        let apnsID = try parsed.value("apns-id").map { text -> APNsID in
            guard let id = APNsID(text) else {
                throw CommandContext.Failure("--apns-id '\(text)' is not a UUID like 123e4567-e89b-12d3-a456-426614174000")
            }
            return id
        }
        // Built and checked by the factory `run` uses; send adds only what its flags may override.
        let factory = NotificationFactory(app: app)
        let topic = parsed.value("topic") ?? factory.topic(for: pushType)
        let notification = APNsNotification(token: token, topic: topic, pushType: pushType, priority: priority,
                                            expiration: expiration, collapseID: parsed.value("collapse-id"),
                                            apnsID: apnsID, payload: payload)
        let issues = factory.issues(in: notification)
        if !issues.isEmpty { throw Invalid(issues: issues) }

        guard var configuration = try Self.dispatcherConfiguration(for: app, environment: environment, config: config) else {
            throw CommandContext.Failure(AppSender.NoCredentials(app: app.name, environment: environment).description)
        }
        // One request: one loop and one connection, not the daemon's pool.
        configuration.threads = 1
        configuration.connectionsPerThread = 1
        configuration.maxOutstanding = 1
        return Prepared(app: app, environment: environment, notification: notification, configuration: configuration)
    }

    /// The engine settings `run` would use for the app in `environment`, its certificate read
    /// by the loader `run` and `check-config` use; one that cannot be used is an error naming it.
    static func dispatcherConfiguration(for app: PushdConfig.App, environment: PushdConfig.Environment,
                                        config: PushdConfig) throws -> DispatcherConfiguration? {
        do {
            return try Pipeline.dispatcherConfiguration(for: app, environment: environment, config: config)
        } catch {
            throw CommandContext.Failure("app \(app.name): the certificate for \(environment.rawValue) cannot be used: \(error)")
        }
    }

    static func chooseApp(_ name: String?, config: PushdConfig) throws -> PushdConfig.App {
        let names = config.apps.map(\.name).joined(separator: ", ")
        guard let name else {
            guard config.apps.count == 1 else {
                throw CommandContext.Failure("send needs --app NAME: the configuration has several apps (\(names))")
            }
            return config.apps[0]
        }
        guard let app = config.apps.first(where: { $0.name == name }) else {
            throw CommandContext.Failure("--app '\(name)' is not an app of the configuration (apps: \(names))")
        }
        return app
    }

    /// The payload from `--payload`/`--payload-file`, or built from `--alert`, `--title`,
    /// `--badge` and `--sound`; and the push type it suggests when none is given.
    static func payload(_ parsed: ParsedCommand, standardInput: () -> [UInt8]) throws -> ([UInt8], PushType) {
        let builderFlags = ["alert", "title", "badge", "sound"].filter { parsed.value($0) != nil }
        if let given = try CommandValue.payload(parsed, readStandardInput: standardInput) {
            guard builderFlags.isEmpty else {
                throw CommandContext.Failure("--\(builderFlags[0]) builds a payload; it cannot be combined with --payload or --payload-file")
            }
            return (given, isBackground(given) ? .background : .alert)
        }
        guard !builderFlags.isEmpty else {
            if parsed.value("push-type") == PushType.background.rawValue { return (Payload.background().bytes, .background) }
            throw CommandContext.Failure("nothing to send: give --alert TEXT (with --title, --badge, --sound), --payload JSON or --payload-file FILE")
        }
        var aps = APS()
        switch (parsed.value("title"), parsed.value("alert")) {
        case (let title?, let body): aps.alert = .fields(Alert(title: title, body: body))
        case (nil, let body?): aps.alert = .text(body)
        case (nil, nil): break
        }
        if let badge = parsed.value("badge") {
            guard let number = Int(badge), number >= 0 else {
                throw CommandContext.Failure("--badge '\(badge)' must be a whole number, 0 or more (0 clears the badge)")
            }
            aps.badge = number
        }
        if let sound = parsed.value("sound") { aps.sound = .named(sound) }
        return (Payload(aps: aps).bytes, .alert)
    }

    /// A payload that only wakes the app (`content-available` and nothing the user sees) is a background push.
    static func isBackground(_ payload: [UInt8]) -> Bool {
        guard let aps = (try? JSONValue.parse(payload))?.objectValue?["aps"]?.objectValue,
              aps["content-available"]?.numberValue?.description == "1" else { return false }
        return aps["alert"] == nil && aps["sound"] == nil && aps["badge"] == nil
    }

    // MARK: Authentication

    /// The `authorization` header value for token auth, of the key for `environment` (the app's
    /// own when nil); nil with certificate auth (the TLS handshake proves who we are).
    ///
    /// The token is the fleet's, by the policy `pushd run` follows (`ProviderTokenService`): one
    /// an instance shares in `pushd.provider_tokens` is used while it may be, else one is minted
    /// and shared there. APNs answers TooManyProviderTokenUpdates to a team whose tokens are made
    /// more often than every 20 minutes, across connections: a command run every minute must not
    /// mint one each time. Without the database, a token of its own, and `warn` says so.
    static func authorization(_ app: PushdConfig.App, environment: PushdConfig.Environment? = nil, config: PushdConfig,
                              warn: (String) -> Void) throws -> String? {
        guard case .token(let teamID, let keyID, let keyFile) = app.credentials(for: environment ?? app.environment) else { return nil }
        let key = ProviderTokenService.Key(keyID: keyID, teamID: teamID)
        let signer: ProviderTokenSigner
        let policy: ProviderTokenPolicy
        do {
            signer = ProviderTokenSigner(key: try SigningKey(contentsOfFile: keyFile, keyID: keyID, teamID: teamID))
            policy = try ProviderTokenPolicy(refreshSeconds: Int64(config.apns.providerTokenRefreshSeconds),
                                             updateWindowSeconds: Int64(config.apns.providerTokenUpdateWindowSeconds))
        } catch {
            throw CommandContext.Failure("app \(app.name): \(error)")
        }
        // A one-shot command waits for an unreachable database a few seconds, not the
        // daemon's dead-peer time, before it signs a token of its own.
        QueueSession.deadPeerSeconds.store(min(QueueSession.deadPeerSeconds.load(ordering: .relaxed), 5), ordering: .relaxed)
        let databaseError = Lock<String?>(nil)
        let foreign = Lock(false)
        let instance = RunCommand.instanceName(host: RunCommand.hostName(), pid: getpid(), random: UInt32.random(in: 0 ... 0xFF_FFFF))
        let tokens = try ProviderTokenService(
            databaseURL: config.databaseURL, instance: instance + " (command)", signers: [key: signer], keyFiles: [key: keyFile],
            policy: policy, logger: Logger(level: .error, sink: MemoryLogSink()), onRefresh: { _ in },
            onForeign: { _ in foreign.withLock { $0 = true } },
            onDatabaseError: { error in databaseError.withLock { $0 = $0 ?? "\(error)" } }, replacesForeignTokens: false)
        defer { tokens.close() }
        let header = try tokens.authorization(key)
        if foreign.withLock({ $0 }) {
            warn("warning: the provider token the instances share for key \(keyID) of team \(teamID) (pushd.provider_tokens) is not "
                 + "signed by \(keyFile): signed one for this command alone and left theirs in place; the key files differ, and the "
                 + "right one is the one APNs accepts")
        }
        if let error = databaseError.withLock({ $0 }) {
            warn("warning: the provider token the instances share (pushd.provider_tokens) could not be read: \(error); "
                 + "signed one for this command alone. APNs answers TooManyProviderTokenUpdates when a team's tokens are made more often than every 20 minutes")
        }
        return header
    }

    /// What a dry run shows instead of a signed token, which is a credential for an hour.
    static func authorizationPlaceholder(_ app: PushdConfig.App, environment: PushdConfig.Environment? = nil) -> String? {
        guard case .token(let teamID, let keyID, _) = app.credentials(for: environment ?? app.environment) else { return nil }
        return "bearer <ES256 token of key \(keyID), team \(teamID)>"
    }

    // MARK: Sending

    /// Sends through the same client `pushd run` uses, with the provider token `authorization`
    /// (`authorization(_:environment:config:warn:)`), or the environment's certificate when nil.
    static func send(_ notification: APNsNotification, app: PushdConfig.App, environment: PushdConfig.Environment,
                     configuration: DispatcherConfiguration, authorization: String?) throws -> DispatchResult {
        let answer = Lock<DispatchResult?>(nil)
        let done = Semaphore()
        let authentication: APNsAuthentication
        if let token = authorization {
            authentication = .tokenSource { token }
        } else {
            authentication = .certificate(configuration.credential)
        }
        let client = try APNsClient(configuration: configuration, environment: environment.apns, authentication: authentication) { result in
            answer.withLock { $0 = result.dispatch }
            done.signal()
        }
        defer { client.shutdown(drainTimeoutMilliseconds: 0) }
        do {
            try client.submit(notification, tag: 1)
        } catch {
            throw CommandContext.Failure("app \(app.name): \(error)")
        }
        // The dispatcher's own timeouts end every request; the margin only guards against a hang.
        let limit = Double(configuration.connectTimeoutMilliseconds + max(configuration.requestTimeoutMilliseconds, 1000)) / 1000 + 5
        guard done.wait(timeout: limit), let result = answer.withLock({ $0 }) else {
            throw CommandContext.Failure("no answer from \(configuration.host):\(configuration.port) within \(Int(limit)) s")
        }
        return result
    }

    /// APNs's answer in words, and the exit code: 0 only for an accepted notification. A
    /// failure of a `certificateApp`'s connection that may be APNs refusing its certificate
    /// says so on a line of its own (`CertificateRefusalHint`), as `pushd run` does in its log.
    /// `environment`: the one the notification went to, which a BadDeviceToken answer may blame.
    static func describe(_ result: DispatchResult, certificateApp: Bool = false,
                         environment: PushdConfig.Environment? = nil) -> (lines: [String], exitCode: Int32) {
        let elapsed = (Double(result.latencyNanoseconds) / 1_000_000).fixed(0) + " ms"
        guard let response = result.response else {
            let attempts = "after \(result.attempts) attempt\(result.attempts == 1 ? "" : "s"), \(elapsed)"
            var lines: [String]
            var hint: String?
            switch result.outcome {
            case .transportFailure(let error):
                lines = ["not sent: \(error) (\(attempts))"]
                // A refusal read from the server (a TLS alert) is certain: said as `pushd run` says it.
                let kind = TransportFailureKind(error)
                hint = kind.isConfigurationError ? kind.explanation : CertificateRefusalHint.hint(for: error, certificateApp: certificateApp)
            case .notSent(let notSent):
                lines = ["\(notSent) (\(attempts))"]
                hint = CertificateRefusalHint.hint(for: notSent, certificateApp: certificateApp)
            case .response:
                lines = ["not sent: no response (\(attempts))"]
            }
            if let hint { lines.append("  " + hint) }
            return (lines, 1)
        }
        var id = response.apnsID.map { " apns-id \($0.lowercasedString)" } ?? ""
        // Only the development environment sends it; Apple's delivery log finds the push by it.
        if let unique = response.uniqueID { id += " apns-unique-id \(unique.lowercasedString)" }
        if response.status == 200 {
            return (["200 accepted:\(id) (\(elapsed))"], 0)
        }
        let reason = response.reason
        let action = ResponseClassifier.classify(status: response.status, reason: reason.map { APNsReason($0) }, timestamp: response.timestampMilliseconds)
        let explanation = reason == APNsReason.badDeviceToken.rawValue ? badDeviceTokenExplanation(environment) : explain(action)
        var lines = ["\(response.status) \(reason ?? "(no reason)"):\(id) (\(elapsed))", "  " + explanation]
        if reason == nil, !response.body.isEmpty { lines.append("  body: " + String(decoding: response.body, as: UTF8.self)) }
        return (lines, 1)
    }

    /// BadDeviceToken is also APNs's answer to a token of the other environment: the likeliest
    /// cause when a token that works in the app is tried here, so it is named with the fix.
    static func badDeviceTokenExplanation(_ environment: PushdConfig.Environment?) -> String {
        let host = environment.map { "the \($0.rawValue) host" } ?? "this host"
        let fix = environment.map { $0 == .production ? "; a development build's token needs --environment sandbox"
                                                      : "; an App Store or TestFlight build's token needs --environment production" } ?? ""
        return "the device token is not valid for \(host): a token of the other environment (a development build's tokens work only with sandbox, an App Store or TestFlight build's only with production), or not a device token of the app at all\(fix); not recorded by this command (pushd run prunes such tokens in pushd.device_tokens, but not a run of them from one campaign or lane, which it takes as the other environment's)"
    }

    static func explain(_ action: ResponseAction) -> String {
        switch action {
        case .delivered:
            return "accepted"
        case .pruneToken(let timestamp):
            let since = timestamp.map { " since \(TimeText.moment(Timestamp(timeIntervalSince1970: Double($0) / 1000)))" } ?? ""
            // This command writes nothing to the database: say so, rather than let it read as pruned.
            return "the device token is not valid for this app\(since); not recorded by this command (pushd run prunes such tokens in pushd.device_tokens)"
        case .retry:
            return "a temporary refusal; pushd retries such notifications later"
        case .refreshProviderTokenThenRetry:
            return "the provider token was too old; pushd mints a new one and retries"
        case .reconnectThenRetry:
            return "the connection could not be used; pushd reconnects and retries"
        // One answer cannot tell a request APNs refuses from credentials it refuses: say how `run` tells.
        case .deadLetter(let why) where why == ResponseClassifier.forbiddenWhy || why.hasSuffix(ResponseClassifier.unknownForbiddenSuffix):
            return "\(why); pushd run fails such a notification, and holds the app's sending to that environment (its jobs kept, the other environment going on) when apns.forbidden_limit of them in a row there, none accepted, point at its credentials for it"
        case .deadLetter(let why):
            return why
        case .holdScope(_, _, let why):
            return "\(why); pushd run holds such notifications, keeps them and resumes on SIGHUP"
        case .configurationError(let reason) where reason == .unrelatedKeyIdInToken:
            return "APNs refused the provider token's key as unrelated to the connection's first push (UnrelatedKeyIdInToken) also on a new connection: check the key id, team id and key"
        case .configurationError(let reason):
            return "the app's credentials or environment were refused (\(reason)): check the key id, team id, key or certificate, and production/sandbox"
        }
    }
}
