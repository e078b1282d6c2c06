import APNs
import Posix
import QueueStore

/// Turns the YAML configuration file into a `PushdConfig`, applying environment
/// overrides, and lists every problem with its setting and line.
///
/// Environment overrides: `PUSHD_DATABASE_URL`, `PUSHD_LOG_LEVEL`, and per app
/// (name upper-cased, other characters as `_`): `PUSHD_APP_<NAME>_KEY_FILE`,
/// `PUSHD_APP_<NAME>_P12_PASSWORD`.
enum ConfigLoader {
    /// Apple's hosts named in `apns.host` or `apns.sandbox_host`, where they would carry the
    /// other environment's notifications: `apns.host` replaces both environments' hosts (for
    /// apns-mock). APNs answers BadDeviceToken to a token of the other environment, and pushd
    /// prunes the token for it, so such a setting would prune a whole environment's tokens.
    /// Returns the setting's key and what is wrong, for each.
    static func appleHostMisuse(host: String?, sandboxHost: String?) -> [(key: String, message: String)] {
        func apple(_ text: String?) -> APNsEnvironment? {
            guard let text, let parsed = try? HostOverride(parsing: text, setting: "") else { return nil }
            var name = parsed.host.lowercased()
            if name.hasSuffix(".") { name.removeLast() }
            if name == APNsEnvironment.production.host { return .production }
            if name == APNsEnvironment.sandbox.host || name == "api.development.push.apple.com" { return .sandbox }
            return nil
        }
        let why = "APNs answers BadDeviceToken to tokens of the other environment, and pushd prunes them"
        let fix = "leave it out: Apple's hosts are the default (apns.alternate_port: true for port 2197)"
        var found = [(key: String, message: String)]()
        switch apple(host) {
        case .sandbox?:
            found.append(("host", "'\(host ?? "")' is Apple's sandbox host, and apns.host replaces the production host too: production notifications would go to it (\(why)); \(fix)"))
        case .production? where sandboxHost == nil:
            found.append(("host", "'\(host ?? "")' is Apple's production host, and apns.host replaces the sandbox host too: sandbox notifications would go to it (\(why)); \(fix)"))
        default:
            break
        }
        if apple(sandboxHost) == .production {
            found.append(("sandbox_host", "'\(sandboxHost ?? "")' is Apple's production host: sandbox notifications would go to it (\(why)); \(fix)"))
        }
        return found
    }

    static func load(file: String, environment: [String: String] = Environment.variables) throws -> (PushdConfig, [ConfigProblem]) {
        let text: String
        do {
            text = try FileSystem.readText(file)
        } catch {
            throw ConfigError(file: file, problems: [ConfigProblem(severity: .error, path: "file", line: 0,
                                                                    message: "cannot read \(file): \(ErrorReason.of(error))")])
        }
        return try parse(text, file: file, environment: environment)
    }

