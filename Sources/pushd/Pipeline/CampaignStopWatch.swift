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
/// Once connected, it listens while no chunk is held too: a campaign notified then is looked
/// at as soon as a chunk of it is held (one leased just before the command committed).
///
/// A failure to watch is logged (once a minute) and leaves the checkpoints to find the stop.
///
/// Thread rule: `isStopped` from the workers' threads; the rest on the watch's own.
final class CampaignStopWatch: @unchecked Sendable {
    /// Seconds between two looks at the statuses of the campaigns being sent.
    static let lookInterval = 0.25

    /// Seconds a notified campaign not being sent here is waited for: a chunk of it leased
    /// before the pause or cancel committed is held here within them.
    static let notifiedWatchSeconds = 1.0
    /// Seconds between two looks while a notified campaign is waited for.
    static let notifiedLookInterval = 0.005

    private let databaseURL: String
    private let logger: Logger
    private let databaseError: @Sendable (any Error) -> Void
    /// The campaigns this instance is sending chunks of.
    private let sending: @Sendable () -> Set<Int64>
    private let stopped = Lock(Set<Int64>())
    private let stopRequested = Semaphore()
    private let finished = Semaphore()
    private let store = CampaignStore()
    private var failures = LogGate<String>(quietSeconds: 60)

    convenience init(context: PipelineContext, sending: @escaping @Sendable () -> Set<Int64>) {
        self.init(databaseURL: context.config.databaseURL, logger: context.logger,
                  databaseError: { context.databaseError($0) }, sending: sending)
    }

    init(databaseURL: String, logger: Logger, databaseError: @escaping @Sendable (any Error) -> Void,
         sending: @escaping @Sendable () -> Set<Int64>) {
        self.databaseURL = databaseURL
        self.logger = logger
        self.databaseError = databaseError
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
        // Campaigns notified while no chunk of them was held here, with when to stop waiting
        // for one: a lease whose statement began before the pause or cancel committed still
        // hands out a chunk of it, held here a moment after the notification came. Waiting on
        // a semaphore until the next look instead let such a chunk send for up to
        // `lookInterval` (518 notifications at 2,000/s).
        var notified: [Int64: Double] = [:]
        // The campaigns last looked at and when; a notification since calls for a new look.
        var looked: (campaigns: Set<Int64>, at: Double, heardSince: Bool) = ([], -.infinity, false)
        while !stopping {
            let campaigns = sending()
            let now = RateLimiter.monotonicSeconds()
            notified = notified.filter { $0.value > now && !campaigns.contains($0.key) }
            if campaigns.isEmpty {
                stopped.withLock { $0.removeAll() }
                looked.campaigns = []
            }
            guard connection != nil || !campaigns.isEmpty else {
                stopping = stopRequested.wait(timeout: Self.lookInterval)
                continue
            }
            do {
                if connection == nil || connection?.isOpen == false {
                    let fresh = try QueueSession.connect(url: databaseURL, applicationName: "pushd-stops",
                                                         settings: ["statement_timeout": "1s"])
                    try fresh.listen(CampaignStore.stopChannel)
                    connection = fresh
                }
                if !campaigns.isEmpty,
                   looked.heardSince || looked.campaigns != campaigns || now - looked.at >= Self.lookInterval {
                    let found = try store.stoppedCampaigns(connection!, among: campaigns.sorted())
                    stopped.withLock { $0 = Set(found) }
                    looked = (campaigns, now, false)
                }
                // A notification ends the wait at once; the look above then finds its campaign.
                let wait = notified.isEmpty ? Self.lookInterval : Self.notifiedLookInterval
                for notification in try connection!.waitForNotifications(timeoutMilliseconds: Int32(wait * 1000)) {
                    looked.heardSince = true
                    if let campaign = Int64(notification.payload) {
                        notified[campaign] = RateLimiter.monotonicSeconds() + Self.notifiedWatchSeconds
                    }
                }
                stopping = stopRequested.wait(timeout: 0)
            } catch {
                // Unwatched, a campaign resumed meanwhile would stay stopped here: the
                // checkpoints decide alone until the watch looks again.
                stopped.withLock { $0.removeAll() }
                looked = ([], -.infinity, false)
                databaseError(error)
                if let unlogged = failures.admit("watch", now: RateLimiter.monotonicSeconds()) {
                    let since = unlogged > 0 ? " (\(unlogged) more since the last line)" : ""
                    logger.warning("cannot watch the campaigns being sent for a pause or a cancel: \(error); their workers learn of one at their next checkpoint, within 2 s\(since)",
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
