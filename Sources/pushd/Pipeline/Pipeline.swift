import APNs
import Dispatcher
import Posix
import Metrics
import QueueStore
import Locking
import Synchronization

/// The daemon's moving parts, built from the configuration: one HTTP/2 dispatcher per
/// app, the provider-token service, the transactional and campaign workers, and the
/// scrape-time gauges read from the database.
final class Pipeline: @unchecked Sendable {
    // Immutable after init; the stats connection is used only under its mutex.
    let context: PipelineContext
    private let jobWorkers: [JobWorker]
    private let campaignWorkers: [CampaignWorker]
    private let leaseKeeper: LeaseKeeper
    private let broadcastWorker: BroadcastWorker
    /// The signing keys and their shared provider tokens; a reload replaces keys in it.
    let tokens: ProviderTokenService
    /// The certificate apps' client certificates, in memory; a reload replaces them.
    let certificates: AppCertificates
    private var unknownApps: UnknownAppWatch!
    private let statsConnection = Lock<PGConnection?>(nil)
    /// The last statistics read and when: the four queue gauges of one scrape share one read,
    /// which scans `pushd.jobs` (about 110 ms per million queued jobs).
    private let statsCache = Lock<(stats: QueueStats, at: ContinuousClock.Instant)?>(nil)
    /// The last failed read and when, so that the gauges of one scrape do not each try again.
    private let statsFailure = Lock<(error: any Error, at: ContinuousClock.Instant)?>(nil)
    /// When the `queue_stats_stale` line was last written (monotonic seconds).
    private let statsFailureLogged = Lock<Double>(-.infinity)
    /// How long the statistics read may wait for a lock (another session's `LOCK TABLE`, a
    /// migration) and run: a scrape answers well within Prometheus' scrape_timeout (10 s by
    /// default) and shows the last statistics read instead (`pushd_queue_stats_age_seconds`).
    static let statsLockTimeout = "1s"
    static let statsStatementTimeout = "4s"

    struct SetupError: Error, CustomStringConvertible {
        var description: String
    }

    /// Whether the database watchdog sees a stall now: the scrape-time gauges then have no
    /// sample rather than a scrape that waits on the database.
    private let databaseStalled: @Sendable () -> Bool