    static func parse(_ text: String, file: String = "config", environment: [String: String]) throws -> (PushdConfig, [ConfigProblem]) {
        let root: YAMLNode
        do {
            root = try YAMLLibrary.parse(text)
        } catch {
            throw ConfigError(file: file, problems: [ConfigProblem(severity: .error, path: "file", line: error.line,
                                                                    message: "not valid YAML: \(error.message)")])
        }
        let reader = ConfigReader()
        let top = ConfigReader.Section(reader: reader, path: "", node: root)

        let database = top.section("database")
        var databaseURL = database.string("url")
        let deadPeerSeconds = database.int("dead_peer_s", default: 30, range: 2...600)
        let stallSeconds = database.int("stall_s", default: 60, range: 1...3600)
        database.rejectUnknownKeys()
        if let override = environment["PUSHD_DATABASE_URL"], !override.isEmpty { databaseURL = override }
        if databaseURL == nil {
            reader.error("database.url", line: database.line, "missing: set database.url or PUSHD_DATABASE_URL")
        } else if let url = databaseURL, !(url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") || url.contains("=")) {
            reader.error("database.url", line: database.line, "expected a postgresql:// URL or a libpq keyword string")
        }

        var config = PushdConfig(databaseURL: databaseURL ?? "", apps: [])
        config.databaseDeadPeerSeconds = deadPeerSeconds
        config.databaseStallSeconds = stallSeconds
        if stallSeconds <= 30 {
            reader.warning("database.stall_s", line: database.line,
                           "\(stallSeconds)s is not above statement_timeout (30s): a slow but healthy statement can be taken for a stalled database")
        }

        let metrics = top.section("metrics")
        if let listen = metrics.string("listen") {
            // The parse the metrics server binds with, the one of the host overrides (`HostPort`).
            do {
                _ = try listenAddress(listen)
                config.metricsListen = listen
            } catch {
                reader.error("metrics.listen", line: metrics.node("listen")?.line ?? metrics.line, error.explanation)
            }
        }
        config.metricsEndpoint.connectionLimit = metrics.int("connection_limit", default: config.metricsEndpoint.connectionLimit, range: 1...65_535)
        config.metricsEndpoint.perAddressLimit = metrics.int("per_address_limit", default: config.metricsEndpoint.perAddressLimit, range: 0...65_535)
        config.metricsEndpoint.requestTimeoutSeconds = metrics.int("request_timeout_s", default: config.metricsEndpoint.requestTimeoutSeconds,
                                                                   range: 1...3_600)
        config.metricsEndpoint.answerTimeoutSeconds = metrics.int("answer_timeout_s", default: config.metricsEndpoint.answerTimeoutSeconds,
                                                                  range: 1...3_600)
        config.metricsEndpoint.idleTimeoutSeconds = metrics.int("idle_timeout_s", default: config.metricsEndpoint.idleTimeoutSeconds, range: 1...3_600)
        metrics.rejectUnknownKeys()

        let log = top.section("log")
        config.logLevel = log.choice("level", default: PushdConfig.LogLevel.info)
        config.logFile = log.string("file")
        config.logSummarySeconds = log.int("summary_interval_s", default: config.logSummarySeconds, range: 1...86_400)
        log.rejectUnknownKeys()
        if let level = environment["PUSHD_LOG_LEVEL"], !level.isEmpty {
            if let parsed = PushdConfig.LogLevel(rawValue: level.lowercased()) {
                config.logLevel = parsed
            } else {
                reader.error("PUSHD_LOG_LEVEL", line: 0, "'\(level)' is not one of: debug, info, notice, warning, error")
            }
        }

        let apns = top.section("apns")
        config.apns.hostOverride = apns.string("host")
        config.apns.sandboxHostOverride = apns.string("sandbox_host")
        config.apns.channelHostOverride = apns.string("channel_host")
        // The parse every dispatcher applies (`HostOverride`): what it would refuse at the
        // first connection is refused here, with the setting's line.
        for (key, value) in [("host", config.apns.hostOverride), ("sandbox_host", config.apns.sandboxHostOverride),
                             ("channel_host", config.apns.channelHostOverride)] {
            guard let value else { continue }
            do {
                _ = try HostOverride(parsing: value, setting: "apns.\(key)")
            } catch {
                reader.error("apns.\(key)", line: apns.node(key)?.line ?? apns.line, error.explanation)
            }
        }
        for (key, message) in Self.appleHostMisuse(host: config.apns.hostOverride, sandboxHost: config.apns.sandboxHostOverride) {
            reader.error("apns.\(key)", line: apns.node(key)?.line ?? apns.line, message)
        }
        config.apns.caFile = apns.string("ca_file")
        config.apns.proxy = apns.string("proxy")
        config.apns.alternatePort = apns.bool("alternate_port", default: false)
        config.apns.threads = apns.int("threads", default: config.apns.threads, range: 1...64)
        config.forbiddenLimit = apns.int("forbidden_limit", default: config.forbiddenLimit, range: 1...100_000)
        config.apns.connectionsPerApp = apns.int("connections_per_app", default: config.apns.connectionsPerApp, range: 1...64)
        config.apns.maxConnectionsPerApp = apns.int("max_connections_per_app", default: config.apns.maxConnectionsPerApp, range: 1...1024)
        if config.apns.maxConnectionsPerApp < config.apns.threads * config.apns.connectionsPerApp {
            reader.error("apns.max_connections_per_app", line: apns.line,
                         "\(config.apns.maxConnectionsPerApp) is below apns.threads × apns.connections_per_app (\(config.apns.threads * config.apns.connectionsPerApp)): the connections every thread keeps")
        }
        config.apns.connectionGrowthJudgedOverMilliseconds = apns.int(
            "connection_growth_judged_ms", default: config.apns.connectionGrowthJudgedOverMilliseconds, range: 0...60_000)
        config.apns.streamsPerConnection = apns.int("streams_per_connection", default: config.apns.streamsPerConnection, range: 1...10_000)
        // Unset, the window is every stream the lane may open: a ceiling raised on connections
        // or streams is usable without a second setting that would silently cap it.
        config.apns.maxInFlight = apns.int("max_in_flight", default: config.apns.derivedMaxInFlight, range: 1...1_000_000)
        if config.apns.maxInFlight < config.apns.threads {
            reader.error("apns.max_in_flight", line: apns.line,
                         "\(config.apns.maxInFlight) is below apns.threads (\(config.apns.threads)): every thread needs at least one notification in flight")
        }
        config.apns.connectTimeoutMilliseconds = apns.int("connect_timeout_ms", default: config.apns.connectTimeoutMilliseconds, range: 100...600_000)
        config.apns.requestTimeoutMilliseconds = apns.int("request_timeout_ms", default: config.apns.requestTimeoutMilliseconds, range: 100...600_000)
        config.apns.pingIntervalMilliseconds = apns.int("ping_interval_ms", default: config.apns.pingIntervalMilliseconds, range: 100...3_600_000)
        config.apns.pingTimeoutMilliseconds = apns.int("ping_timeout_ms", default: config.apns.pingTimeoutMilliseconds, range: 100...600_000)
        config.apns.idleCloseSeconds = apns.int("idle_close_s", default: config.apns.idleCloseSeconds, range: 1...86_400)
        config.apns.transactionalIdleCloseSeconds = apns.int(
            "transactional_idle_close_s", default: config.apns.transactionalIdleCloseSeconds, range: 0...86_400)
        config.apns.providerTokenUpdateWindowSeconds = apns.int(
            "provider_token_update_window_s", default: config.apns.providerTokenUpdateWindowSeconds,
            range: 1...Int(ProviderTokenPolicy.apnsUpdateWindowSeconds))
        config.apns.providerTokenRefreshSeconds = apns.int(
            "provider_token_refresh_s", default: config.apns.providerTokenRefreshSeconds, range: 1...86_400)
        do {
            _ = try ProviderTokenPolicy(refreshSeconds: Int64(config.apns.providerTokenRefreshSeconds),
                                        updateWindowSeconds: Int64(config.apns.providerTokenUpdateWindowSeconds))
        } catch {
            reader.error("apns.provider_token_refresh_s", line: apns.line, "\(error)")
        }
        apns.rejectUnknownKeys()

        let retry = top.section("retry")
        config.retry.maxAttempts = retry.int("max_attempts", default: config.retry.maxAttempts, range: 1...1000)
        config.retry.baseDelayMilliseconds = retry.int("base_delay_ms", default: config.retry.baseDelayMilliseconds, range: 1...3_600_000)
        config.retry.maxDelayMilliseconds = retry.int("max_delay_ms", default: config.retry.maxDelayMilliseconds, range: 1...86_400_000)
        config.retry.outageLimitSeconds = retry.int("outage_limit_s", default: config.retry.outageLimitSeconds, range: 1...2_592_000)
        config.retry.outageProbeMilliseconds = retry.int("outage_probe_ms", default: config.retry.outageProbeMilliseconds, range: 500...300_000)
        if config.retry.maxDelayMilliseconds < config.retry.baseDelayMilliseconds {
            reader.error("retry.max_delay_ms", line: retry.line, "must not be smaller than retry.base_delay_ms")
        }
        retry.rejectUnknownKeys()

        let workers = top.section("workers")
        config.transactionalWorkers = workers.int("transactional", default: config.transactionalWorkers, range: 1...64)
        config.batchSize = workers.int("batch_size", default: config.batchSize, range: 1...10_000)
        config.campaignWorkers = workers.int("campaign", default: config.campaignWorkers, range: 0...64)
        workers.rejectUnknownKeys()
        if let problem = claimedBeyondWindow(config) {
            reader.error("workers.batch_size", line: workers.line, problem)
        }

        let campaigns = top.section("campaigns")
        config.campaignChunkSize = campaigns.int("chunk_size", default: config.campaignChunkSize, range: 10...100_000)
        config.campaignLeaseSeconds = campaigns.int("lease_s", default: config.campaignLeaseSeconds, range: 3...3600)
        let rate = campaigns.int("default_rate", default: 0, range: 0...10_000_000)
        config.defaultCampaignRate = rate == 0 ? nil : rate
        config.campaignNiceness = campaigns.int("niceness", default: config.campaignNiceness, range: 0...19)
        config.campaignAnswerCoalescingMilliseconds = campaigns.int("answer_coalescing_ms", default: config.campaignAnswerCoalescingMilliseconds,
                                                                    range: 0...50)
        config.campaignAdaptiveInFlight = campaigns.bool("adaptive_in_flight", default: config.campaignAdaptiveInFlight)
        config.campaignReadsThroughOneTransfer = campaigns.bool("read_through_one_transfer", default: config.campaignReadsThroughOneTransfer)
        campaigns.rejectUnknownKeys()

        let queue = top.section("queue")
        config.dedupeRetentionHours = queue.int("dedupe_retention_hours", default: config.dedupeRetentionHours, range: 1...8_760)
        queue.rejectUnknownKeys()
        let tokens = top.section("tokens")
        config.notForTopicLimit = tokens.int("not_for_topic_limit", default: config.notForTopicLimit, range: 1...100_000)
        config.badDeviceTokenLimit = tokens.int("bad_device_token_limit", default: config.badDeviceTokenLimit, range: 1...100_000)
        tokens.rejectUnknownKeys()

        let shutdown = top.section("shutdown")
        config.drainTimeoutSeconds = shutdown.int("drain_timeout_s", default: config.drainTimeoutSeconds, range: 1...3600)
        shutdown.rejectUnknownKeys()

        let apps = top.list("apps")
        if apps.isEmpty {
            reader.error("apps", line: top.line, "missing: at least one app with its bundle id and credentials")
        }
        for (path, node) in apps {
            if let app = readApp(ConfigReader.Section(reader: reader, path: path, node: node), environment: environment) {
                if config.apps.contains(where: { $0.name == app.name }) {
                    reader.error("\(path).name", line: node.line, "app '\(app.name)' is defined twice")
                } else if let (other, shared) = config.apps.lazy.compactMap({ other in
                    Self.sharedOverride(app.name, other.name).map { (other.name, $0) }
                }).first {
                    // One variable would set both apps' secrets: whichever read it, the other's is wrong.
                    reader.error("\(path).name", line: node.line,
                                 "app '\(app.name)' and app '\(other)' would both read \(shared) (a name's characters other than letters and digits become _); give one of them another name")
                }
                config.apps.append(app)
            }
        }
        top.rejectUnknownKeys()

        if reader.hasErrors { throw ConfigError(file: file, problems: reader.problems) }
        return (config, reader.problems)
    }

