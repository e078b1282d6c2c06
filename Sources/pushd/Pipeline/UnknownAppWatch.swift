import Locking
import Posix
import QueueStore

/// Warns about work queued for apps this instance is not configured for. Such work is
/// never claimed here (the claim and the lease filter by app) and never given up: it
/// waits for an instance that knows the app. If no instance does, it waits forever,
/// so once a minute each such app gets one warning line, and `pushd_queue_app_depth`
/// with `pushd_app_configured` lets an alert tell "served elsewhere" from "served by nobody".
final class UnknownAppWatch: @unchecked Sendable {
    // Immutable after init; `stop` is the only cross-thread signal.
    private let configured: Set<String>
    private let interval: Double
    private let readStats: () throws -> QueueStats
    private let logger: Logger
    private let stopped = Semaphore()
    private let finished = Semaphore()

    init(configured: Set<String>, interval: Double = 60, logger: Logger, readStats: @escaping () throws -> QueueStats) {
        self.configured = configured
        self.interval = interval
        self.logger = logger
        self.readStats = readStats
    }

    struct Warning: Equatable {
        var app: String
        var dueJobs: Int
        var oldestJobAge: Double
        var campaignTargets: Int

        var message: String {
            "\(dueJobs) due jobs (the oldest waiting \(Int(oldestJobAge)) s) and \(campaignTargets) unsent campaign targets of app '\(app)' are queued; this instance is not configured for '\(app)' and leaves them for an instance that is (none may be running)"
        }
    }

    /// One warning per app that has queued work and is not in `configured`.
    static func warnings(_ stats: QueueStats, configured: Set<String>) -> [Warning] {
        var byApp = [String: Warning]()
        for lane in stats.lanes where !configured.contains(lane.app) && lane.depth > 0 {
            var warning = byApp[lane.app] ?? Warning(app: lane.app, dueJobs: 0, oldestJobAge: 0, campaignTargets: 0)
            switch lane.lane {
            case .transactional, .broadcast:
                warning.dueJobs += lane.depth
                warning.oldestJobAge = max(warning.oldestJobAge, lane.oldestAge)
            case .campaign:
                warning.campaignTargets += lane.depth
            }
            byApp[lane.app] = warning
        }
        return byApp.values.sorted { $0.app < $1.app }
    }

    func start() {
        PosixThread.detach(name: "pushd-app-watch") { [self] in
            repeat {
                do {
                    for warning in Self.warnings(try readStats(), configured: configured) {
                        logger.warning(warning.message, ("app", .string(warning.app)), ("due_jobs", .int(Int64(warning.dueJobs))),
                                       ("oldest_age_s", .double(warning.oldestJobAge.rounded())),
                                       ("campaign_targets", .int(Int64(warning.campaignTargets))))
                    }
                } catch {
                    // Counted in pushd_database_errors_total by the stats read; the workers log the outage.
                }
            } while !stopped.wait(timeout: interval)
            finished.signal()
        }
    }

    func stop() {
        stopped.signal()
        finished.wait(timeout: 2)
    }
}