    init(config: PushdConfig, metrics: PushdMetrics, logger: Logger, instance: String,
         databaseStalled: @escaping @Sendable () -> Bool = { false }) throws {
        self.databaseStalled = databaseStalled
        var signers = [ProviderTokenService.Key: ProviderTokenSigner]()
        var keyFiles = [ProviderTokenService.Key: String]()
        for app in config.apps {
            for (teamID, keyID, keyFile) in app.signingKeys {
                do {
                    let key = try SigningKey(contentsOfFile: keyFile, keyID: keyID, teamID: teamID)
                    signers[ProviderTokenService.Key(keyID: keyID, teamID: teamID)] = ProviderTokenSigner(key: key)
                    keyFiles[ProviderTokenService.Key(keyID: keyID, teamID: teamID)] = keyFile
                } catch {
                    throw SetupError(description: "app \(app.name): cannot load the signing key \(keyFile): \(error)")
                }
            }
        }
        let appByKey = Dictionary(config.apps.flatMap { app in
            app.signingKeys.map { (ProviderTokenService.Key(keyID: $0.keyID, teamID: $0.teamID), app.name) }
        }, uniquingKeysWith: { first, _ in first })
        let policy: ProviderTokenPolicy
        do {
            policy = try ProviderTokenPolicy(refreshSeconds: Int64(config.apns.providerTokenRefreshSeconds),
                                             updateWindowSeconds: Int64(config.apns.providerTokenUpdateWindowSeconds))
        } catch {
            throw SetupError(description: "apns.provider_token_refresh_s: \(error)")
        }
        let tokens = try ProviderTokenService(
            databaseURL: config.databaseURL, instance: instance, signers: signers, keyFiles: keyFiles, policy: policy, logger: logger,
            onRefresh: { key in metrics.jwtRefresh(app: appByKey[key] ?? key.keyID).increment() },
            onForeign: { key in metrics.providerTokenForeign(app: appByKey[key] ?? key.keyID).increment() },
            onDatabaseError: { error in metrics.databaseError(reason: (error as? PGError)?.code.isConnectionLoss == true ? "connection" : "other").increment() })

        let certificates: AppCertificates
        do {
            certificates = try AppCertificates(config: config)
        } catch {
            throw SetupError(description: "\(error)")
        }
        self.certificates = certificates
        let queues = (0..<(config.transactionalWorkers + config.campaignWorkers)).map { _ in CompletionQueue() }
        let router = ResultRouter(queues: queues)
        var senders = [String: AppSender]()
        for app in config.apps {
            // Each (environment, lane) gets its own connections when first used: a transactional
            // push never waits behind the streams and the window a campaign keeps full, and an
            // app serving one environment opens no connection to the other's host.
            senders[app.name] = try AppSender(app: app, tokens: tokens, metrics: metrics, notForTopicLimit: config.notForTopicLimit,
                                              badDeviceTokenLimit: config.badDeviceTokenLimit, forbiddenLimit: config.forbiddenLimit) { environment, lane in
                // The certificate held now: one a reload replaced, for a client made after it.
                guard var configuration = try Self.dispatcherConfiguration(
                    for: app, environment: environment, config: config,
                    certificate: certificates.identity(app: app.name, environment: environment), checkingCAFile: true) else { return nil }
                if lane == .campaign {
                    configuration.threadNiceness = Int32(config.campaignNiceness)
                    // Bulk only: a transactional push reads its answer the moment it arrives.
                    configuration.answerCoalescingMilliseconds = config.campaignAnswerCoalescingMilliseconds
                    // Bulk only: hundreds of streams wait on each connection, and libcurl would
                    // run them all for every read of it (docs/dispatcher.md).
                    configuration.readsSocketsThroughOneTransfer = config.campaignReadsThroughOneTransfer
                    // Bulk only: memory and CPU follow the transfers inside libcurl, and a
                    // transactional push never waits for a window that is still finding its size.
                    configuration.adaptiveInFlight = config.campaignAdaptiveInFlight
                } else if lane == .transactional {
                    // Few requests, each traced at debug level stage by stage (docs/queue.md).
                    configuration.recordsTransferTimings = true
                    // Kept open while idle by default: the first push after a quiet spell would
                    // otherwise pay a TCP and TLS handshake (docs/dispatcher.md, Keep-alive).
                    configuration.idleCloseSeconds = config.apns.transactionalIdleCloseSeconds
                }
                let retirements = ConnectionRetirementReporter(app: app.name, environment: environment.rawValue,
                                                               metrics: metrics, logger: logger)
                let engineMetrics = AppDispatcherMetrics(app: app.name, environment: environment.rawValue, lane: lane.rawValue,
                                                         metrics: metrics, retirements: retirements, logger: logger,
                                                         authenticatedByCertificate: Self.authenticatesByCertificate(app))
                do {
                    return try APNsClient(configuration: configuration, environment: environment.apns,
                                          authentication: Self.authentication(for: app, environment: environment,
                                                                              configuration: configuration, tokens: tokens),
                                          metrics: engineMetrics, onResult: { retirements.observe($0.dispatch); router.deliver($0.dispatch) })
                } catch {
                    throw SetupError(description: "app \(app.name), \(environment.rawValue): \(error)")
                }
            }
        }
        self.tokens = tokens
        let context = PipelineContext(config: config, instance: instance, senders: senders, certificates: certificates,
                                      metrics: metrics, logger: logger)
        self.context = context
        jobWorkers = (0..<config.transactionalWorkers).map {
            JobWorker(context: context, index: $0, completions: queues[$0], batchSize: config.batchSize)
        }
        let limiter = RateLimiter()
        let leaseSeconds = Double(config.campaignLeaseSeconds)
        let leaseKeeper = LeaseKeeper(context: context, leaseSeconds: leaseSeconds, interval: CampaignWorker.checkpointInterval(leaseSeconds: leaseSeconds))
        self.leaseKeeper = leaseKeeper
        campaignWorkers = (0..<config.campaignWorkers).map {
            CampaignWorker(context: context, index: config.transactionalWorkers + $0,
                           completions: queues[config.transactionalWorkers + $0], limiter: limiter, keeper: leaseKeeper)
        }
        broadcastWorker = BroadcastWorker(context: context)
        registerGauges(appByKey: appByKey)
        context.laneHealth.describeLockHolders { [weak self] in
            try? self?.withStatsConnection { TableLocks.holders($0) }
        }
        unknownApps = UnknownAppWatch(configured: Set(config.apps.map(\.name)), logger: logger,
                                      readStats: { [weak self] in
                                          guard let self else { throw SetupError(description: "the pipeline is gone") }
                                          return try self.recentStats()
                                      })
    }