    private static func readApp(_ section: ConfigReader.Section, environment: [String: String]) -> PushdConfig.App? {
        let reader = section.reader
        let name = section.requiredString("name", what: "the app's name, as used in pushd.jobs.app")
        if let name, !isValidAppName(name) {
            reader.error(section.childPath("name"), line: section.line, "'\(name)' must be \(AppName.rule)")
        }
        let bundleID = section.requiredString("bundle_id", what: "the app's bundle id (the apns-topic)")
        if let bundleID, !isValidBundleID(bundleID) {
            reader.error(section.childPath("bundle_id"), line: section.line,
                         "'\(bundleID)' is not a bundle id like com.example.app (letters, digits, '-' and '.', at least two parts)")
        } else if let bundleID, let type = PushType.typeOwningSuffix(of: bundleID), let suffix = type.topicSuffix {
            // Every alert would be refused at send time, and a \(type) push addressed to the suffix twice.
            reader.error(section.childPath("bundle_id"), line: section.line,
                         "'\(bundleID)' ends in '\(suffix)', the topic suffix of \(type) pushes: give the app's bundle id, pushd adds the suffix each push type needs")
        }
        let environmentSetting = section.choice("environment", default: PushdConfig.Environment.production)
        let rate = section.int("campaign_rate", default: 0, range: 0...10_000_000)
        let prefix = variablePrefix(name ?? "")

        let hasToken = section.node("token") != nil
        let hasCertificate = section.node("certificate") != nil
        var credentials: PushdConfig.Credentials?
        switch (hasToken, hasCertificate) {
        case (true, true):
            reader.error(section.path, line: section.line, "set either token or certificate credentials, not both")
        case (false, false):
            reader.error(section.path, line: section.line, "missing credentials: a token (team_id, key_id, key_file) or a certificate")
        case (true, false):
            credentials = readToken(section.section("token"), keyFileVariable: prefix + "KEY_FILE", environment: environment)
        case (false, true):
            credentials = readCertificate(section.section("certificate"), passwordVariable: prefix + "P12_PASSWORD", environment: environment)
        }
        // A certificate is issued for one environment: the other one's host needs its own.
        var otherCertificates = [PushdConfig.Environment: PushdConfig.Credentials]()
        for other in PushdConfig.Environment.allCases {
            let key = "\(other.rawValue)_certificate"
            guard section.node(key) != nil else { continue }
            if hasToken {
                reader.error(section.childPath(key), line: section.line, "a token app serves both environments with its key (\(other.rawValue)_token gives one for \(other.rawValue) alone); \(key) is for certificate apps")
            } else if other == environmentSetting {
                reader.error(section.childPath(key), line: section.line, "certificate already serves \(other.rawValue), the app's environment")
            } else {
                otherCertificates[other] = readCertificate(section.section(key), passwordVariable: prefix + other.rawValue.uppercased() + "_P12_PASSWORD",
                                                           environment: environment)
            }
        }
        // Apple recommends a key per environment (a key may be restricted to Sandbox or
        // Production): `<env>_token` signs for that environment, `token` for the rest.
        var environmentKeys = [PushdConfig.Environment: PushdConfig.Credentials]()
        for other in PushdConfig.Environment.allCases {
            let key = "\(other.rawValue)_token"
            guard section.node(key) != nil else { continue }
            if hasCertificate {
                reader.error(section.childPath(key), line: section.line, "a certificate app authenticates with certificates; \(key) is for token apps (use \(other.rawValue)_certificate)")
            } else if other == environmentSetting {
                reader.error(section.childPath(key), line: section.line, "token already serves \(other.rawValue), the app's environment; give \(key) only for the other environment")
            } else {
                let own = readToken(section.section(key), keyFileVariable: prefix + other.rawValue.uppercased() + "_KEY_FILE",
                                    environment: environment)
                if case .token(_, let keyID, _)? = own, case .token(_, keyID, _)? = credentials {
                    reader.error(section.childPath(key), line: section.line, "key \(keyID) is token's key already; give \(key) the key for \(other.rawValue), or leave \(key) out")
                }
                environmentKeys[other] = own
            }
        }
        section.rejectUnknownKeys()
        guard let name, let bundleID, let credentials else { return nil }
        return PushdConfig.App(name: name, bundleID: bundleID, environment: environmentSetting,
                               credentials: credentials, campaignRate: rate == 0 ? nil : rate, otherCertificates: otherCertificates,
                               environmentKeys: environmentKeys)
    }

