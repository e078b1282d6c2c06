/// Judged connection growth of one event loop (`ConnectionGrowth.judgedOverNanoseconds` > 0), as a
/// plain value inside `ConnectionPolicy`: the answer rate while requests wait for a stream, the
/// connection on trial, its verdict, and the hold-off after one that did not raise the rate. The
/// policy tells it what the loop's connections are doing; it owns no connection itself.
struct GrowthJudge: Equatable {
    let growth: ConnectionGrowth
    /// The running rate window (`growth.judgedOverNanoseconds`), and the answers at its start.
    private(set) var rateWindow: RateWindow?
    /// Answers per second over the last whole window in which requests waited for a stream
    /// throughout, at the connection limit now; nil when none was measured since the limit changed.
    private(set) var waitingRate: Double?
    /// A grown connection being judged.
    private(set) var trial: GrowthTrial?
    /// No growth before this time: the last connection added did not raise the rate.
    private(set) var growthHeldUntil: UInt64 = 0
    /// The last verdict on a grown connection.
    private(set) var lastVerdict: GrowthVerdict?
    /// The last trial started: what the loop reports when it adds the connection.
    private(set) var lastStart: GrowthStart?
    /// The hold-off the next connection that does not raise the rate imposes, before its spread.
    private(set) var nextHoldOff: UInt64 = ConnectionGrowth.firstHoldOffNanoseconds
    /// Places each hold-off in its spread (`ConnectionGrowth.holdOffSpread`).
    private(set) var holdOffRandom: UnitRandom
    /// The last connection added was kept and requests have waited for a stream ever since, on
    /// every pass (the rate the next is judged against is still `waitingRate`): the streams, not the CPU, were the limit
    /// one connection ago, so the next one carries all its streams from the start and is judged
    /// in one step (`ConnectionGrowth.trialStreams` is for a first growth, or one after a verdict
    /// that did not keep its connection).
    private(set) var followsKept = false

    struct RateWindow: Equatable {
        var since: UInt64
        var answersAtStart: Int
        /// Every `beforeWait` in the window found requests waiting for a stream.
        var waitedThroughout: Bool
    }

    /// A connection added at `streamsBefore` streams when requests waited for them and the
    /// rate was `baseline`; measured from `settlesAt`, the growth delay after its first answer
    /// (the streams admitted then answer a round trip later), and judged a window after.
    struct GrowthTrial: Equatable {
        var baseline: Double
        var streamsBefore: Int
        /// The connection carries all its streams: its trial share raised the rate, and it is
        /// judged again on all of them. False while it carries `ConnectionGrowth.trialStreams`.
        var carriesAll = false
        var settlesAt: UInt64?
        var measuringSince: UInt64?
        var answersAtStart = 0
        var waitedThroughout = true
        /// Since when the loop has had nothing in libcurl and nothing queued.
        var outOfWorkSince: UInt64?
    }

    /// A connection put on trial: the connections before and with it, the rate it is judged
    /// against, how long requests had waited for a stream, and the streams it carries at first.
    struct GrowthStart: Equatable {
        var connectionsBefore: Int
        var connections: Int
        var rateBefore: Double
        var waitedNanoseconds: UInt64
        var streamsOnTrial: Int
    }

    /// How a grown connection was judged: the answer rates before and after it, and, when it was
    /// given up, how long no growth is tried (what the loop reports with `growthKept`/`undoGrowth`).
    /// A trial that ended before it could be judged is `abandoned`, with why; its `rateAfter` is
    /// what the window measured so far (0 when it had not begun), and it holds nothing off.
    struct GrowthVerdict: Equatable {
        var kept: Bool
        var abandoned: ConnectionGrowthAbandonment? = nil
        /// Connections the loop holds after the verdict.
        var connections: Int
        var rateBefore: Double
        var rateAfter: Double
        /// The rate the connection had to reach to be kept.
        var rateRequired: Double
        var holdOffNanoseconds: UInt64
    }

    /// What a measuring pass decided.
    enum Outcome: Equatable {
        case none
        /// The connection on trial stays, with the connections the loop holds now.
        case kept
        /// The connection on trial did not raise the rate: the loop goes back to `connectionLimit`.
        case givenUp(connectionLimit: Int)
        /// The trial ended unjudged (`lastVerdict.abandoned` says why): back to `connectionLimit`.
        case abandoned(connectionLimit: Int)
    }

