import Locking
import Posix
import QueueStore

/// Tells the campaign workers, within milliseconds, that a campaign whose chunks they are
/// sending was paused or cancelled, on a thread and a database connection of its own.
///
/// A worker learns its campaign's status at its checkpoints, every `checkpointInterval`
/// (2 s). A cancel of a campaign sent by mistake let up to 2 s of it go out after the command
/// returned: 60,000 notifications at 30,000/s. The watch listens on
/// `CampaignStore.stopChannel`, which `pushd campaign pause` and `cancel` notify when they
/// commit, and looks at the statuses of the campaigns being sent every `lookInterval` (for a
/// status changed by other SQL). A worker reads `isStopped` before each round of sends and
/// stops submitting that campaign's chunks; its checkpoint then records what was answered.
///
/// A failure to watch is logged (once a minute) and leaves the checkpoints to find the stop.
///
/// Thread rule: `isStopped` from the workers' threads; the rest on the watch's own.
final class CampaignStopWatch: @unchecked Sendable {
    /// Seconds between two looks at the statuses of the campaigns being sent.
    static let lookInterval = 0.25

    private let context: PipelineContext
    /// The campaigns this instance is sending chunks of.
    private let sending: @Sendable () -> Set<Int64>
    private let stopped = Lock(Set<Int64>())
    private let stopRequested = Semaphore()
    private let finished = Semaphore()
    private let store = CampaignStore()
    private var failures = LogGate<String>(quietSeconds: 60)

    init(context: PipelineContext, sending: @escaping @Sendable () -> Set<Int64>) {
        self.context = context
        self.sending = sending
    }

    func start() {
        PosixThread.detach(name: "pushd-stops") { [self] in
            run()
            finished.signal()
        }
    }

    func stop() {
        stopRequested.signal()
        finished.wait(timeout: 5)
    }

    /// Whether `campaign` was found paused or cancelled (or gone) while being sent.
    func isStopped(_ campaign: Int64) -> Bool {
        stopped.withLock { $0.contains(campaign) }
    }

    private func run() {
        var connection: PGConnection?
        var stopping = false
        while !stopping {
            let campaigns = sending()
            guard !campaigns.isEmpty else {
                stopped.withLock { $0.removeAll() }
                stopping = stopRequested.wait(timeout: Self.lookInterval)
                continue
            }
            do {
                if connection == nil || connection?.isOpen == false {
                    let fresh = try QueueSession.connect(url: context.config.databaseURL, applicationName: "pushd-stops",
                                                         settings: ["statement_timeout": "1s"])
                    try fresh.listen(CampaignStore.stopChannel)
                    connection = fresh
                }
                let found = try store.stoppedCampaigns(connection!, among: campaigns.sorted())
                stopped.withLock { $0 = Set(found) }
                // A notification ends the wait at once; the look above then finds its campaign.
                _ = try connection!.waitForNotifications(timeoutMilliseconds: Int32(Self.lookInterval * 1000))
                stopping = stopRequested.wait(timeout: 0)
            } catch {
                // Unwatched, a campaign resumed meanwhile would stay stopped here: the
                // checkpoints decide alone until the watch looks again.
                stopped.withLock { $0.removeAll() }
                context.databaseError(error)
                if let unlogged = failures.admit("watch", now: RateLimiter.monotonicSeconds()) {
                    let since = unlogged > 0 ? " (\(unlogged) more since the last line)" : ""
                    context.logger.warning("cannot watch the campaigns being sent for a pause or a cancel: \(error); their workers learn of one at their next checkpoint, within 2 s\(since)",
                                           ("event", "campaign_stop_watch_failed"))
                }
                connection?.close()
                connection = nil
                stopping = stopRequested.wait(timeout: 1)
            }
        }
        connection?.close()
    }
}
