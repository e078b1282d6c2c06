import Dispatcher
import Posix
import Metrics
import QueueStore
import Locking
import Synchronization

/// Keeps this process's row in `pushd.instances` fresh: who it is (host, pid, version,
/// libcurl), which apps it serves, which of them are paused and which scopes held, and a heartbeat every
/// `InstanceStore.heartbeatSeconds`. Each heartbeat also reads the fleet's numbers for the
/// `pushd_fleet_*` gauges, so a scrape costs the database nothing. On a clean stop the row
/// is deleted; after a crash it shows as gone within a minute. About once a minute the same
/// thread sweeps the dedupe keys past their retention (`DedupeLedger`), in bounded batches.
///
/// Thread rule: the database connection is touched only by the heartbeat thread; the
/// last summary sits in a mutex for the scrape thread.
final class InstanceHeartbeat: @unchecked Sendable {
    let registration: InstanceRegistration
    private let databaseURL: String
    private let logger: Logger
    private let pausedApps: @Sendable () -> [String: String]
    private let apnsUnavailable: @Sendable () -> [String: String]
    private let onDatabaseError: @Sendable (any Error) -> Void
    /// Told after each heartbeat which environments it lacks other live instances send.
    private let coverage: EnvironmentCoverage?
    /// Told after each fleet read which apps live instances disagree on the environment of.
    private let onDisagreements: (@Sendable ([String]) -> Void)?
    private let store = InstanceStore()
    private let summary = Lock<FleetSummary?>(nil)
    /// The apps whose environment live instances disagreed on at the last line about it.
    private let disagreements = Lock<[String]>([])
    private let stopping = Atomic<Bool>(false)
    private let wake = Semaphore()
    private let finished = Semaphore()
    private let interval: Double
    /// 0: this heartbeat does not sweep dedupe keys.
    private let dedupeRetentionSeconds: Int
    private let ledger = DedupeLedger()
    /// Between two sweeps of the dedupe keys when the last one left none due.
    static let dedupeSweepSeconds = 60.0

    init(registration: InstanceRegistration, databaseURL: String, metrics: PushdMetrics, logger: Logger,
         interval: Double = InstanceStore.heartbeatSeconds,
         dedupeRetentionSeconds: Int = 0,
         pausedApps: @escaping @Sendable () -> [String: String],
         apnsUnavailable: @escaping @Sendable () -> [String: String] = { [:] },
         coverage: EnvironmentCoverage? = nil,
         onDisagreements: (@Sendable ([String]) -> Void)? = nil,
         onDatabaseError: @escaping @Sendable (any Error) -> Void) {
        self.registration = registration
        self.databaseURL = databaseURL
        self.logger = logger
        self.interval = interval
        self.dedupeRetentionSeconds = dedupeRetentionSeconds
        self.pausedApps = pausedApps
        self.apnsUnavailable = apnsUnavailable
        self.onDatabaseError = onDatabaseError
        self.coverage = coverage
        self.onDisagreements = onDisagreements
        // No sample while the registry cannot be read, rather than a stale one.
        metrics.fleetInstances.setSource { [weak self] in
            guard let fleet = self?.lastSummary else { return [] }
            return [MetricSample(labelValues: ["alive"], value: Double(fleet.alive)),
                    MetricSample(labelValues: ["gone"], value: Double(fleet.gone))]
        }
        metrics.fleetVersions.setSource { [weak self] in
            self?.lastSummary.map { [MetricSample(value: Double($0.versions))] } ?? []
        }
        metrics.fleetAppSets.setSource { [weak self] in
            self?.lastSummary.map { [MetricSample(value: Double($0.appSets))] } ?? []
        }
        metrics.fleetAppEnvironmentDisagreements.setSource { [weak self] in
            self?.lastSummary.map { [MetricSample(value: Double($0.environmentDisagreements.count))] } ?? []
        }
    }

    /// The fleet as the last heartbeat read it; nil while the registry cannot be read.
    var lastSummary: FleetSummary? { summary.withLock { $0 } }

    /// The heartbeat of a running pipeline: its apps, and the ones it has paused now.
    convenience init(pipeline: Pipeline, host: String, pid: Int32) {
        let context = pipeline.context
        let registration = InstanceRegistration(id: context.instance, host: host, pid: Int(pid), version: VersionCommand.pushdVersion,
                                                libcurlVersion: CurlRuntime.info.version,
                                                apps: context.config.apps.map(\.name),
                                                environments: context.coverage.advertised + context.config.apps.map {
                                                    InstanceRegistration.homeEntry(app: $0.name, environment: $0.environment.rawValue)
                                                },
                                                startedAt: Timestamp())
        let senders = context.senders
        self.init(registration: registration, databaseURL: context.config.databaseURL, metrics: context.metrics,
                  logger: context.logger,
                  dedupeRetentionSeconds: context.config.dedupeRetentionHours * 3600,
                  pausedApps: {
                      var paused = Dictionary(uniqueKeysWithValues: senders.values.compactMap { sender in
                          sender.pausedReason.map { (sender.app.name, $0) }
                      })
                      // A held scope is keyed "app scope": older readers show it as a paused
                      // "app" named so, newer ones split it (`FleetReport.PausedApp`).
                      for held in context.heldScopes() { paused["\(held.app) \(held.key)"] = held.why }
                      for held in context.environmentHeldApps() {
                          paused["\(held.app) \(PipelineContext.environmentHeldScope(held.environment))"] = held.why
                      }
                      return paused
                  },
                  // Connections that cannot be set up block the app's sending too: named with the outages.
                  apnsUnavailable: { context.apnsUnavailable().merging(context.connectionSetupFailures()) { "\($0); \($1)" } },
                  coverage: context.coverage,
                  onDisagreements: { pipeline.holdEnvironmentDisagreements($0) },
                  onDatabaseError: { context.databaseError($0) })
    }