    /// A `token:` block (or `<env>_token:`): team id, key id and the `.p8` key file, which
    /// `keyFileVariable` overrides.
    private static func readToken(_ token: ConfigReader.Section, keyFileVariable: String,
                                  environment: [String: String]) -> PushdConfig.Credentials? {
        let reader = token.reader
        let teamID = token.requiredString("team_id", what: "the 10-character Apple team id")
        let keyID = token.requiredString("key_id", what: "the 10-character key id of the .p8 key")
        var keyFile = token.string("key_file")
        if let override = environment[keyFileVariable], !override.isEmpty { keyFile = override }
        if keyFile == nil {
            reader.error(token.childPath("key_file"), line: token.line, "missing: path of the .p8 signing key (or \(keyFileVariable))")
        }
        for (label, value) in [("team_id", teamID), ("key_id", keyID)] {
            if let value, !isAppleID(value) {
                reader.error(token.childPath(label), line: token.line, "'\(value)' must be exactly 10 characters of A–Z and 0–9")
            }
        }
        token.rejectUnknownKeys()
        guard let teamID, let keyID, let keyFile else { return nil }
        return .token(teamID: teamID, keyID: keyID, keyFile: keyFile)
    }

    /// A `certificate:` block: PEM certificate and key, or a PKCS#12 bundle and its password.
    private static func readCertificate(_ certificate: ConfigReader.Section, passwordVariable: String,
                                        environment: [String: String]) -> PushdConfig.Credentials {
        let reader = certificate.reader
        let certificateFile = certificate.string("cert_file")
        let keyFile = certificate.string("key_file")
        let pkcs12File = certificate.string("p12_file")
        var password = certificate.string("p12_password")
        if let override = environment[passwordVariable] { password = override }
        if pkcs12File == nil && certificateFile == nil {
            reader.error(certificate.path, line: certificate.line, "missing: cert_file (PEM, with key_file) or p12_file (PKCS#12)")
        }
        if pkcs12File != nil && certificateFile != nil {
            reader.error(certificate.path, line: certificate.line, "set either cert_file or p12_file, not both")
        }
        certificate.rejectUnknownKeys()
        return .certificate(certificateFile: certificateFile, keyFile: keyFile, pkcs12File: pkcs12File, password: password)
    }

