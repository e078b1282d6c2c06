/// How an idle claimer waits for transactional jobs.
///
/// Right after finding work a claimer claims again every `pollInterval`; an empty claim's
/// COMMIT is not waited for, so a poll is one round trip and a steady stream of inserts is
/// picked up within milliseconds without any NOTIFY. Between claims it waits on its
/// connection, so a NOTIFY sent for another, sleeping claimer ends the wait at once
/// (`JobQueue.waitWhileBusy`). Once it has been idle for
/// `busyWindow` it sleeps with `JobQueue.sleepUntilJobs`, and inserts wake it
/// through NOTIFY; `sleepTimeout` bounds that sleep as a fallback poll.
public struct JobWaitPolicy: Sendable, Hashable {
    public enum Step: Sendable, Hashable {
        /// Claim again after this long if the claim found nothing.
        case poll(microseconds: UInt32)
        /// Register as asleep and wait for a notification up to this long.
        case sleep(milliseconds: Int32)
    }

    public var pollInterval: Double
    public var busyWindow: Double
    public var sleepTimeout: Double

    public init(pollInterval: Double = 0.002, busyWindow: Double = 1.0, sleepTimeout: Double = 1.0) {
        self.pollInterval = pollInterval
        self.busyWindow = busyWindow
        self.sleepTimeout = sleepTimeout
    }

    /// The next step for a claimer whose last claim that found work was `idleSeconds` ago.
    public func step(idleSeconds: Double) -> Step {
        if idleSeconds < busyWindow {
            return .poll(microseconds: UInt32(max(0, pollInterval) * 1_000_000))
        }
        return .sleep(milliseconds: Int32(clamping: Int(max(0, sleepTimeout) * 1000)))
    }
}
