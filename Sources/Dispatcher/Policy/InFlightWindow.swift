/// How many requests a bulk loop lets into libcurl: the fewest that give the full rate.
///
/// Each transfer inside libcurl costs memory (its state and HTTP/2 stream buffers, 13–19 KB)
/// and CPU (libcurl runs every transfer on a connection for each read of its socket), while
/// the rate is in flight ÷ round trip only as long as the round trip, not the CPU, sets the
/// pace. On loopback a few hundred give the rate a thousand give; 150 ms away thousands are
/// needed. So the limit climbs the throughput curve (docs/dispatcher.md, "Adaptive in-flight
/// limit"): measured at one limit, it tries a quarter less and keeps that when the rate holds
/// within `shrinkTolerance`; when work waited for the window it tries more and keeps that when
/// the rate rose by `growthGain`. A probe that fails is tried again after twice as many samples.
///
/// Little's law guards both ways: the rate × the least round trip of a period is what the
/// pipe to the server holds without any queue, and the limit is never tried below `headroom`
/// times that, while a limit under it is doubled (until a larger one first failed): a far
/// server gets its window in a few periods, and noise on a busy host cannot talk it down.
///
/// A plain value: the loop hands it one `Sample` per period and applies the limit it returns.
struct InFlightWindow: Equatable {
    /// What a loop saw over one period.
    struct Sample: Equatable {
        var answers: Int
        var nanoseconds: UInt64
        /// Requests waited in the loop's queue while libcurl held all it was allowed.
        var waited: Bool
        /// Something other than the window held requests back (no connection yet, a backoff, a
        /// retiring connection): the rate says nothing about the window.
        var disturbed: Bool = false
        var meanRoundTrip: UInt64
        var minimumRoundTrip: UInt64
        /// Requests the open connections' streams carry at most now.
        var capacity: Int
        /// Most requests inside libcurl at once.
        var peakInFlight: Int

        var rate: Double { nanoseconds == 0 ? 0 : Double(answers) * 1e9 / Double(nanoseconds) }
    }

    struct Decision: Equatable {
        var limit: Int
        /// The limit settled (a first probe failed) or moved far from the one last reported:
        /// worth a log line, unlike every probe.
        var notable: Bool
    }

    private struct Probe: Equatable {
        var from: Int
        var reference: Double
        var growing: Bool
        /// Samples the judgement waited for connections to open (a larger limit needs streams).
        var waitedForCapacity = 0
    }

    let floor: Int
    let ceiling: Int
    private(set) var limit: Int
    /// Answers per second at `limit`, smoothed.
    private(set) var reference: Double = 0
    private var measured = 0
    private var probe: Probe?
    /// Samples still to drop: the first one after a change mixes both limits.
    private var skip = 0
    private var samplesSinceShrink = 0
    private var samplesSinceGrowth = 0
    private(set) var shrinkEvery = Self.firstProbeInterval
    private(set) var growEvery = Self.firstProbeInterval
    private var idleSamples = 0
    private(set) var settled = false
    private var growthFailed = false
    private var reported: Int

    static let shrinkTolerance = 0.05
    static let growthGain = 0.08
    static let chainedGrowthGain = 0.15
    static let headroom = 2.0
    static let firstProbeInterval = 2
    static let longestProbeInterval = 32
    /// Samples without work waiting before the limit follows what was used.
    static let idleSamplesBeforeShrink = 4

    init(floor: Int, ceiling: Int, initial: Int) {
        self.floor = max(1, min(floor, ceiling))
        self.ceiling = max(1, ceiling)
        limit = max(self.floor, min(initial, self.ceiling))
        reported = limit
    }

    /// An answer came a round trip longer than a sample period after its request, while work
    /// waited for the window: periods of two round trips would take many seconds to open the
    /// window, so until a larger limit first failed it grows by one per such answer (twice per
    /// round trip), as TCP's slow start does. Answers from a near server never do this.
    mutating func answeredAfterLongRoundTrip() {
        guard !growthFailed, probe == nil, limit < ceiling else { return }
        limit += 1
    }