    /// Where an app's environment overrides begin: `PUSHD_APP_<NAME>_`, the name upper-cased,
    /// other characters than letters and digits as `_`.
    static func variablePrefix(_ name: String) -> String {
        "PUSHD_APP_" + String(name.uppercased().map { $0.isLetter || $0.isNumber ? $0 : "_" }) + "_"
    }

    /// Every environment override an app named `name` reads.
    static func overrideVariables(_ name: String) -> [String] {
        let prefix = variablePrefix(name)
        return ["KEY_FILE", "P12_PASSWORD"].flatMap { secret in
            [prefix + secret] + PushdConfig.Environment.allCases.map { prefix + $0.rawValue.uppercased() + "_" + secret }
        }
    }

    /// A variable both apps would read (`shop`'s `PUSHD_APP_SHOP_SANDBOX_KEY_FILE` is
    /// `shop_sandbox`'s key file too; `shop-a` and `shop_a` share all of theirs), nil when none.
    static func sharedOverride(_ name: String, _ other: String) -> String? {
        let theirs = Set(overrideVariables(other))
        return overrideVariables(name).first { theirs.contains($0) }
    }

    static func isValidAppName(_ name: String) -> Bool {
        AppName.isValid(name)
    }

    static func isValidBundleID(_ id: String) -> Bool {
        let parts = id.split(separator: ".", omittingEmptySubsequences: false)
        return parts.count >= 2 && parts.allSatisfy { part in
            !part.isEmpty && part.utf8.allSatisfy(TopicRules.isBundleIDByte)
        }
    }