    init(growth: ConnectionGrowth, holdOffRandom: UnitRandom = .fixed(0.5)) {
        self.growth = growth
        self.holdOffRandom = holdOffRandom
    }

    /// Whether a connection may be added at `now` for what was judged: none on trial, no
    /// hold-off, and a rate measured to judge it against.
    func allowsGrowth(now: UInt64) -> Bool {
        trial == nil && now >= growthHeldUntil && waitingRate != nil
    }

    /// The loop adds a connection to `connectionsBefore`, at `streamsBefore` streams, after
    /// requests waited `waitedNanoseconds` for one: it goes on trial against the rate measured
    /// while requests waited.
    mutating func startTrial(streamsBefore: Int, connectionsBefore: Int, waitedNanoseconds: UInt64) {
        guard let baseline = waitingRate else { return }
        trial = GrowthTrial(baseline: baseline, streamsBefore: streamsBefore, carriesAll: followsKept)
        lastStart = GrowthStart(connectionsBefore: connectionsBefore, connections: connectionsBefore + 1, rateBefore: baseline,
                                waitedNanoseconds: waitedNanoseconds,
                                streamsOnTrial: followsKept ? growth.streamsPerConnection : growth.trialStreams)
        followsKept = false
    }

    /// While a trial is open and the loop out of work: when its trial ends for that unless work
    /// comes (the loop must wake by then, for nothing else may wake it).
    var trialDeadline: UInt64? {
        trial?.outOfWorkSince.map { $0 + growth.delayNanoseconds }
    }

    /// Ends the trial unjudged for `reason` at `now`, the loop going back to `connections`; false
    /// when none was open. No hold-off follows, and the next one waits for a new rate, measured
    /// at the connections the loop then has.
    mutating func abandonTrial(_ reason: ConnectionGrowthAbandonment, now: UInt64, answers: Int, connections: Int) -> Bool {
        guard let current = trial else { return false }
        trial = nil
        waitingRate = nil
        rateWindow = nil
        followsKept = false
        var rate = 0.0
        if let since = current.measuringSince, now > since { rate = Double(answers &- current.answersAtStart) * 1e9 / Double(now - since) }
        lastVerdict = GrowthVerdict(kept: false, abandoned: reason, connections: connections, rateBefore: current.baseline,
                                    rateAfter: rate, rateRequired: required(for: current), holdOffNanoseconds: 0)
        return true
    }

    /// The rate `trial` must reach at its step to go on.
    private func required(for trial: GrowthTrial) -> Double {
        let added = trial.carriesAll ? growth.streamsPerConnection : growth.trialStreams
        let gain = Double(added) / Double(max(1, trial.streamsBefore))
        return trial.baseline * (1 + ConnectionGrowth.requiredShareOfGain * gain)
    }

    /// A connection closed: what was measured no longer matches the connections open, and a
    /// trial measures again.
    mutating func connectionClosed() {
        trial?.settlesAt = nil
        trial?.measuringSince = nil
        waitingRate = nil
        rateWindow = nil
        followsKept = false
    }

