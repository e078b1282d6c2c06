/// How far a loop may open connections beyond its configured ones: when requests have waited
/// for a stream for `delayNanoseconds` without a break while every connection carries what it
/// may, one more, up to `ceiling`. Throughput per connection is streams ÷ round trip, so this
/// is what lets a far server (APNs at 20–150 ms) be sent to at the rate the work needs.
struct ConnectionGrowth: Equatable {
    /// Connections the loop keeps (`connectionsPerThread`).
    let base: Int
    /// Connections the loop may hold at most (its share of `maxConnections`).
    let ceiling: Int
    /// Streams each added connection carries (`streamsPerConnection`).
    let streamsPerConnection: Int
    let delayNanoseconds: UInt64
    /// How long the answer rate is measured before a connection is added and after it answered,
    /// to keep it only when the rate rose; 0: added connections are kept unjudged.
    var judgedOverNanoseconds: UInt64 = 0

    /// The streams of the configured connections.
    var baseStreams: Int { base * streamsPerConnection }

    /// Streams a judged connection carries in the first step of its trial (nil: all of them,
    /// judged in one step); `firstStepStreams(streamsPerConnection:)` is the engine's choice.
    var trialFirstStep: Int?

    /// Streams a judged connection carries in the first step of its trial, all of them once
    /// they raised the rate. What a trial costs is memory for its streams in flight (about 12 KB
    /// each inside libcurl), paid at the peak whether the connection is kept or given up: a
    /// quarter of 500 streams is about 1.5 MB where all of them are 6.3 MB.
    var trialStreams: Int {
        guard judgedOverNanoseconds > 0, let first = trialFirstStep else { return streamsPerConnection }
        return min(streamsPerConnection, max(1, first))
    }

    /// A quarter of a connection's streams, but not fewer than 100 (fewer add a gain too small
    /// to tell from the noise of a window's answers): connections of 400 streams or fewer are
    /// judged in one step.
    static func firstStepStreams(streamsPerConnection: Int) -> Int {
        min(streamsPerConnection, max(minimumFirstStepStreams, streamsPerConnection / trialShareDivisor))
    }
    static let trialShareDivisor = 4
    static let minimumFirstStepStreams = 100

    /// A loop grows only if it was idle at least 1/`spareFractionDivisor` of the time requests
    /// waited for a stream.
    static let spareFractionDivisor: UInt64 = 5
    /// A connection's trial goes on when the rate rose by at least this share of the gain its
    /// streams on trial give where only the round trip limits the rate (those streams ÷ the
    /// streams before it): `trialStreams` at the first step, all its streams at the second.
    static let requiredShareOfGain = 0.5
    /// After a connection that did not raise the rate, no growth for this long; doubled for
    /// each such connection in a row, up to `maxHoldOffNanoseconds`; each spread by `spread`.
    static let firstHoldOffNanoseconds: UInt64 = 30_000_000_000
    static let maxHoldOffNanoseconds: UInt64 = 480_000_000_000
    /// A hold-off is drawn uniformly from ×(1 − spread) … ×(1 + spread) of its doubling value
    /// (22.5–37.5 s for the first): the loops of several daemons sharing one server give up
    /// their trials together (the server, not their streams, sets the pace), and without a
    /// spread they all tried again at the same instant 30 s later.
    static let holdOffSpread = 0.25

    /// `holdOff` placed in its spread by `unitRandom` in [0, 1): 0.5 leaves it as it is.
    static func spread(_ holdOff: UInt64, unitRandom: Double) -> UInt64 {
        let factor = 1 - holdOffSpread + 2 * holdOffSpread * min(max(unitRandom, 0), 1)
        return UInt64((Double(holdOff) * factor).rounded())
    }
    /// No growth: one connection, as many as configured.
    static let fixed = ConnectionGrowth(base: 1, ceiling: 1, streamsPerConnection: 0, delayNanoseconds: 0)
}
