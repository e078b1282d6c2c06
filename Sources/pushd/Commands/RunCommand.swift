import Posix
import Glibc
import Metrics
import QueueStore
import Synchronization

/// `pushd run`: the daemon.
///
/// Start-up: the configuration is checked as `check-config` checks it (every file it names,
/// the metrics address), and any error ends `run` with exit 1 and the same lines, so pushd
/// never runs with credentials it cannot use; the database is the exception, since a late
/// database must not fail a boot. Then the metrics endpoint (so `/healthz` answers and `/readyz` says why it is
/// not ready), then the database (retried with backoff until it answers), the schema
/// check, the credentials, the pipeline; then ready. SIGTERM or SIGINT: not ready, stop
/// claiming, settle what is in flight within `shutdown.drain_timeout_s`, exit 0. A
/// second signal exits at once; nothing is lost either way, since unsettled work is
/// claimed again. SIGHUP reopens the log file, reloads the configuration (`ConfigReloader`:
/// signing keys and renewed certificates apply at once, other changed settings are named as
/// needing a restart), then
/// resumes apps paused for their credentials and ends scopes held for their configuration
/// (TopicDisallowed, …), so a fixed key is what the resumed app signs with.
enum RunCommand {
    static func run(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let file = parsed.value("config") ?? CommandContext.defaultConfigPath
        var check = ConfigCheck(file: file, environment: context.environment, checkDatabase: false)
        check.run()
        let concerns = check.findings.filter { $0.severity != .ok }
        if check.errorCount > 0 {
            for finding in concerns { context.errorOutput(finding.description) }
            context.errorOutput(check.summary)
            return 1
        }
        let (config, _) = try ConfigLoader.load(file: file, environment: context.environment)
        QueueSession.deadPeerSeconds.store(config.databaseDeadPeerSeconds, ordering: .relaxed)
        let sink = FileLogSink(path: config.logFile)
        let logger = Logger(level: config.logLevel, sink: sink)
        for warning in concerns {
            logger.warning("configuration: \(warning.setting): \(warning.message)", ("event", "config_warning"), ("setting", .string(warning.setting)))
        }
        let metrics = try PushdMetrics(version: VersionCommand.pushdVersion)
        let listen: (host: String, port: UInt16)
        do {
            listen = try ConfigLoader.listenAddress(config.metricsListen)
        } catch {
            throw CommandContext.Failure("\(error)")
        }
        let refusals = EndpointRefusalLog(metrics: metrics, logger: logger)
        let server = try MetricsServer(registry: metrics.registry, configuration: Self.metricsServerConfiguration(config, host: listen.host, port: listen.port),
                                       onRefusal: { refusals.record($0) })
        server.setReady(false, detail: "starting: connecting to the database")
        // A blocked main loop cannot say the database stopped answering: the watchdog does.
        let watchdog = DatabaseWatchdog(stallSeconds: config.databaseStallSeconds, metrics: metrics, logger: logger) { detail in
            server.setReady(false, detail: detail)
        }
        watchdog.start()
        defer { watchdog.stop() }
        let signals: SignalWatcher
        do {
            signals = try SignalWatcher([SIGTERM, SIGINT, SIGHUP])
        } catch {
            // Without its signals pushd could neither drain on SIGTERM nor reopen its log:
            // refuse to start, with the failing call on standard error as other start-up errors.
            server.stop()
            throw error
        }
        let instance = Self.instanceName(host: Self.hostName(), pid: getpid(), random: UInt32.random(in: 0 ... 0xFF_FFFF))
        logger.info("pushd \(VersionCommand.pushdVersion) starting", ("instance", .string(instance)),
                    ("metrics", .string("\(server.host):\(server.port)")), ("apps", .int(Int64(config.apps.count))))
        if let warning = VersionCommand.linkedLibcurlWarning() { logger.warning(warning) }

        let state = RunState()
        let signalTask = Task.detached {
            for await number in signals.signals {
                switch number {
                case SIGHUP:
                    sink.reopen()
                    logger.notice("SIGHUP: reopened the log; reloading the configuration, then resuming paused apps and ending held scopes")
                    state.hangups.wrappingAdd(1, ordering: .relaxed)
                default:
                    let count = state.stops.wrappingAdd(1, ordering: .relaxed).newValue
                    if count >= 2 {
                        logger.warning("\(SignalWatcher.name(number)) again: exiting at once; unsettled work will be claimed again")
                        exit(1)
                    }
                    logger.notice("\(SignalWatcher.name(number)): draining (up to \(config.drainTimeoutSeconds)s)")
                    // Here rather than in the main loop, which may be waiting on the database.
                    server.setReady(false, detail: "draining")
                    Self.exitIfStillRunning(after: Double(config.drainTimeoutSeconds + Self.shutdownGraceSeconds),
                                            signal: SignalWatcher.name(number), logger: logger)
                }
            }
        }
        defer { signalTask.cancel() }

        // The database, with backoff, until it answers or we are told to stop.
        var attempt = 0
        while true {
            if state.stops.load(ordering: .relaxed) > 0 {
                server.stop()
                return 0
            }
            do {
                let connection = try QueueSession.connect(url: config.databaseURL, applicationName: "pushd-startup")
                defer { connection.close() }
                let migrator = Migrator()
                // Nothing can be migrated, registered or sent in a database that takes no writes
                // (a standby, default_transaction_read_only): wait for it to take them.
                let writability = try DatabaseWritability.read(connection)
                if writability != .writable { throw ReadOnlyDatabase(writability: writability) }
                if parsed.has("migrate") {
                    let applied = try migrator.migrate(connection)
                    if !applied.isEmpty { logger.notice("applied schema migrations \(applied.map(String.init).joined(separator: ", "))") }
                }
                guard try !migrator.appliedVersions(connection).isEmpty else {
                    throw CommandContext.Failure("the database has no pushd schema: run `pushd migrate` (or `pushd run --migrate`)")
                }
                break
            } catch let failure as CommandContext.Failure {
                server.stop()
                throw failure
            } catch let readOnly as ReadOnlyDatabase {
                attempt += 1
                let delay = min(30.0, 0.5 * pow(2.0, Double(min(attempt, 6))))
                server.setReady(false, detail: "\(readOnly.writability.cause ?? "the database is read-only"): waiting for it to take writes (see the log)")
                logger.error("\(readOnly.writability.cause ?? "the database is read-only"): pushd can record nothing there (no migration, heartbeat, claim "
                             + "or outcome), so it does not start sending until the database takes writes; checking again in \(delay.fixed(1))s",
                             ("event", "database_read_only"))
                PosixThread.sleep(seconds: delay)
            } catch {
                attempt += 1
                let delay = min(30.0, 0.5 * pow(2.0, Double(min(attempt, 6))))
                server.setReady(false, detail: watchdog.stallDetail ?? Self.databaseNotReady(error))
                logger.warning("database unreachable, retrying in \(delay.fixed(1))s: \(error)")
                PosixThread.sleep(seconds: delay)
            }
        }

        let pipeline: Pipeline
        do {
            pipeline = try Pipeline(config: config, metrics: metrics, logger: logger, instance: instance,
                                    databaseStalled: { watchdog.isStalled })
        } catch {
            server.stop()
            throw error
        }
        let reloader = ConfigReloader(file: file, environment: context.environment, running: config,
                                      tokens: pipeline.tokens, certificates: pipeline.certificates,
                                      replaceCertificate: { pipeline.replaceCertificate(app: $0, environment: $1, with: $2) },
                                      logger: logger, metrics: metrics)
        // Registered first: the workers start knowing which environments other instances send.
        let heartbeat = InstanceHeartbeat(pipeline: pipeline, host: Self.hostName(), pid: getpid())
        heartbeat.start()
        pipeline.start()
        server.setReady(true, detail: "database reachable, \(config.apps.count) app(s) loaded")
        logger.info("pushd is running", ("apps", .string(config.apps.map(\.name).joined(separator: ","))))

        // From zero: a SIGHUP that came while pushd waited for the database (its line says it
        // reloads) reloads now, not never; the pipeline runs with the file read at the start.
        var hangupsSeen = 0
        var lastHealthCheck = Timestamp.distantPast
        while state.stops.load(ordering: .relaxed) == 0 {
            PosixThread.sleep(seconds: 0.1)
            let hangups = state.hangups.load(ordering: .relaxed)
            if hangups != hangupsSeen {
                hangupsSeen = hangups
                let reloaded = reloader.reload()
                pipeline.resumePausedApps(newCredentials: reloaded.appsWithNewCredentials)
            }
            // A lane found stuck makes the process not ready at once, not at the next check.
            if server.readiness.isReady, let stuck = pipeline.context.laneHealth.stuckDetail() {
                server.setReady(false, detail: stuck)
            }
            if Timestamp().timeIntervalSince(lastHealthCheck) >= 5 {
                lastHealthCheck = Timestamp()
                do {
                    try pipeline.checkDatabase()
                    // Paused apps keep the process ready (their jobs wait, the others send) but are
                    // named with why; an APNs server whose certificate fails verification does not.
                    let paused = pipeline.context.pausedAppReasons().map { "\($0.app) (\($0.reason))" }
                    let untrusted = pipeline.context.serverCertificateRefusals()
                    // Held scopes likewise: the rest of the app sends; the scope's work is kept.
                    let held = pipeline.context.heldScopes().map { "app \($0.app) \($0.key): \($0.reason)" }
                        + pipeline.context.environmentHeldApps().map {
                            "app \($0.app) \(PipelineContext.environmentHeldScope($0.environment)): \(AppSender.environmentDisagreementReason)"
                        }
                        + pipeline.context.heldCampaignsDetail()
                    // An app APNs takes nothing of makes the process not ready, naming it: its
                    // notifications are kept but nothing is delivered.
                    let outages = pipeline.context.apnsUnavailable()
                    // A lane that cannot set up its connections (a CA file unreadable now) sends nothing there.
                    let unconnected = pipeline.context.connectionSetupFailures()
                    if let stall = watchdog.stallDetail {
                        // Another session waits on the database while this one got an answer.
                        server.setReady(false, detail: stall)
                    } else if let stuck = pipeline.context.laneHealth.stuckDetail() {
                        // The database answers this check, but a lane's every pass fails (a
                        // lock on its table): its work waits in the queue.
                        server.setReady(false, detail: stuck)
                    } else if !untrusted.isEmpty {
                        // No notification of these apps can reach APNs until the CA file, the host
                        // or the server's certificate is fixed: nothing is delivered for them.
                        // The reason names the failed verification and what to check.
                        server.setReady(false, detail: "sending is paused for "
                                        + untrusted.map { "app \($0.app) (\($0.reason))" }.joined(separator: ", ")
                                        + "; its notifications are kept; fix it and send SIGHUP")
                    } else if !unconnected.isEmpty || !outages.isEmpty {
                        let cannotConnect = unconnected.isEmpty ? nil : "cannot connect to APNs for "
                            + unconnected.sorted { $0.key < $1.key }.map { "app \($0.key) (\($0.value))" }.joined(separator: ", ")
                            + "; its notifications are kept and tried again every 10 s"
                        let notTaking = outages.isEmpty ? nil : "APNs is not taking notifications of "
                            + outages.sorted { $0.key < $1.key }.map { "app \($0.key) (\($0.value))" }.joined(separator: ", ")
                        server.setReady(false, detail: [cannotConnect, notTaking].compactMap { $0 }.joined(separator: "; "))
                    } else {
                        // Ready (the rest sends), but named: this work is dead-lettered.
                        let unserved = pipeline.context.coverage.unserved()
                        server.setReady(true, detail: "database reachable, \(config.apps.count) app(s) loaded"
                                        + (paused.isEmpty ? "" : "; paused: \(paused.joined(separator: ", "))")
                                        + (held.isEmpty ? "" : "; held: \(held.joined(separator: ", "))")
                                        + (unserved.isEmpty ? "" : "; no live instance has credentials for (dead-lettered): \(unserved.joined(separator: ", "))"))
                    }
                } catch {
                    if server.readiness.isReady { logger.warning("database check failed: \(error)") }
                    // A check that failed because the database stopped answering (its call
                    // abandoned, a new session timing out as it connects) says the stall, not
                    // "unreachable": the watchdog's line is the one the log has.
                    server.setReady(false, detail: watchdog.stallDetail ?? Self.databaseNotReady(error))
                }
            }
        }
        server.setReady(false, detail: "draining")
        let deadline = Timestamp().addingTimeInterval(Double(config.drainTimeoutSeconds))
        pipeline.stop(deadline: deadline)
        heartbeat.stop()
        let tally = pipeline.context.tally
        logger.info("pushd stopped", ("sent", .int(Int64(tally.sent.load(ordering: .relaxed)))),
                    ("retried", .int(Int64(tally.retried.load(ordering: .relaxed)))),
                    ("dead", .int(Int64(tally.dead.load(ordering: .relaxed)))),
                    ("pruned", .int(Int64(tally.pruned.load(ordering: .relaxed)))))
        server.stop()
        signals.cancel()
        return 0
    }