    /// How to reach `environment`'s host with the app's credentials for it; nil when the app
    /// has none there (a certificate app with no certificate for that environment).
    /// Token apps sign with the provider token the whole fleet shares, of the key for the
    /// environment (`<env>_token`, else `token`); certificate apps present the certificate the
    /// configuration names for the environment.
    static func authentication(for app: PushdConfig.App, environment: PushdConfig.Environment, configuration: DispatcherConfiguration,
                               tokens: ProviderTokenService) -> APNsAuthentication {
        guard case .token(let teamID, let keyID, _) = app.credentials(for: environment) else { return .certificate(configuration.credential) }
        let key = ProviderTokenService.Key(keyID: keyID, teamID: teamID)
        return .tokenSource { try tokens.authorization(key) }
    }

    /// Whether the app authenticates by client certificate rather than a signing key.
    static func authenticatesByCertificate(_ app: PushdConfig.App) -> Bool {
        if case .token = app.credentials { return false }
        return true
    }

    /// `certificate` is the one a certificate app presents there; nil loads it from the files
    /// the configuration names (`AppCertificates.load`, for `send`), which throws when it
    /// cannot be used.
    /// `checkingCAFile`: a lane about to set up its connections reads `apns.ca_file` first.
    static func dispatcherConfiguration(for app: PushdConfig.App, environment: PushdConfig.Environment,
                                        config: PushdConfig, certificate: ClientIdentity? = nil,
                                        checkingCAFile: Bool = false) throws -> DispatcherConfiguration? {
        guard let credentials = app.credentials(for: environment) else { return nil }
        if checkingCAFile, let caFile = config.apns.caFile {
            // libcurl reads the file when it opens a connection, after this setup: a file that
            // went bad since `run` checked it (emptied, half written, a directory) failed that
            // connection as a TLS error and paused every lane of the app. Read now, it is a
            // setup failure the lane retries in 10 s, naming the file.
            do {
                _ = try ClientCertificate.loadAuthorities(path: caFile)
            } catch {
                throw SetupError(description: "apns.ca_file: \(error.description)")
            }
        }
        let port = config.apns.alternatePort ? APNsEnvironment.alternativePort : APNsEnvironment.defaultPort
        let credential: ClientCredential
        if let identity = try certificate ?? AppCertificates.load(credentials, environment: environment) {
            credential = .certificate(identity)
        } else {
            credential = .token
        }
        var configuration = DispatcherConfiguration(
            host: environment.apns.host, port: port, credential: credential, trustedCAFile: config.apns.caFile, proxy: config.apns.proxy,
            threads: config.apns.threads, connectionsPerThread: config.apns.connectionsPerApp,
            streamsPerConnection: config.apns.streamsPerConnection, maxOutstanding: config.apns.maxInFlight,
            connectTimeoutMilliseconds: config.apns.connectTimeoutMilliseconds,
            requestTimeoutMilliseconds: config.apns.requestTimeoutMilliseconds,
            keepAliveIntervalMilliseconds: config.apns.pingIntervalMilliseconds,
            keepAliveTimeoutMilliseconds: config.apns.pingTimeoutMilliseconds)
        configuration.maxConnections = config.apns.maxConnectionsPerApp
        configuration.connectionGrowthJudgedOverMilliseconds = config.apns.connectionGrowthJudgedOverMilliseconds
        configuration.answerDeadlineMilliseconds = config.apns.answerDeadlineMilliseconds
        configuration.idleCloseSeconds = config.apns.idleCloseSeconds
        if environment == .sandbox, let override = config.apns.sandboxHostOverride {
            try configuration.applyHostOverride(override, setting: "apns.sandbox_host")
        } else if let override = config.apns.hostOverride {
            try configuration.applyHostOverride(override, setting: "apns.host")
        }
        return configuration
    }