    /// Runs the rate window and judges a grown connection in two steps. It first carries a
    /// quarter of its streams (`ConnectionGrowth.trialStreams`); when the rate over a window after
    /// it answered rose by `ConnectionGrowth.requiredShareOfGain` of what that quarter adds where
    /// the round trip is all that limits the rate, it carries all its streams and is judged again
    /// on them, and is kept when the rate rose by that share of what all of them add. Else, at
    /// either step, the limit goes back down and growth holds off. On a host whose CPU (or a
    /// server that) sets the pace, a connection adds only memory: about 12 KB per stream, 6 MB
    /// for 500 (docs/dispatcher.md); a trial that ends at its first step costs the quarter, 1.5 MB.
    /// A connection added right after a kept one (`followsKept`) is judged in one step on all
    /// its streams: the quarter step cost each growth of a far drain 1.25 s at the lower rate.
    ///
    /// `answers` is the loop's running total; `disturbed` while connections fail, one is retired
    /// or the newest has not answered; `newConnectionPending` until the connection added has
    /// answered; `hasWork` while the loop has requests in libcurl or queued. A trial whose loop
    /// has been out of work for the growth delay is abandoned: no answers come to judge it by (a
    /// drain ended, or the loop's share of it), and the loop may sleep until work comes again.
    mutating func measure(now: UInt64, waiting: Bool, answers: Int, disturbed: Bool, newConnectionPending: Bool,
                          connectionLimit: Int, hasWork: Bool = true) -> Outcome {
        let window = growth.judgedOverNanoseconds
        if var current = trial {
            if hasWork {
                current.outOfWorkSince = nil
            } else if let since = current.outOfWorkSince, now >= since + growth.delayNanoseconds {
                let limit = max(growth.base, connectionLimit - 1)
                _ = abandonTrial(.workRanOut, now: now, answers: answers, connections: limit)
                return .abandoned(connectionLimit: limit)
            } else if current.outOfWorkSince == nil {
                current.outOfWorkSince = now
            }
            guard let since = current.measuringSince else {
                // Once the new connection has answered (its streams known and in use) and they settled.
                if newConnectionPending || disturbed {
                    current.settlesAt = nil
                } else if let settles = current.settlesAt {
                    if now >= settles {
                        current.measuringSince = now
                        current.answersAtStart = answers
                    }
                } else {
                    current.settlesAt = now + growth.delayNanoseconds
                }
                trial = current
                return .none
            }
            if disturbed {
                current.settlesAt = nil
                current.measuringSince = nil
                current.waitedThroughout = true
                trial = current
                return .none
            }
            current.waitedThroughout = current.waitedThroughout && waiting
            trial = current
            guard now >= since + window else { return .none }
            let rate = Double(answers &- current.answersAtStart) * 1e9 / Double(now - since)
            trial = nil
            rateWindow = RateWindow(since: now, answersAtStart: answers, waitedThroughout: waiting)
            let added = current.carriesAll ? growth.streamsPerConnection : growth.trialStreams
            let required = required(for: current)
            if rate >= required, added < growth.streamsPerConnection {
                // Its share raised the rate: now all its streams, judged again against the same baseline.
                trial = GrowthTrial(baseline: current.baseline, streamsBefore: current.streamsBefore, carriesAll: true)
                return .none
            }
            if rate >= required {
                waitingRate = current.waitedThroughout ? rate : nil
                followsKept = current.waitedThroughout
                nextHoldOff = ConnectionGrowth.firstHoldOffNanoseconds
                lastVerdict = GrowthVerdict(kept: true, connections: connectionLimit, rateBefore: current.baseline,
                                            rateAfter: rate, rateRequired: required, holdOffNanoseconds: 0)
                return .kept
            }
            waitingRate = nil
            followsKept = false
            let holdOff = ConnectionGrowth.spread(nextHoldOff, unitRandom: holdOffRandom.next())
            growthHeldUntil = now + holdOff
            let limit = max(growth.base, connectionLimit - 1)
            lastVerdict = GrowthVerdict(kept: false, connections: limit, rateBefore: current.baseline,
                                        rateAfter: rate, rateRequired: required, holdOffNanoseconds: holdOff)
            nextHoldOff = min(ConnectionGrowth.maxHoldOffNanoseconds, nextHoldOff * 2)
            return .givenUp(connectionLimit: limit)
        }
        // A break in the waiting ends what the last kept connection said of the streams.
        if !waiting { followsKept = false }
        guard var current = rateWindow, !disturbed else {
            rateWindow = disturbed ? nil : RateWindow(since: now, answersAtStart: answers, waitedThroughout: waiting)
            if disturbed {
                waitingRate = nil
                followsKept = false
            }
            return .none
        }
        current.waitedThroughout = current.waitedThroughout && waiting
        guard now >= current.since + window else {
            rateWindow = current
            return .none
        }
        // Only the last window counts: an older rate says little of the host's load now.
        waitingRate = current.waitedThroughout ? Double(answers &- current.answersAtStart) * 1e9 / Double(now - current.since) : nil
        if waitingRate == nil { followsKept = false }
        rateWindow = RateWindow(since: now, answersAtStart: answers, waitedThroughout: waiting)
        return .none
    }
}