    /// How long after `shutdown.drain_timeout_s` a stop may still take (the dispatchers'
    /// drain, the workers recording what the stopped engines answered, the heartbeat's last
    /// write) before pushd exits without finishing it.
    static let shutdownGraceSeconds = Int(Pipeline.settleAfterStopSeconds) + 5

    /// Exits with status 1 if the process is still running `seconds` from now: a stop waiting
    /// on a database that does not answer ends anyway, and says so. Nothing is lost: a claimed
    /// batch's transaction ends with its session and a campaign chunk's lease expires, so the
    /// work is claimed again (docs/queue.md).
    static func exitIfStillRunning(after seconds: Double, signal: String, logger: Logger) {
        PosixThread.detach(name: "pushd-stop-bound") {
            PosixThread.sleep(seconds: seconds)
            logger.error("\(signal): the stop has not finished after \(Int(seconds))s (shutdown.drain_timeout_s + \(shutdownGraceSeconds)s); "
                         + "database calls in flight: \(DatabaseWatchdog.describeInFlight()); exiting with status 1, unsettled work will be claimed again",
                         ("event", "stop_forced"), ("after_s", .int(Int64(seconds))))
            exit(1)
        }
    }

    /// What `/readyz` says when the database check fails: the check and its SQLSTATE, never the
    /// message, which can quote the connection string; the log line has the redacted whole.
    /// Thrown at start-up while the database takes no writes.
    struct ReadOnlyDatabase: Error {
        var writability: DatabaseWritability
    }

