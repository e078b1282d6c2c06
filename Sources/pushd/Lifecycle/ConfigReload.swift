import APNs
import Posix
import Metrics

/// Which settings differ between the configuration pushd runs with and the one just read,
/// among those that take effect only after a restart: everything except an app's credential
/// files, which a reload applies (`ConfigReloader`). Setting names are the file's, with the
/// app's name in brackets (`apps[shop].bundle_id`).
enum ConfigChanges {
    static func needingRestart(running: PushdConfig, loaded: PushdConfig) -> [String] {
        var changed: [String] = []
        func compare<T: Equatable>(_ name: String, _ value: (PushdConfig) -> T) {
            if value(running) != value(loaded) { changed.append(name) }
        }
        compare("database.url") { $0.databaseURL }
        compare("database.dead_peer_s") { $0.databaseDeadPeerSeconds }
        compare("database.stall_s") { $0.databaseStallSeconds }
        compare("queue.dedupe_retention_hours") { $0.dedupeRetentionHours }
        compare("tokens.not_for_topic_limit") { $0.notForTopicLimit }
        compare("tokens.bad_device_token_limit") { $0.badDeviceTokenLimit }
        compare("metrics.listen") { $0.metricsListen }
        compare("metrics.connection_limit") { $0.metricsEndpoint.connectionLimit }
        compare("metrics.per_address_limit") { $0.metricsEndpoint.perAddressLimit }
        compare("metrics.request_timeout_s") { $0.metricsEndpoint.requestTimeoutSeconds }
        compare("metrics.answer_timeout_s") { $0.metricsEndpoint.answerTimeoutSeconds }
        compare("metrics.idle_timeout_s") { $0.metricsEndpoint.idleTimeoutSeconds }
        compare("log.level") { $0.logLevel }
        compare("log.file") { $0.logFile }
        compare("log.summary_interval_s") { $0.logSummarySeconds }
        compare("apns.host") { $0.apns.hostOverride }
        compare("apns.sandbox_host") { $0.apns.sandboxHostOverride }
        compare("apns.channel_host") { $0.apns.channelHostOverride }
        compare("apns.ca_file") { $0.apns.caFile }
        compare("apns.proxy") { $0.apns.proxy }
        compare("apns.alternate_port") { $0.apns.alternatePort }
        compare("apns.threads") { $0.apns.threads }
        compare("apns.forbidden_limit") { $0.forbiddenLimit }
        compare("apns.connections_per_app") { $0.apns.connectionsPerApp }
        compare("apns.max_connections_per_app") { $0.apns.maxConnectionsPerApp }
        compare("apns.connection_growth_judged_ms") { $0.apns.connectionGrowthJudgedOverMilliseconds }
        compare("apns.streams_per_connection") { $0.apns.streamsPerConnection }
        compare("apns.max_in_flight") { $0.apns.maxInFlight }
        compare("apns.connect_timeout_ms") { $0.apns.connectTimeoutMilliseconds }
        compare("apns.request_timeout_ms") { $0.apns.requestTimeoutMilliseconds }
        compare("apns.ping_interval_ms") { $0.apns.pingIntervalMilliseconds }
        compare("apns.ping_timeout_ms") { $0.apns.pingTimeoutMilliseconds }
        compare("apns.idle_close_s") { $0.apns.idleCloseSeconds }
        compare("apns.transactional_idle_close_s") { $0.apns.transactionalIdleCloseSeconds }
        compare("apns.provider_token_refresh_s") { $0.apns.providerTokenRefreshSeconds }
        compare("apns.provider_token_update_window_s") { $0.apns.providerTokenUpdateWindowSeconds }
        compare("retry.max_attempts") { $0.retry.maxAttempts }
        compare("retry.base_delay_ms") { $0.retry.baseDelayMilliseconds }
        compare("retry.max_delay_ms") { $0.retry.maxDelayMilliseconds }
        compare("retry.outage_limit_s") { $0.retry.outageLimitSeconds }
        compare("retry.outage_probe_ms") { $0.retry.outageProbeMilliseconds }
        compare("workers.transactional") { $0.transactionalWorkers }
        compare("workers.batch_size") { $0.batchSize }
        compare("workers.campaign") { $0.campaignWorkers }
        compare("campaigns.chunk_size") { $0.campaignChunkSize }
        compare("campaigns.lease_s") { $0.campaignLeaseSeconds }
        compare("campaigns.default_rate") { $0.defaultCampaignRate }
        compare("campaigns.niceness") { $0.campaignNiceness }
        compare("campaigns.answer_coalescing_ms") { $0.campaignAnswerCoalescingMilliseconds }
        compare("campaigns.adaptive_in_flight") { $0.campaignAdaptiveInFlight }
        compare("campaigns.read_through_one_transfer") { $0.campaignReadsThroughOneTransfer }
        compare("shutdown.drain_timeout_s") { $0.drainTimeoutSeconds }

        let runningApps = Dictionary(running.apps.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        let loadedApps = Dictionary(loaded.apps.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        for app in loaded.apps where runningApps[app.name] == nil { changed.append("apps[\(app.name)] (added)") }
        for app in running.apps where loadedApps[app.name] == nil { changed.append("apps[\(app.name)] (removed)") }
        for old in running.apps {
            guard let new = loadedApps[old.name] else { continue }
            let path = "apps[\(old.name)]"
            if old.bundleID != new.bundleID { changed.append("\(path).bundle_id") }
            if old.environment != new.environment { changed.append("\(path).environment") }
            if old.campaignRate != new.campaignRate { changed.append("\(path).campaign_rate") }
            switch (old.credentials, new.credentials) {
            case (.token(let oldTeam, let oldKey, _), .token(let newTeam, let newKey, _)):
                // The key file is reloaded; the key it must hold is fixed while running.
                if oldTeam != newTeam { changed.append("\(path).token.team_id") }
                if oldKey != newKey { changed.append("\(path).token.key_id") }
            case (.certificate, .certificate):
                changed += certificateSettings(path + ".certificate", old.credentials, new.credentials)
            case (.token, .certificate), (.certificate, .token):
                changed.append("\(path) (token or certificate)")
            }
            for environment in PushdConfig.Environment.allCases {
                let block = "\(path).\(environment.rawValue)_certificate"
                switch (old.otherCertificates[environment], new.otherCertificates[environment]) {
                case (nil, nil): break
                case (let before?, let after?): changed += certificateSettings(block, before, after)
                default: changed.append(block)
                }
                // An environment's own key, like `token`: its file is reloaded, the key fixed while running.
                let keyBlock = "\(path).\(environment.rawValue)_token"
                switch (old.environmentKeys[environment], new.environmentKeys[environment]) {
                case (nil, nil): break
                case (.token(let oldTeam, let oldKey, _)?, .token(let newTeam, let newKey, _)?):
                    if oldTeam != newTeam { changed.append("\(keyBlock).team_id") }
                    if oldKey != newKey { changed.append("\(keyBlock).key_id") }
                default: changed.append(keyBlock)
                }
            }
        }
        return changed
    }

    /// A certificate's file names and password: fixed while running. New contents at the same
    /// names are what a reload loads (`ConfigReloader`).
    private static func certificateSettings(_ block: String, _ old: PushdConfig.Credentials,
                                            _ new: PushdConfig.Credentials) -> [String] {
        guard case .certificate(let oldCertificate, let oldKey, let oldPKCS12, let oldPassword) = old,
              case .certificate(let newCertificate, let newKey, let newPKCS12, let newPassword) = new else { return [block] }
        var changed: [String] = []
        if oldCertificate != newCertificate { changed.append("\(block).cert_file") }
        if oldKey != newKey { changed.append("\(block).key_file") }
        if oldPKCS12 != newPKCS12 { changed.append("\(block).p12_file") }
        if oldPassword != newPassword { changed.append("\(block).p12_password") }
        return changed
    }
}

/// `systemctl reload pushd` (SIGHUP): reads the configuration file again with the loader and
/// the checks `run` and `check-config` use, and applies what can change while running:
///
/// - each token app's signing key (its `.p8` replaced, or `key_file` pointing elsewhere): the
///   next provider token is minted with the new key;
/// - each certificate app's certificate and key, read again under the same file names (a
///   renewal): loaded into memory by the one loader and checked (it loads, the key belongs to
///   it, it is valid now and for its environment); the app's engines then present it on new
///   connections and retire the ones opened with the old one (`HTTP2Dispatcher.replaceCertificate`).
///
/// A key or certificate that does not load or pass the checks leaves the app with what it had,
/// with one `credentials_reload_failed` error line; its connections keep presenting the old
/// certificate, which is held in memory and never read from the files again. Any other changed
/// setting is logged as needing a restart and not applied, so the process never runs half of a
/// configuration.
///
/// Thread rule: `reload` is called on the run loop's thread only; `running` is not shared.
final class ConfigReloader {
    struct Outcome: Sendable, Equatable {
        /// Apps now signing with a new key.
        var keysReloaded: [String] = []
        /// Apps (and environments) now presenting a new certificate: "shop (sandbox)".
        var certificatesReloaded: [String] = []
        /// Settings changed in the file that wait for a restart.
        var restartNeeded: [String] = []
        /// What could not be loaded, one entry per app or setting.
        var failures: [String] = []
        /// Apps whose key or certificate this reload replaced.
        var appsWithNewCredentials: Set<String> = []
        var succeeded: Bool { failures.isEmpty }
    }

    let file: String
    let environment: [String: String]
    /// What the process runs with: the start's configuration and the keys reloaded since.
    private(set) var running: PushdConfig
    private let tokens: ProviderTokenService
    /// The certificates presented now, and how to make the engines present another.
    private let certificates: AppCertificates
    private let replaceCertificate: (String, PushdConfig.Environment, ClientIdentity) -> Void
    private let logger: Logger
    private let metrics: PushdMetrics

    init(file: String, environment: [String: String], running: PushdConfig, tokens: ProviderTokenService,
         certificates: AppCertificates, replaceCertificate: @escaping (String, PushdConfig.Environment, ClientIdentity) -> Void,
         logger: Logger, metrics: PushdMetrics) {
        self.file = file
        self.environment = environment
        self.running = running
        self.tokens = tokens
        self.certificates = certificates
        self.replaceCertificate = replaceCertificate
        self.logger = logger
        self.metrics = metrics
        // The start loaded everything (`run` refuses otherwise), as Prometheus counts its own start.
        metrics.configLastReloadSuccessful.set(1)
        metrics.configLastReloadSuccessTimestamp.set(Timestamp().timeIntervalSince1970)
        _ = metrics.configReload(result: "success")
        _ = metrics.configReload(result: "failure")
    }

    @discardableResult
    func reload() -> Outcome {
        var outcome = Outcome()
        var check = ConfigCheck(file: file, environment: environment, checkDatabase: false)
        check.checkMetricsListen = false
        check.run()
        let loaded: PushdConfig
        do {
            loaded = try ConfigLoader.load(file: file, environment: environment).0
        } catch {
            let problems = check.findings.filter { $0.severity == .error }.map(\.description)
            let why = problems.isEmpty ? "\(error)" : problems.joined(separator: "; ")
            logger.error("configuration reload failed, nothing changed (pushd keeps running with what it had): \(file): \(why)",
                         ("event", "config_reload_failed"), ("file", .string(file)))
            outcome.failures.append(file)
            record(outcome)
            return outcome
        }

        // Findings by app: the check names apps by their place in the file just read.
        var appErrors = [String: [ConfigCheck.Finding]]()
        for finding in check.findings where finding.severity != .ok {
            if let index = Self.appIndex(finding.setting), index < loaded.apps.count, finding.severity == .error {
                appErrors[loaded.apps[index].name, default: []].append(finding)
            } else if finding.severity == .error {
                logger.error("configuration reload: \(finding.setting): \(finding.message)",
                             ("event", "config_reload_failed"), ("setting", .string(finding.setting)))
                outcome.failures.append(finding.setting)
            } else {
                logger.warning("configuration: \(finding.setting): \(finding.message)",
                               ("event", "config_warning"), ("setting", .string(finding.setting)))
            }
        }

        outcome.restartNeeded = ConfigChanges.needingRestart(running: running, loaded: loaded)
        for setting in outcome.restartNeeded {
            logger.warning("configuration reload: \(setting) changed; it takes effect only after a restart (systemctl restart pushd), "
                           + "until then pushd keeps the value it started with",
                           ("event", "config_needs_restart"), ("setting", .string(setting)))
        }

        for (index, app) in running.apps.enumerated() {
            guard let new = loaded.apps.first(where: { $0.name == app.name }) else { continue }
            let errors = appErrors[app.name] ?? []
            switch (app.credentials, new.credentials) {
            case (.token, .token):
                // The findings of `<env>_token` blocks are their keys', the rest `token`'s.
                let environmentBlocks = PushdConfig.Environment.allCases.map { ".\($0.rawValue)_token." }
                if reloadKey(app.name, from: app.credentials, to: new.credentials,
                             errors: errors.filter { finding in !environmentBlocks.contains { finding.setting.contains(text: $0) } },
                             outcome: &outcome) {
                    running.apps[index].credentials = new.credentials
                }
                for environment in PushdConfig.Environment.allCases {
                    guard let before = app.environmentKeys[environment], let after = new.environmentKeys[environment] else { continue }
                    let block = ".\(environment.rawValue)_token."
                    if reloadKey(app.name, from: before, to: after, errors: errors.filter { $0.setting.contains(text: block) },
                                 outcome: &outcome) {
                        running.apps[index].environmentKeys[environment] = after
                    }
                }
            case (.certificate, .certificate):
                for environment in PushdConfig.Environment.allCases {
                    reloadCertificate(app, from: new, environment: environment, errors: errors, outcome: &outcome)
                }
            default:
                continue
            }
        }

        record(outcome)
        var parts: [String] = []
        parts.append(outcome.keysReloaded.isEmpty ? "no signing key changed"
                     : "signing keys reloaded for apps \(outcome.keysReloaded.joined(separator: ", "))")
        if !outcome.certificatesReloaded.isEmpty {
            parts.append("certificates reloaded for apps \(outcome.certificatesReloaded.joined(separator: ", "))")
        }
        if !outcome.restartNeeded.isEmpty { parts.append("needs a restart: \(outcome.restartNeeded.joined(separator: ", "))") }
        if !outcome.failures.isEmpty { parts.append("not loaded, kept as before: \(outcome.failures.joined(separator: ", "))") }
        logger.info("configuration reloaded from \(file): \(parts.joined(separator: "; "))",
                    ("event", "config_reloaded"), ("result", .string(outcome.succeeded ? "success" : "failure")),
                    ("keys_reloaded", .string(outcome.keysReloaded.joined(separator: ","))),
                    ("certificates_reloaded", .string(outcome.certificatesReloaded.joined(separator: ","))),
                    ("needs_restart", .string(outcome.restartNeeded.joined(separator: ","))))
        return outcome
    }

    /// Loads the certificate `new` names for `environment` and, when it differs from the one
    /// `app` presents there now and passes the checks, makes the engines present it. Nothing
    /// when the app has no certificate there, or when its file names changed (that waits for a
    /// restart, named by `ConfigChanges`).
    private func reloadCertificate(_ app: PushdConfig.App, from new: PushdConfig.App, environment: PushdConfig.Environment,
                                   errors: [ConfigCheck.Finding], outcome: inout Outcome) {
        guard let before = app.credentials(for: environment), let after = new.credentials(for: environment), before == after,
              let current = certificates.identity(app: app.name, environment: environment) else { return }
        let name = "\(app.name) (\(environment.rawValue))"
        // The check's findings for this certificate's block: `apps[0].certificate.cert_file`
        // for the app's own environment, `apps[0].sandbox_certificate.key_file` for the other.
        let block = environment == app.environment ? ".certificate" : ".\(environment.rawValue)_certificate"
        let blockErrors = errors.filter { $0.setting.contains(text: block + ".") || $0.setting.hasSuffix(block) }
        let identity: ClientIdentity
        do {
            guard blockErrors.isEmpty else { throw AppCertificates.Unusable(description: blockErrors.map(\.description).joined(separator: "; ")) }
            guard let made = try AppCertificates.load(after, environment: environment) else { return }
            // A certificate of another app copied in by mistake would have APNs refuse every
            // notification of this one (TopicDisallowed): the one presented now is kept. At
            // the start the same finding is only a warning of check-config's.
            if let issuedFor = Self.otherBundle(made.info, bundleID: app.bundleID), Self.otherBundle(current.info, bundleID: app.bundleID) == nil {
                throw AppCertificates.Unusable(description: "the new certificate is for \(issuedFor), not for the app's bundle_id \(app.bundleID); APNs would refuse its notifications (TopicDisallowed)")
            }
            identity = made
        } catch {
            logger.error("configuration reload: app \(app.name) keeps presenting the \(current) in \(environment.rawValue), held in "
                         + "memory (its files are not read again until the next reload): the certificate files do not load or "
                         + "cannot be used: \(error); put a working certificate in place and reload again",
                         ("event", "credentials_reload_failed"), ("app", .string(app.name)),
                         ("environment", .string(environment.rawValue)), ("fingerprint", .string(current.fingerprint)))
            outcome.failures.append("app \(name)")
            return
        }
        guard identity != current else { return }
        replaceCertificate(app.name, environment, identity)
        outcome.certificatesReloaded.append(name)
        outcome.appsWithNewCredentials.insert(app.name)
        logger.notice("app \(app.name) presents the \(identity) in \(environment.rawValue) from now on, instead of the \(current); "
                      + "the connections opened with the old one take no new stream and close once their streams are answered",
                      ("event", "certificate_reloaded"), ("app", .string(app.name)), ("environment", .string(environment.rawValue)),
                      ("fingerprint", .string(identity.fingerprint)), ("previous_fingerprint", .string(current.fingerprint)),
                      ("not_after", .string("\(identity.info.notAfter)")))
    }

    /// The bundle id a certificate was issued for (its subject's UID) when it is not
    /// `bundleID` and its topics do not cover `bundleID`; nil for a certificate naming none.
    static func otherBundle(_ info: ClientCertificateInfo, bundleID: String) -> String? {
        guard let issuedFor = info.userID, issuedFor != bundleID, !info.topics.contains(bundleID) else { return nil }
        return issuedFor
    }

    /// Loads the signing key `new` names and, when it is another key file of the same key id
    /// and team than `old`'s, signs with it from now on. Returns whether it did.
    private func reloadKey(_ app: String, from old: PushdConfig.Credentials, to new: PushdConfig.Credentials,
                           errors: [ConfigCheck.Finding], outcome: inout Outcome) -> Bool {
        guard case .token(let teamID, let keyID, let oldFile) = old, case .token(let newTeamID, let newKeyID, let newFile) = new,
              teamID == newTeamID, keyID == newKeyID else { return false }
        let key = ProviderTokenService.Key(keyID: keyID, teamID: teamID)
        let current = tokens.keyFile(key) ?? oldFile
        if !errors.isEmpty {
            keyFailed(app, file: newFile, current: current, why: errors.map(\.description).joined(separator: "; "), outcome: &outcome)
            return false
        }
        let signer: ProviderTokenSigner
        do {
            signer = ProviderTokenSigner(key: try SigningKey(contentsOfFile: newFile, keyID: keyID, teamID: teamID))
        } catch {
            keyFailed(app, file: newFile, current: current, why: "\(error)", outcome: &outcome)
            return false
        }
        guard newFile != current || !tokens.signsWith(key, sameAs: signer) else { return false }
        do {
            try tokens.replaceKey(key, signer: signer, file: newFile)
        } catch {
            keyFailed(app, file: newFile, current: current, why: "\(error)", outcome: &outcome)
            return false
        }
        if !outcome.keysReloaded.contains(app) { outcome.keysReloaded.append(app) }
        outcome.appsWithNewCredentials.insert(app)
        logger.notice("app \(app) signs its provider tokens with the key in \(newFile) from now on; "
                      + "the next token is minted with it",
                      ("event", "signing_key_reloaded"), ("app", .string(app)), ("key_file", .string(newFile)),
                      ("key_id", .string(keyID)))
        return true
    }

    private func keyFailed(_ app: String, file: String, current: String, why: String, outcome: inout Outcome) {
        logger.error("configuration reload: app \(app) keeps the signing key it had (from \(current)): the key file \(file) "
                     + "does not load: \(why)",
                     ("event", "credentials_reload_failed"), ("app", .string(app)), ("key_file", .string(file)))
        outcome.failures.append("app \(app)")
    }

    private func record(_ outcome: Outcome) {
        metrics.configReload(result: outcome.succeeded ? "success" : "failure").increment()
        metrics.configLastReloadSuccessful.set(outcome.succeeded ? 1 : 0)
        if outcome.succeeded { metrics.configLastReloadSuccessTimestamp.set(Timestamp().timeIntervalSince1970) }
    }

    /// 3 for `apps[3].token.key_file`.
    static func appIndex(_ setting: String) -> Int? {
        guard setting.hasPrefix("apps["), let close = setting.firstIndex(of: "]") else { return nil }
        return Int(setting[setting.index(setting.startIndex, offsetBy: 5)..<close])
    }
}