    /// Registers this instance and reads the fleet once on the calling thread, so that the
    /// workers started next know which environments other instances send, then beats on its
    /// own thread.
    func start() {
        var connection: PGConnection?
        var failing = false
        coverage?.heartbeatStarts()
        beat(&connection, &failing)
        // The connection is handed to the heartbeat thread and never used here again.
        nonisolated(unsafe) let handed = connection
        let wasFailing = failing
        PosixThread.detach(name: "pushd-heartbeat") { [self] in run(connection: handed, failing: wasFailing) }
    }

    /// Stops the heartbeat and deletes this instance's row; waits at most `timeout` seconds.
    func stop(timeout: Double = 5) {
        stopping.store(true, ordering: .relaxed)
        wake.signal()
        finished.wait(timeout: timeout)
    }

    /// One error line when live instances begin to disagree on the configured environment of
    /// some app (or on which apps), one notice when they agree again.
    private func reportDisagreements(_ apps: [String]) {
        let before = disagreements.withLock { current -> [String] in
            defer { current = apps }
            return current
        }
        guard apps != before else { return }
        if apps.isEmpty {
            logger.notice("live instances agree again on the configured environment of every app", ("event", "app_environment_agreement"))
            return
        }
        logger.error("live instances disagree on the configured environment (apps[].environment) of app(s) \(apps.joined(separator: ", ")): "
                     + "a notification that names no environment, to a token registered without one, would go to the host of whichever "
                     + "instance claims it, and the other host would answer BadDeviceToken, which fails it and prunes the token, so "
                     + "such notifications are held (kept, unsent) until the instances agree; give every instance "
                     + "the same environment for the app (pushd status shows which instance has which)",
                     ("event", "app_environment_disagreement"), ("apps", .string(apps.joined(separator: ","))))
    }

    private func beat(_ connection: inout PGConnection?, _ failing: inout Bool) {
        do {
            if connection == nil {
                connection = try QueueSession.connect(url: databaseURL, applicationName: "pushd-heartbeat")
            }
            let fleet = try store.heartbeat(connection!, registration, paused: pausedApps(), apnsUnavailable: apnsUnavailable())
            summary.withLock { $0 = fleet }
            reportDisagreements(fleet.environmentDisagreements)
            onDisagreements?(fleet.environmentDisagreements)
            if let coverage, !coverage.missing.isEmpty {
                coverage.update(sentElsewhere: try store.sentElsewhere(connection!, id: registration.id, wanted: coverage.missing))
            }
            if failing {
                failing = false
                logger.notice("this instance is registered in pushd.instances again", ("instance", .string(registration.id)))
            }
        } catch {
            connection?.close()
            connection = nil
            summary.withLock { $0 = nil }
            onDatabaseError(error)
            if !failing {
                failing = true
                let readOnly = (error as? PGError)?.code == .readOnlySQLTransaction
                    ? "the database is read-only (default_transaction_read_only on, or a standby in recovery), so " : ""
                logger.warning("cannot record this instance in pushd.instances (\(readOnly)pushd status will show it as gone after a minute): \(error)",
                               ("instance", .string(registration.id)))
            }
        }
    }

    /// Deletes dedupe keys past their retention when due (`DedupeLedger.sweepDue`): about once
    /// a minute, at the next heartbeat while a sweep leaves keys behind.
    private func sweepDedupeKeys(_ connection: PGConnection, next: inout Timestamp, failing: inout Bool) {
        guard dedupeRetentionSeconds > 0, Timestamp() >= next else { return }
        do {
            let swept = try ledger.sweepDue(connection, retentionSeconds: dedupeRetentionSeconds)
            // With keys left the next heartbeat goes on, rather than a minute later.
            next = Timestamp().addingTimeInterval(swept.more ? 0 : Self.dedupeSweepSeconds)
            logger.debug("swept dedupe keys past their retention", ("deleted", .int(Int64(swept.deleted))),
                         ("more", .bool(swept.more)))
            if failing {
                failing = false
                logger.notice("dedupe keys past their retention are swept again")
            }
        } catch {
            next = Timestamp().addingTimeInterval(Self.dedupeSweepSeconds)
            onDatabaseError(error)
            if !failing {
                failing = true
                logger.warning("cannot sweep dedupe keys past their retention from pushd.job_dedupe_keys (they stay taken and the table grows until this works; was `pushd migrate` run?): \(error)")
            }
        }
    }

    private func run(connection handed: PGConnection?, failing wasFailing: Bool) {
        var connection = handed
        var failing = wasFailing
        var nextSweep = Timestamp()
        var sweepFailing = false
        if let connection { sweepDedupeKeys(connection, next: &nextSweep, failing: &sweepFailing) }
        wake.wait(timeout: interval)
        while !stopping.load(ordering: .relaxed) {
            beat(&connection, &failing)
            if let connection { sweepDedupeKeys(connection, next: &nextSweep, failing: &sweepFailing) }
            wake.wait(timeout: interval)
        }
        do {
            let final = try connection ?? QueueSession.connect(url: databaseURL, applicationName: "pushd-heartbeat")
            try store.remove(final, id: registration.id)
            final.close()
        } catch {
            logger.warning("could not remove this instance from pushd.instances; it will show as gone: \(error)",
                           ("instance", .string(registration.id)))
        }
        finished.signal()
    }
}