    /// How long workers still waiting for answers at the drain deadline get to record their
    /// batches once the engines stopped: one transaction each, with every answer in hand.
    static let settleAfterStopSeconds = 10.0

    func start() {
        // An instance starts with no hold: work another run of it put back until a hold's end
        // (a restart after a configuration fix) is due now, as after a SIGHUP.
        for app in context.config.apps.map(\.name) {
            do {
                _ = try onStatsConnection(.releaseHeld(app: app))
            } catch {
                context.logger.warning("could not make the held work of app \(app) due at start (it is due when its hold would have ended, within 5 minutes): \(error)",
                                       ("app", .string(app)))
            }
        }
        for app in context.config.apps.map(\.name) { releasePaused(app, when: "at start") }
        for worker in jobWorkers { worker.start() }
        if !campaignWorkers.isEmpty { leaseKeeper.start() }
        for worker in campaignWorkers { worker.start() }
        broadcastWorker.start()
        unknownApps.start()
    }

    /// Tells the workers to stop claiming, waits up to `deadline` for them to settle what
    /// they hold, then stops the dispatchers, and gives the workers still waiting for answers
    /// `settleAfterStopSeconds` to record what was answered. Work not settled by then stays in
    /// the queue (an open transaction aborts; a chunk's lease expires) and is sent again later.
    func stop(deadline: Timestamp) {
        context.stopping.store(true, ordering: .relaxed)
        context.doorbell.ring()
        unknownApps.stop()
        var unsettled: [Semaphore] = []
        for worker in jobWorkers where !worker.finished.wait(timeout: deadline.timeIntervalSinceNow) { unsettled.append(worker.finished) }
        for worker in campaignWorkers where !worker.finished.wait(timeout: deadline.timeIntervalSinceNow) { unsettled.append(worker.finished) }
        if broadcastWorker.finished.wait(timeout: deadline.timeIntervalSinceNow) { broadcastWorker.shutdown() }
        for sender in context.senders.values { sender.shutdown(drainTimeoutMilliseconds: 1000) }
        // The stopped engines answered what they still held as not sent: a worker that was
        // waiting for answers records its batch now (what APNs accepted as delivered, the rest
        // due again). Leaving before that aborts the batch's transaction, and every job of it,
        // the accepted ones too, is sent again by the next instance.
        let settleBy = Timestamp().addingTimeInterval(Self.settleAfterStopSeconds)
        let late = unsettled.filter { !$0.wait(timeout: settleBy.timeIntervalSinceNow) }.count
        if !unsettled.isEmpty {
            let settled = unsettled.count - late
            if late == 0 {
                context.logger.notice("\(settled) worker(s) still waiting for APNs at the drain deadline recorded their batches after the engines stopped; what was not answered is due again",
                                      ("event", "drain_deadline_settled"), ("workers", .int(Int64(settled))))
            } else {
                context.logger.warning("\(late) worker(s) had not recorded their batches \(Int(Self.settleAfterStopSeconds)) s after the engines stopped: those batches go back to the queue and are sent again, those APNs accepted too",
                                       ("event", "drain_deadline_unsettled"), ("workers", .int(Int64(late))))
            }
        }
        if !campaignWorkers.isEmpty { leaseKeeper.stop() }
        tokens.close()
        statsConnection.withLock { connection in
            connection?.close()
            connection = nil
        }
    }

    /// Makes `identity` the certificate `app` presents in `environment`: clients made from now
    /// on start with it, and the running ones take it on new connections and retire the ones
    /// opened with the old one (`HTTP2Dispatcher.replaceCertificate`).
    func replaceCertificate(app: String, environment: PushdConfig.Environment, with identity: ClientIdentity) {
        // Stored first: a client being made now either is made with the new one or is
        // registered before the sender walks its clients (`AppSender.replaceCertificate`).
        certificates.replace(app: app, environment: environment, with: identity)
        context.senders[app]?.replaceCertificate(identity, environment: environment)
    }