    mutating func sampled(_ sample: Sample) -> Decision {
        if skip > 0 {
            skip -= 1
            return keep()
        }
        if sample.disturbed { return keep() }
        guard sample.waited else { return notWaited(sample) }
        idleSamples = 0
        let rate = sample.rate
        if let probe { return judge(probe, rate: rate, sample: sample) }
        // The rate fell well below what this limit gave (the round trip grew, or the host got
        // busier) while work waits: a larger limit is tried at once, not after the back-off.
        if measured > 0, rate < reference * (1 - 2 * Self.shrinkTolerance) { samplesSinceGrowth = growEvery }
        reference = measured == 0 ? rate : (reference + rate) / 2
        measured += 1
        samplesSinceShrink += 1
        samplesSinceGrowth += 1
        guard measured >= 2 else { return keep() }
        if limit < ceiling, samplesSinceGrowth >= growEvery || Double(limit) < Self.needed(sample) && !growthFailed {
            return grow(sample)
        }
        if limit > floor, samplesSinceShrink >= shrinkEvery {
            let target = limit - max(1, limit / 4)
            if Double(target) >= Self.needed(sample) { return change(to: target, growing: false) }
            samplesSinceShrink = 0
        }
        return keep()
    }

    private mutating func judge(_ current: Probe, rate: Double, sample: Sample) -> Decision {
        if current.growing {
            // More in flight than the open connections carry waits for growth to open one.
            if sample.capacity < limit, current.waitedForCapacity < 4 {
                probe?.waitedForCapacity += 1
                return keep()
            }
            probe = nil
            if rate >= current.reference * (1 + Self.growthGain) {
                growEvery = Self.firstProbeInterval
                samplesSinceGrowth = 0
                samplesSinceShrink = 0
                reference = rate
                measured = 1
                // Far more than noise: the window held the rate, so the next step goes at once.
                if rate >= current.reference * (1 + Self.chainedGrowthGain), limit < ceiling { return grow(sample) }
                return keep()
            }
            settled = true
            growthFailed = true
            growEvery = min(Self.longestProbeInterval, growEvery * 2)
            samplesSinceGrowth = 0
            return revert(to: current.from)
        }
        probe = nil
        if rate >= current.reference * (1 - Self.shrinkTolerance) {
            shrinkEvery = Self.firstProbeInterval
            samplesSinceShrink = 0
            // Judged against the larger limit's rate until measured here: small losses do not add up.
            reference = current.reference
            measured = 1
            return keep()
        }
        settled = true
        shrinkEvery = min(Self.longestProbeInterval, shrinkEvery * 2)
        samplesSinceShrink = 0
        return revert(to: current.from)
    }

    /// The window held nothing back: its size did not set the rate. A probe proved nothing;
    /// after a while the limit follows what was used, with room for twice as much.
    private mutating func notWaited(_ sample: Sample) -> Decision {
        if let current = probe {
            probe = nil
            measured = 0
            // A larger limit nobody used goes back; a smaller one that held everything stays.
            if current.growing, sample.peakInFlight <= current.from { return revert(to: current.from) }
            return keep()
        }
        idleSamples += 1
        guard idleSamples >= Self.idleSamplesBeforeShrink else { return keep() }
        idleSamples = 0
        let used = max(floor, min(limit, sample.peakInFlight * 2))
        guard used < limit else { return keep() }
        measured = 0
        limit = used
        return decision()
    }

    /// What the pipe holds at this rate without a queue, with `headroom`.
    static func needed(_ sample: Sample) -> Double {
        sample.rate * Double(sample.minimumRoundTrip) / 1e9 * headroom
    }

    /// Twice the limit until a larger one first failed, while the round trips show no queue
    /// (the window holds the rate back: a far server); a quarter more otherwise, so that probes
    /// above a limit found once cost little memory.
    private mutating func grow(_ sample: Sample) -> Decision {
        let windowBound = Double(limit) < Self.needed(sample)
        return change(to: windowBound && !growthFailed ? limit * 2 : limit + max(1, limit / 4), growing: true)
    }

    private mutating func change(to target: Int, growing: Bool) -> Decision {
        let bounded = max(floor, min(ceiling, target))
        guard bounded != limit else { return keep() }
        probe = Probe(from: limit, reference: reference, growing: growing)
        limit = bounded
        skip = 1
        return keep()
    }

    private mutating func revert(to previous: Int) -> Decision {
        limit = previous
        skip = 1
        measured = 1
        return decision()
    }

    private mutating func keep() -> Decision { decision() }

    /// Notable once the limit first settles, and whenever it is outside half to twice the
    /// one last reported.
    private mutating func decision() -> Decision {
        guard probe == nil else { return Decision(limit: limit, notable: false) }
        let far = limit * 2 <= reported || limit >= reported * 2
        let first = settled && reported > 0 && !reportedSettled
        guard far || first else { return Decision(limit: limit, notable: false) }
        reported = limit
        reportedSettled = reportedSettled || settled
        return Decision(limit: limit, notable: true)
    }

    private var reportedSettled = false
}