    static func databaseNotReady(_ error: any Error) -> String {
        guard let error = error as? PGError else { return "database unreachable (see the log)" }
        if error.code == .readOnlySQLTransaction { return "the database is read-only: SQLSTATE 25006 (see the log)" }
        return "database unreachable: SQLSTATE \(error.code.raw) (see the log)"
    }

    /// The name this run goes by in leases, pauses, the fleet table and the log: host and
    /// process id, for an operator to find it, and 6 random hex digits, because two containers
    /// on the host network have the same host name and often the same pid (1). Two instances
    /// with one name would take each other's chunk leases for their own and send them twice.
    /// The metrics port's bounds from `metrics.*` (docs/security.md, "The metrics endpoint cannot be starved").
    static func metricsServerConfiguration(_ config: PushdConfig, host: String, port: UInt16) -> MetricsServerConfiguration {
        let endpoint = config.metricsEndpoint
        return MetricsServerConfiguration(host: host, port: port, connectionLimit: endpoint.connectionLimit,
                                          perIPConnectionLimit: endpoint.perAddressLimit, connectionTimeoutSeconds: endpoint.idleTimeoutSeconds,
                                          requestTimeoutSeconds: endpoint.requestTimeoutSeconds, answerTimeoutSeconds: endpoint.answerTimeoutSeconds)
    }

    static func instanceName(host: String, pid: Int32, random: UInt32) -> String {
        let hex = String(random & 0xFF_FFFF, radix: 16)
        return "\(host)/\(pid)-\(String(repeating: "0", count: 6 - hex.count))\(hex)"
    }

    static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "pushd" }
        return String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// What the signal task tells the main loop, which acts on it between its short sleeps.
final class RunState: Sendable {
    /// SIGTERM and SIGINT received.
    let stops = Atomic<Int>(0)
    /// SIGHUP received.
    let hangups = Atomic<Int>(0)
}