    /// Resumes every paused app and every held scope (after the operator fixed the
    /// configuration and sent SIGHUP); campaigns left unleased for a held topic may be leased
    /// at once, and runs of Forbidden answers of the apps in `newCredentials` (whose key or
    /// certificate the reload replaced) are counted from zero.
    func resumePausedApps(newCredentials: Set<String> = []) {
        var appsResumed: [String] = []
        for sender in context.senders.values where sender.pausedReason != nil {
            sender.resumeSending()
            appsResumed.append(sender.app.name)
            context.logger.notice("resumed sending for app \(sender.app.name)", ("app", .string(sender.app.name)))
        }
        // What was put back for the pause (30 s at a time) is due now, not after the rest of its wait.
        for app in appsResumed.sorted() { releasePaused(app, when: "at once") }
        var appsReleased: [String] = []
        for sender in context.senders.values {
            // With other credentials, runs of Forbidden answers are counted afresh: a run
            // tripped before would hold its environment again on the first answer after it.
            // With the same ones (a SIGHUP for the log file, a fix in the developer account) a
            // tripped run stays so: the first Forbidden holds again, where a new run failed
            // `apns.forbidden_limit` - 1 of the kept notifications at every SIGHUP.
            if newCredentials.contains(sender.app.name) { sender.resetForbiddenRuns() }
            let released = sender.releaseHolds()
            if !released.isEmpty { appsReleased.append(sender.app.name) }
            for key in released {
                context.logger.notice("resumed sending of \(key.scope.describe(topic: key.topic)) for app \(sender.app.name) in \(key.environment.rawValue)",
                                      ("event", "sending_resumed"), ("app", .string(sender.app.name)),
                                      ("environment", .string(key.environment.rawValue)), ("topic", .string(key.topic)),
                                      ("scope", .string(key.scope.rawValue)))
            }
        }
        let deferred = context.deferredCampaigns.withLock { set -> [Int64] in
            defer { set.removeAll() }
            return set.sorted()
        }
        // What waited for the holds is due now, not after the rest of its wait.
        releaseWaiting(apps: appsReleased.sorted(), campaigns: deferred, otherwise: "it goes out when its hold would have ended, within 5 minutes")
    }

    /// Makes the work of `apps` put back for a hold due now, and `campaigns` left unleased for
    /// one leasable, then rings the doorbell. A failure is logged, saying when the work goes out
    /// `otherwise`.
    private func releaseWaiting(apps: [String], campaigns: [Int64], otherwise: String) {
        for app in apps {
            do {
                _ = try onStatsConnection(.releaseHeld(app: app))
            } catch {
                context.logger.warning("could not make the held work of app \(app) due at once (\(otherwise)): \(error)",
                                       ("app", .string(app)))
            }
        }
        if !campaigns.isEmpty {
            do {
                _ = try onStatsConnection(.undefer(campaigns))
            } catch {
                // They become leasable within `CampaignWorker.heldLeaseDeferral` anyway.
                context.logger.warning("could not make campaigns \(campaigns.map(String.init).joined(separator: ", ")) leasable at once: \(error)")
            }
        }
        context.doorbell.ring()
    }

