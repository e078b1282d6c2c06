/// The delay before trying to connect again after consecutive connection failures.
///
/// Exponential from `initialMilliseconds`, doubling per failure up to `maxMilliseconds`, with
/// "equal jitter": the delay is uniformly spread over [d·(1−jitter), d], so threads that failed
/// together do not reconnect in lockstep, and the delay never collapses towards zero.
public struct ReconnectBackoff: Sendable, Equatable {
    public var initialMilliseconds: Int
    public var maxMilliseconds: Int
    /// 0 (none) … 1 (anywhere between 0 and the full delay).
    public var jitter: Double

    public init(initialMilliseconds: Int = 250, maxMilliseconds: Int = 4000, jitter: Double = 0.5) {
        self.initialMilliseconds = max(1, initialMilliseconds)
        self.maxMilliseconds = max(self.initialMilliseconds, maxMilliseconds)
        self.jitter = min(1, max(0, jitter))
    }

    /// - Parameters:
    ///   - failures: consecutive failures so far, 1 for the first.
    ///   - unitRandom: a number in [0, 1) that picks the point within the jitter range.
    public func delayMilliseconds(afterFailures failures: Int, unitRandom: Double) -> Int {
        guard failures > 0 else { return 0 }
        let doublings = min(failures - 1, 30)
        let full = min(Double(maxMilliseconds), Double(initialMilliseconds) * Double(1 << doublings))
        let random = min(max(unitRandom, 0), 1)
        return Int((full * (1 - jitter * random)).rounded())
    }
}
