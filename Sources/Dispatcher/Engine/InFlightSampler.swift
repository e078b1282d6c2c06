/// Turns a loop's events into `InFlightWindow` samples: answers and their round trips, whether
/// work waited for the window, the most requests inside libcurl at once. A period ends once it
/// lasted `minimumPeriod` and two round trips and brought `minimumAnswers` (a change of the
/// limit shows in the rate only a round trip later), or after `longestPeriod` whatever it
/// brought.
///
/// Thread rule: owned by one event loop, touched only on its thread.
struct InFlightSampler {
    private(set) var window: InFlightWindow
    private var periodStart: UInt64 = 0
    private var answers = 0
    private var roundTripSum: UInt64 = 0
    private var minimumRoundTrip: UInt64 = .max
    private var waited = false
    private var disturbed = false
    private var peak = 0
    /// Mean round trip of the last period, for the next one's length.
    private(set) var lastRoundTrip: UInt64 = 0
    private(set) var lastRate: Double = 0

    static let minimumPeriod: UInt64 = 250_000_000
    static let longestPeriod: UInt64 = 5_000_000_000
    static let minimumAnswers = 32

    init(window: InFlightWindow) {
        self.window = window
    }

    var limit: Int { window.limit }

    mutating func answered(after nanoseconds: UInt64) {
        if nanoseconds >= Self.minimumPeriod, waited { window.answeredAfterLongRoundTrip() }
        answers += 1
        roundTripSum &+= nanoseconds
        if nanoseconds < minimumRoundTrip { minimumRoundTrip = nanoseconds }
    }

    /// Requests inside libcurl after a refill.
    mutating func inCurl(_ count: Int) {
        if count > peak { peak = count }
    }

    /// Requests waited in the loop's queue while libcurl held all the window allows.
    mutating func workWaited() { waited = true }

    /// Something else held requests back (no connection yet, a backoff, a retiring connection).
    mutating func admissionsHeld() { disturbed = true }

    /// At `now`, with `inFlight` requests inside libcurl and `capacity` the open connections'
    /// streams carry: the decision when a period ended, nil otherwise.
    mutating func tick(now: UInt64, inFlight: Int, capacity: Int) -> InFlightWindow.Decision? {
        if inFlight > peak { peak = inFlight }
        if periodStart == 0 {
            periodStart = now
            return nil
        }
        let elapsed = now &- periodStart
        let long = elapsed >= Self.longestPeriod
        guard long || (elapsed >= Self.minimumPeriod && elapsed >= 2 * lastRoundTrip && answers >= Self.minimumAnswers) else { return nil }
        let mean = answers > 0 ? roundTripSum / UInt64(answers) : 0
        let sample = InFlightWindow.Sample(answers: answers, nanoseconds: elapsed, waited: waited && answers > 0,
                                           disturbed: disturbed, meanRoundTrip: mean,
                                           minimumRoundTrip: answers > 0 ? minimumRoundTrip : 0,
                                           capacity: capacity, peakInFlight: peak)
        if answers > 0 { lastRoundTrip = mean }
        lastRate = sample.rate
        periodStart = now
        answers = 0
        roundTripSum = 0
        minimumRoundTrip = .max
        waited = false
        disturbed = false
        peak = 0
        return window.sampled(sample)
    }
}