    /// Holds, for every app in `apps` (live instances disagree on its configured environment,
    /// `FleetSummary.environmentDisagreements`), the notifications that only that setting
    /// routes: sent now, each would reach the host of whichever instance claimed it, and the
    /// other host's BadDeviceToken would fail it and prune its token. The other apps' holds of
    /// this kind end. Called by the heartbeat after each fleet read; one warning line per app
    /// when its hold begins, one notice when it ends, and then what waited is due at once.
    func holdEnvironmentDisagreements(_ apps: [String]) {
        var ended = [String]()
        for sender in context.senders.values.sorted(by: { $0.app.name < $1.app.name }) {
            let app = sender.app
            let environment = app.environment.rawValue
            if apps.contains(app.name) {
                let why = "live instances disagree on the configured environment (apps[].environment) of app \(app.name), "
                    + "this one has \(environment): a notification that names no environment, to a token registered without one "
                    + "(or a broadcast or channel request that names none, to a channel pushd has no environment of), "
                    + "would go to the host of whichever instance claimed it; it is kept, unsent and with no attempt spent, "
                    + "until every live instance has the same environment for the app (pushd status shows which instance has which)"
                guard sender.holdForEnvironmentDisagreement(why) else { continue }
                context.logger.warning("sending of app \(app.name)'s notifications that name no environment, to tokens registered without one, and its broadcasts and channel requests that name none, is held: \(why); those naming an environment, or to a token registered with one, are sent",
                                       ("event", "sending_held"), ("app", .string(app.name)), ("environment", .string(environment)),
                                       ("reason", .string(AppSender.environmentDisagreementReason)))
            } else if sender.holdForEnvironmentDisagreement(nil) {
                ended.append(app.name)
                context.logger.notice("live instances agree again on the configured environment of app \(app.name): its notifications that name no environment are sent again, to \(environment)",
                                      ("event", "sending_resumed"), ("app", .string(app.name)), ("environment", .string(environment)),
                                      ("reason", .string(AppSender.environmentDisagreementReason)))
            }
        }
        guard !ended.isEmpty else { return }
        let deferred = context.deferredCampaigns.withLock { set -> [Int64] in
            defer { set.removeAll() }
            return set.sorted()
        }
        // What waited for the agreement is due now, not after the rest of its wait.
        releaseWaiting(apps: ended, campaigns: deferred, otherwise: "it goes out when its wait ends, within 30 s")
    }

    /// Makes the work `app` put back for a pause due now (`HeldWork.releasePaused`), with one
    /// notice line when there was any. A failure is logged: the work then goes out when its
    /// wait ends, within 30 s.
    private func releasePaused(_ app: String, when: String) {
        do {
            let due = try withStatsConnection { try HeldWork().releasePaused($0, app: app, onRefused: context.reportRefusedRewrites(madeDue:)) }
            guard due > 0 else { return }
            context.logger.notice("\(due) jobs, broadcasts, channel requests and campaign targets of app \(app) put back while it was paused are due \(when)",
                                  ("event", "paused_work_due"), ("app", .string(app)), ("count", .int(Int64(due))))
        } catch {
            context.logger.warning("could not make the work app \(app) put back while it was paused due \(when) (it goes out when its wait ends, within 30 s): \(error)",
                                   ("app", .string(app)))
        }
    }

    /// Reads queue statistics on the pipeline's own stats connection.
    func readStats() throws -> QueueStats {
        statsReads.add(1, ordering: .relaxed)
        return try onStatsConnection(.stats)!
    }

    /// The `application_name` of the statistics session.
    static let statsSession = "pushd-stats"

    /// Reads of the queue statistics so far (each one scans `pushd.jobs`).
    let statsReads = Atomic<Int>(0)

    /// Statistics no older than `maxAge`, read again only when the last read is older. When
    /// the database answers but the read waited out its lock or statement time-out (a lock on
    /// a queue table), the last ones read, however old (`pushd_queue_stats_age_seconds` says
    /// how old). Otherwise a failed read is an error: the gauges have no sample, which is what
    /// PushdNotReadyDatabase sees of a database that is down.
    func recentStats(maxAge: Duration = .seconds(2)) throws -> QueueStats {
        let now = ContinuousClock.now
        let cached = statsCache.withLock({ $0 })
        if let cached, now - cached.at < maxAge { return cached.stats }
        func lastOr(_ error: any Error) throws -> QueueStats {
            if let cached, Self.showsLastStats(after: error) { return cached.stats }
            throw error
        }
        // A scrape must not queue behind a call the database does not answer: Prometheus would
        // time out and see no pushd_database_stalled either. No sample instead; nor after the
        // stop, which closed the statistics session.
        if databaseStalled() { throw SetupError(description: "the database is not answering") }
        if context.stopping.load(ordering: .relaxed) { throw SetupError(description: "pushd is stopping") }
        if let waiting = PGCallWatch.inFlight(now: now).first(where: { $0.purpose == Self.statsSession }) {
            // Nor behind another call of the statistics session: a read is over within its
            // statement_timeout, the last statistics meanwhile; a call waiting longer is not
            // answered.
            if let cached, waiting.waited < .seconds(5) { return cached.stats }
            if waiting.waited > .seconds(1) { throw SetupError(description: "the statistics session has waited \(waiting.waited) on the database") }
        }
        // Nor try again for each of the gauges of one scrape after a failure: each try may wait
        // out a connect time-out.
        if let failed = statsFailure.withLock({ $0 }), now - failed.at < maxAge { return try lastOr(failed.error) }
        do {
            let stats = try readStats()
            statsCache.withLock { $0 = (stats, now) }
            statsFailure.withLock { $0 = nil }
            return stats
        } catch {
            statsFailure.withLock { $0 = (error, now) }
            if Self.showsLastStats(after: error) { reportStaleStats(error, shown: cached?.at, now: now) }
            return try lastOr(error)
        }
    }

