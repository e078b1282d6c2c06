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
/// status changed by other SQL) and at once after a notification or when the campaigns held
/// here change. A worker reads `verdict` before each round of sends: `.stopped`, it stops
/// submitting that campaign's chunks and its checkpoint records what was answered;
/// `.notifiedUnlooked`, it sends none of them this round.
///
/// It listens from its start (an instance with campaign workers), whether chunks are held or
/// not: a lease whose statement began before the command committed still hands out a chunk,
/// held here a moment after the notification came. A campaign notified is waited for
/// `notifiedWatchSeconds` (leases are assumed to return within them; after that the periodic
/// look finds the stop), looked at as soon as a chunk of it is held, and not sent until then.
/// Before, the watch slept while no chunk was held, and such a chunk sent until its next look:
/// 518 notifications of a campaign paced at 2,000/s after `pushd campaign cancel` returned.
///
/// A failure to watch while chunks are held is logged (once a minute) and counted, and leaves
/// the checkpoints to find the stop; the watch connects again a second later. It forgets the
/// campaigns notified and not yet looked at: held off, a resumed campaign's chunk would wait
/// for the watch to reach the database again, which may take long.
///
/// Thread rule: `verdict` from the workers' threads; the rest on the watch's own.
final class CampaignStopWatch: @unchecked Sendable {
    /// Seconds between two looks at the statuses of the campaigns being sent.
    static let lookInterval = 0.25
    /// Seconds a notified campaign is waited for: a chunk of it leased just before the pause or
    /// cancel committed is held here within them.
    static let notifiedWatchSeconds = 1.0
    /// Seconds between two looks at the campaigns held while a notified one is waited for.
    static let notifiedLookInterval = 0.005

    /// What a worker does with a campaign's chunk this round.
    enum Verdict: Equatable {
        /// Nothing says it stopped: sent.
        case sending
        /// Paused or cancelled (or gone): nothing more of it is sent.
        case stopped
        /// A pause or cancel of it was notified and no look has read its status since: none of it
        /// is sent until one has (within milliseconds), and it is not taken for stopped, since
        /// it may have been resumed meanwhile.
        case notifiedUnlooked
    }

    private let databaseURL: String
    private let logger: Logger
    private let databaseError: @Sendable (any Error) -> Void
    /// The campaigns this instance is sending chunks of.
    private let sending: @Sendable () -> Set<Int64>
    private let state = Lock((stopped: Set<Int64>(), unlooked: Set<Int64>()))
    private let stopRequested = Semaphore()
    private let stopOnce = Lock(false)
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

    /// Ends the watch; a second call returns at once.
    func stop() {
        guard stopOnce.withLock({ stopped in
            let first = !stopped
            stopped = true
            return first
        }) else { return }
        stopRequested.signal()
        finished.wait(timeout: 5)
    }

    func verdict(_ campaign: Int64) -> Verdict {
        state.withLock {
            $0.stopped.contains(campaign) ? .stopped : $0.unlooked.contains(campaign) ? .notifiedUnlooked : .sending
        }
    }

    private func run() {
        var connection: PGConnection?
        var stopping = false
        // Campaigns notified, with when to stop waiting for a chunk of them.
        var notified: [Int64: Double] = [:]
        // Of those, the ones no look has read since their notification.
        var unlooked = Set<Int64>()
        // The campaigns last looked at and when; a notification since calls for a new look.
        var looked: (campaigns: Set<Int64>, at: Double, heardSince: Bool) = ([], -.infinity, false)
        while !stopping {
            let campaigns = sending()
            let now = RateLimiter.monotonicSeconds()
            notified = notified.filter { $0.value > now }
            if !unlooked.isSubset(of: notified.keys) {
                // Waited for long enough: a worker holding one sends it (the looks go on).
                unlooked.formIntersection(notified.keys)
                state.withLock { $0.unlooked = unlooked }
            }
            if campaigns.isEmpty { looked.campaigns = [] }
            do {
                if connection == nil || connection?.isOpen == false {
                    let fresh = try QueueSession.connect(url: databaseURL, applicationName: "pushd-stops",
                                                         settings: ["statement_timeout": "1s"])
                    try fresh.listen(CampaignStore.stopChannel)
                    connection = fresh
                }
                if campaigns.isEmpty {
                    state.withLock { $0 = ([], unlooked) }
                } else if looked.heardSince || looked.campaigns != campaigns || now - looked.at >= Self.lookInterval {
                    let found = Set(try store.stoppedCampaigns(connection!, among: campaigns.sorted()))
                    unlooked.subtract(campaigns)
                    looked = (campaigns, now, false)
                    state.withLock { $0 = (found, unlooked) }
                }
                // A notification ends the wait at once; the look above then reads its campaign.
                let wait = notified.isEmpty ? Self.lookInterval : Self.notifiedLookInterval
                let heard = try connection!.waitForNotifications(timeoutMilliseconds: Int32(wait * 1000))
                if !heard.isEmpty {
                    looked.heardSince = true
                    let until = RateLimiter.monotonicSeconds() + Self.notifiedWatchSeconds
                    for notification in heard {
                        guard let campaign = Int64(notification.payload) else { continue }
                        notified[campaign] = until
                        unlooked.insert(campaign)
                    }
                    state.withLock { $0.unlooked = unlooked }
                }
                stopping = stopRequested.wait(timeout: 0)
            } catch {
                // Unwatched, a campaign resumed meanwhile would stay stopped, or held off, here:
                // the checkpoints decide alone until the watch looks again.
                notified.removeAll()
                unlooked.removeAll()
                state.withLock { $0 = ([], []) }
                looked = ([], -.infinity, false)
                connection?.close()
                connection = nil
                // While nothing is sent here, the database's trouble is told by what uses it.
                if !campaigns.isEmpty {
                    databaseError(error)
                    if let unlogged = failures.admit("watch", now: RateLimiter.monotonicSeconds()) {
                        let since = unlogged > 0 ? " (\(unlogged) more since the last line)" : ""
                        logger.warning("cannot watch the campaigns being sent for a pause or a cancel: \(error); their workers learn of one at their next checkpoint, within 2 s\(since)",
                                       ("event", "campaign_stop_watch_failed"))
                    }
                }
                stopping = stopRequested.wait(timeout: 1)
            }
        }
        connection?.close()
    }
}