    static func isAppleID(_ id: String) -> Bool {
        id.utf8.count == 10 && id.utf8.allSatisfy { ($0 >= 65 && $0 <= 90) || ($0 >= 48 && $0 <= 57) }
    }

    /// Why the transactional lane could claim more jobs than it may have in flight, or nil.
    ///
    /// A claimed batch stays in its open transaction until every job of it is answered
    /// (`JobWorker`), and each app's transactional lane has at most `apns.max_in_flight`
    /// requests unanswered (`HTTP2Dispatcher.submit` blocks while the window is full). When
    /// the workers together claim more than that, jobs wait for a slot inside open
    /// transactions: with APNs answering slowly (each slot held up to the answer deadline), a
    /// batch waits several deadlines in a row, outlives the session's
    /// idle_in_transaction_session_timeout, is aborted by the server, and every job of it,
    /// delivered or not, is claimed and sent again.
    static func claimedBeyondWindow(_ config: PushdConfig) -> String? {
        let workers = config.transactionalWorkers
        let claimed = workers * config.batchSize
        let window = config.apns.maxInFlight
        guard claimed > window else { return nil }
        let idle = QueueSession.idleInTransactionSeconds(waitingOnAnswersFor: config.apns.answerWaitSeconds)
        return "workers.transactional × workers.batch_size (\(workers) × \(config.batchSize) = \(claimed)) is above apns.max_in_flight (\(window)): "
            + "claimed jobs beyond the window wait for a free slot while their batch's transaction stays open, and with APNs answering slowly "
            + "the batch outlives idle_in_transaction_session_timeout (\(idle)s), is aborted and sent again in full; "
            + "set workers.batch_size to at most \(max(1, window / workers)) or apns.max_in_flight to at least \(claimed)"
    }

    /// `metrics.listen`: host:port or [IPv6]:port, parsed as the host overrides are
    /// (`HostPort`), the port required; port 0 asks the system for a free one (tests start
    /// the daemon so and read the port from its start line).
    static func listenAddress(_ text: String) throws(HostPort.Invalid) -> (host: String, port: UInt16) {
        let parsed = try HostPort(parsing: text, setting: "metrics.listen", rule: .listen, form: "host:port",
                                  examples: "127.0.0.1:9464, 0.0.0.0:9464 or [::1]:9464")
        return (parsed.host, UInt16(parsed.port ?? 0))
    }
}