    /// Whether a failed read of the statistics leaves the last ones shown: it waited out its
    /// `lock_timeout` or `statement_timeout`, so the database answers but a queue table is
    /// locked (or the scan is slow).
    static func showsLastStats(after error: any Error) -> Bool {
        guard let error = error as? PGError else { return false }
        return error.code == .lockNotAvailable || error.code == .queryCanceled
    }

    /// One warning line a minute at most while the statistics cannot be read: scrapes show the
    /// last ones read, and the queue gauges stand still.
    private func reportStaleStats(_ error: any Error, shown: ContinuousClock.Instant?, now: ContinuousClock.Instant) {
        let seconds = RateLimiter.monotonicSeconds()
        guard statsFailureLogged.withLock({ logged in
            guard seconds - logged >= 60 else { return false }
            logged = seconds
            return true
        }) else { return }
        let age = shown.map { "the last ones, read \(DatabaseWatchdog.seconds(now - $0).fixed(1)) s ago (pushd_queue_stats_age_seconds)" } ?? "no queue gauges"
        let code = (error as? PGError).map { " (SQLSTATE \($0.code.raw)\($0.code == .lockNotAvailable ? ", a lock another session holds on a queue table" : ""))" } ?? ""
        context.logger.warning("queue statistics could not be read within lock_timeout \(Self.statsLockTimeout) and statement_timeout \(Self.statsStatementTimeout)\(code): scrapes show \(age) until a read succeeds: \(error)",
                               ("event", "queue_stats_stale"), ("sqlstate", .string((error as? PGError)?.code.raw ?? "")))
    }

    /// How old the statistics a scrape shows now are, in seconds; nil before any was read.
    func statsAge(now: ContinuousClock.Instant = .now) -> Double? {
        statsCache.withLock { $0 }.map { DatabaseWatchdog.seconds(now - $0.at) }
    }

    /// Whether the database answers, for readiness: a round trip, not a scan of the queue.
    func checkDatabase() throws {
        _ = try onStatsConnection(.ping)
    }

    private enum StatsQuery {
        case stats, ping
        /// Campaigns deferred for a held topic: leasable now (a capped one keeps its pace).
        case undefer([Int64])
        /// The app's held jobs, broadcasts and channel requests: due now.
        case releaseHeld(app: String)
    }

    /// Runs `query` on the stats connection.
    private func onStatsConnection(_ query: StatsQuery) throws -> QueueStats? {
        try withStatsConnection { connection -> QueueStats? in
            switch query {
            case .stats:
                // Bounded on its own: a scrape waits for this read (`recentStats`).
                _ = try connection.execute(script: "BEGIN; SET LOCAL lock_timeout = '\(Self.statsLockTimeout)'; SET LOCAL statement_timeout = '\(Self.statsStatementTimeout)'")
                let stats = try QueueStats.read(connection)
                _ = try connection.execute(script: "COMMIT")
                return stats
            case .ping:
                _ = try connection.query("SELECT 1")
                return nil
            case .undefer(let ids):
                try CampaignStore().undeferLeases(connection, campaignIDs: ids)
                return nil
            case .releaseHeld(let app):
                try HeldWork().release(connection, app: app, onRefused: context.reportRefusedRewrites(madeDue:))
                return nil
            }
        }
    }

    /// Runs `body` on the stats connection, opening it if needed and dropping it on failure.
    private func withStatsConnection<T>(_ body: (PGConnection) throws -> T) throws -> T {
        try statsConnection.withLock { connection -> T in
            do {
                if connection == nil {
                    connection = try QueueSession.connect(url: context.config.databaseURL, applicationName: Self.statsSession)
                }
                return try body(connection!)
            } catch {
                connection?.close()
                connection = nil
                context.databaseError(error)
                throw error
            }
        }
    }

    private func registerGauges(appByKey: [ProviderTokenService.Key: String]) {
        let metrics = context.metrics
        let cache = Duration.seconds(2)
        metrics.queueDepth.setSource(cacheFor: cache) { [self] in
            let stats = try recentStats()
            return Lane.allCases.map { lane in
                MetricSample(labelValues: [lane.rawValue],
                             value: Double(stats.lanes.filter { $0.lane.rawValue == lane.rawValue }.reduce(0) { $0 + $1.depth }))
            }
        }
        metrics.queueOldestAge.setSource(cacheFor: cache) { [self] in
            let stats = try recentStats()
            return Lane.allCases.map { lane in
                MetricSample(labelValues: [lane.rawValue], value: stats.lanes.filter { $0.lane.rawValue == lane.rawValue }.map(\.oldestAge).max() ?? 0)
            }
        }
        metrics.queueAppDepth.setSource(cacheFor: cache) { [self] in
            try recentStats().lanes.map { MetricSample(labelValues: [$0.app, $0.lane.rawValue], value: Double($0.depth)) }
        }
        metrics.queueAppOldestAge.setSource(cacheFor: cache) { [self] in
            try recentStats().lanes.map { MetricSample(labelValues: [$0.app, $0.lane.rawValue], value: $0.oldestAge) }
        }
        for app in context.config.apps { metrics.configured(app: app.name).set(1) }
        metrics.campaigns.setSource(cacheFor: cache) { [self] in
            let stats = try recentStats()
            // A campaign held because a CHECK refuses its row counts as refused, not as its status.
            return CampaignStatus.allCases.map { status in
                MetricSample(labelValues: [status.rawValue],
                             value: Double(stats.campaigns.filter { $0.status == status && $0.refusedBy == nil }.count))
            } + [MetricSample(labelValues: ["refused"], value: Double(stats.campaigns.filter { $0.refusedBy != nil }.count))]
        }
        metrics.campaignTargetsRemaining.setSource(cacheFor: cache) { [self] in
            let stats = try recentStats()
            // Every campaign not over, due or not (`CampaignProgress.remaining`); the due part is the campaign lane's depth.
            return Dictionary(grouping: stats.campaigns, by: \.app).map { app, campaigns in
                MetricSample(labelValues: [app], value: Double(campaigns.reduce(0) { $0 + $1.remaining }))
            }
        }
        metrics.campaignTargetsRefused.setSource(cacheFor: cache) { [self] in
            // Every app with a campaign not over, 0 when none is held: a hold shows as a change, not a new series.
            try recentStats().lanes.filter { $0.lane == .campaign }.map { MetricSample(labelValues: [$0.app], value: Double($0.refused)) }
        }
        metrics.queueStatsAge.setSource { [self] in
            // Read (or tried) first, as the queue gauges of this scrape are; no sample when they have none.
            guard (try? recentStats()) != nil else { return [] }
            return statsAge().map { [MetricSample(value: $0)] } ?? []
        }
        let tokens = self.tokens
        // An app with a key per environment has two tokens: the older one is the one APNs may refuse first.
        metrics.jwtAge.setSource {
            Dictionary(tokens.ages().map { (appByKey[$0.0] ?? $0.0.keyID, $0.1) }, uniquingKeysWith: max)
                .map { MetricSample(labelValues: [$0.key], value: $0.value) }
        }
    }
}
