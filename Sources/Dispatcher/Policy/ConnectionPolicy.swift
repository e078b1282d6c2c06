/// The connection and backoff decisions of one event loop, as a plain value: each `handle`
/// takes one event and returns what the loop must do; `admissionLimit` says how many requests
/// may be inside libcurl. No sockets, no clock of its own, so every path is testable.
///
/// Connections are named by libcurl's connection id (`CURLINFO_CONN_ID`), sockets by the
/// descriptor the loop opened for libcurl.
struct ConnectionPolicy: Equatable {
    enum Event: Equatable {
        /// The loop opened a socket for libcurl.
        case connectionOpened
        /// libcurl closed one of the loop's sockets.
        case connectionClosed(socket: Int32)
        /// An HTTP answer arrived on `connection` (libcurl's id, -1 when not known) at `now`.
        case answered(connection: Int64, now: UInt64 = 0)
        /// A response asked for a new connection (IdleTimeout, ExpiredProviderToken,
        /// TooManyProviderTokenUpdates): `connection` on `socket` takes no new stream.
        case retireRequested(connection: Int64, socket: Int32?)
        /// `connection` on `socket` failed at `now` (503 Shutdown, no answer in time): it takes no
        /// new stream, and its replacement waits out a backoff; `unitRandom` in [0, 1) places it.
        case connectionFailed(connection: Int64, socket: Int32?, now: UInt64, unitRandom: Double)
        /// Requests sent on the established `connection` (on `socket`) ended at `now` without an
        /// answer: it was reset or closed, sent a GOAWAY before taking them, or reset their
        /// streams. Unless it ever answered, it failed: it takes no new stream, and its
        /// replacement waits out a backoff; `unitRandom` in [0, 1) places it.
        case connectionLost(connection: Int64, socket: Int32?, now: UInt64, unitRandom: Double)
        /// No transfer remains on (or may still join) the retired `connection`.
        case drained(connection: Int64)
        /// Opening a connection failed at `now`; `unitRandom` in [0, 1) places the backoff.
        case connectFailed(now: UInt64, unitRandom: Double)
        /// The loop is about to wait at `now`: `waiting` when requests wait for a stream (its
        /// queue holds some and libcurl already has as many as the policy admits); `idle`, the
        /// loop's nanoseconds blocked in epoll so far (a running total).
        case beforeWait(now: UInt64, waiting: Bool, idle: UInt64)
    }

    enum Action: Equatable {
        case none
        /// Put nothing more into libcurl until the retired connection's streams have finished.
        case holdAdmissions
        /// Close the drained connection's socket: libcurl finds it closed before any reuse
        /// and opens a new one for the next request.
        case closeRetired(socket: Int32)
        /// The drained connection's socket is not known: the next transfer opens a fresh
        /// connection, and libcurl closes the oldest idle one to stay within the limit.
        case freshConnect
        /// A connection failed: open none for `delayMilliseconds`. `startsRun` for the first
        /// failure in a row (announce it once); `handsBack` from the third: hand requests waiting
        /// unsent back to the caller instead of keeping them behind ever longer backoffs.
        case backOff(delayMilliseconds: Int, failures: Int, startsRun: Bool, handsBack: Bool)
        /// Answers came for long enough after a run of `failures` failed connections.
        case backoffEnded(failures: Int)
        /// Let libcurl hold this many connections (`CURLMOPT_MAX_HOST_CONNECTIONS`): raised by
        /// one when requests have waited for a stream long enough, lowered as connections close.
        case setConnectionLimit(Int)
        /// Let libcurl hold this many connections again: the one added last did not raise the
        /// rate. It stays open and carries part of the streams still admitted (libcurl closes it
        /// once idle past `idleCloseSeconds`); what is admitted is back to the connections before.
        case undoGrowth(connectionLimit: Int)
        /// The connection added last raised the rate enough: it stays, and `connections` with it.
        case growthKept(connections: Int)
    }

    /// How a grown connection was judged: the answer rates before and after it, and, when it was
    /// given up, how long no growth is tried (what the loop reports with `growthKept`/`undoGrowth`).
    struct GrowthVerdict: Equatable {
        var kept: Bool
        /// Connections the loop holds after the verdict.
        var connections: Int
        var rateBefore: Double
        var rateAfter: Double
        /// The rate the connection had to reach to be kept.
        var rateRequired: Double
        var holdOffNanoseconds: UInt64
    }

    let growth: ConnectionGrowth
    /// Connections libcurl may hold now: `growth.base` … `growth.ceiling`.
    private(set) var connectionLimit: Int
    /// Since when requests have waited for a stream without a break; nil while none wait.
    private(set) var waitingSince: UInt64?
    /// The loop's idle total when the wait began.
    private(set) var idleAtWaitStart: UInt64 = 0
    private(set) var openConnections = 0
    /// A connection was opened and no answer has arrived since, so its SETTINGS are unknown:
    /// libcurl assumes 100 streams while APNs may allow 1 at first and refuse the rest.
    private(set) var cold = false
    /// Set when a connection is to be opened beyond those carrying streams (grown, or replacing
    /// a retired one): the highest connection id that had answered then. Until a connection
    /// above it answers, one request more than the others carry is let in: everything admitted
    /// at once waited in libcurl for the new connection and went on it before the server's
    /// SETTINGS were read, and APNs (token connections start at one stream) refuses all but
    /// the first, for which libcurl closes the whole connection and sends them again.
    private(set) var opensAbove: Int64?
    /// The highest connection id an answer arrived on.
    private(set) var newestAnswered: Int64 = -1
    /// Failed connections in a row and the backoff they impose.
    private(set) var failureRun: FailureRun
    var consecutiveFailures: Int { failureRun.failures }
    /// Retired connections still carrying streams, with their sockets where known.
    private(set) var retiring: [Int64: Int32?] = [:]
    /// Connection ids already retired; libcurl never reuses an id, so a late event for one is ignored.
    private var retired: Set<Int64> = []
    /// Connections an answer arrived on (the most recent ones), and the last of them, which
    /// most answers come on, so that the common answer costs one comparison.
    private(set) var answeredConnections = RecentSet(capacity: 256)
    private var lastAnswered: Int64 = -1
    /// Answers so far (HTTP answers of any status): what the growth verdicts count.
    private(set) var answers = 0
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
    /// The hold-off the next connection that does not raise the rate imposes.
    private(set) var nextHoldOff: UInt64 = ConnectionGrowth.firstHoldOffNanoseconds

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
    }

    init(backoff: ReconnectBackoff, growth: ConnectionGrowth = .fixed) {
        failureRun = FailureRun(backoff: backoff)
        self.growth = growth
        connectionLimit = growth.base
    }

    /// How many requests may be inside libcurl at `now`, given the loop's configured limit
    /// (its base connections' streams): each connection grown beyond the base adds its streams.
    func admissionLimit(configured: Int, now: UInt64) -> Int {
        if now < failureRun.until || !retiring.isEmpty { return 0 }
        // One at a time while no connection exists or the newest has not answered: the first
        // batch would otherwise be inside libcurl before the server's SETTINGS arrive.
        if cold || openConnections == 0 { return 1 }
        let capacity = configured + (connectionLimit - growth.base) * growth.streamsPerConnection
        if opensAbove != nil { return max(1, capacity - configured / max(1, growth.base) + 1) }
        return capacity - streamsWithheld
    }

    /// Requests the loop's connections may carry, grown ones included, whatever holds
    /// admissions now.
    func streamCapacity(configured: Int) -> Int {
        configured + (connectionLimit - growth.base) * growth.streamsPerConnection - streamsWithheld
    }

    /// The streams of the connection on trial that it does not carry until it is kept.
    private var streamsWithheld: Int {
        guard let trial, !trial.carriesAll else { return 0 }
        return growth.streamsPerConnection - growth.trialStreams
    }

    /// When a backoff holds admissions, the time it ends.
    func backoffDeadline(now: UInt64) -> UInt64? { failureRun.until > now ? failureRun.until : nil }

    /// Whether a connection may be opened at `now`: not during a backoff. Admissions stop new
    /// requests; this also stops libcurl, which on its own sends a request again on a new
    /// connection when the one it went on was reset or refused its stream.
    func mayOpenConnection(now: UInt64) -> Bool { now >= failureRun.until }

    /// An answer's status line arrived on `connection`. The loop says so from libcurl's header
    /// callback, before the transfer finishes: a GOAWAY read with the connection's first
    /// answers makes libcurl send the refused requests again at once, and their connection
    /// must then already count as one that answered.
    mutating func noteAnswer(on connection: Int64) {
        guard connection != lastAnswered else { return }
        lastAnswered = connection
        if connection >= 0 { _ = answeredConnections.insert(connection) }
    }

    /// Whether an answer ever arrived on `connection`. One older than every connection
    /// remembered is taken to have answered: only a connection that has answered lives that long.
    func hasAnswered(_ connection: Int64) -> Bool {
        connection == lastAnswered || answeredConnections.contains(connection) || connection <= answeredConnections.forgotten
    }

    mutating func handle(_ event: Event) -> Action {
        switch event {
        case .connectionOpened:
            openConnections += 1
            cold = true
            return .none
        case .connectionClosed(let socket):
            openConnections = max(0, openConnections - 1)
            // What was measured no longer matches the connections open: a trial measures again.
            trial?.settlesAt = nil
            trial?.measuringSince = nil
            waitingRate = nil
            rateWindow = nil
            // The retired connection is gone by itself (and its descriptor number may be reused:
            // it must never be closed later).
            for (connection, known) in retiring where known == socket { retiring.removeValue(forKey: connection) }
            // A grown connection libcurl let go (idle past `idleCloseSeconds`, or lost) is not
            // kept as room: the limit follows what is open, never below the base.
            let limit = max(growth.base, min(connectionLimit, openConnections))
            guard limit != connectionLimit else { return .none }
            // The connection on trial (or one before it) is gone: the limit follows what is open.
            trial = nil
            connectionLimit = limit
            opensAbove = nil
            waitingSince = nil
            return .setConnectionLimit(limit)
        case .answered(let connection, let now):
            answers &+= 1
            cold = false
            noteAnswer(on: connection)
            newestAnswered = max(newestAnswered, connection)
            if let above = opensAbove, connection > above { opensAbove = nil }
            if case .ended(let failures) = failureRun.handle(.answered(now: now)) { return .backoffEnded(failures: failures) }
            return .none
        case .retireRequested(let connection, let socket):
            guard retire(connection, socket: socket) else { return retiring.isEmpty ? .none : .holdAdmissions }
            return .holdAdmissions
        case .connectionFailed(let connection, let socket, let now, let unitRandom):
            // One failed connection is one failure, however many of its streams report it; one
            // whose id is not known (it never connected) counts each time.
            if connection >= 0, !retire(connection, socket: socket) { return retiring.isEmpty ? .none : .holdAdmissions }
            return backOff(failureRun.handle(.failed(now: now, unitRandom: unitRandom)))
        case .connectionLost(let connection, let socket, let now, let unitRandom):
            // A connection that answered and then ended (a GOAWAY, an idle close, a reset) did
            // its work; its unanswered requests simply go again. One that never answered is a
            // failed connection, once however many of its streams report it, whether it was
            // reset, closed or reset every stream it was sent.
            guard connection >= 0, !hasAnswered(connection) else { return .none }
            guard retire(connection, socket: socket) else { return retiring.isEmpty ? .none : .holdAdmissions }
            return backOff(failureRun.handle(.failed(now: now, unitRandom: unitRandom)))
        case .drained(let connection):
            guard let socket = retiring.removeValue(forKey: connection) else { return .none }
            opensAbove = newestAnswered
            if let socket { return .closeRetired(socket: socket) }
            return .freshConnect
        case .connectFailed(let now, let unitRandom):
            return backOff(failureRun.handle(.failed(now: now, unitRandom: unitRandom)))
        case .beforeWait(let now, let waiting, let idle):
            guard growth.judgedOverNanoseconds > 0, let verdict = measure(now: now, waiting: waiting) else {
                return considerGrowth(now: now, waiting: waiting, idle: idle)
            }
            // A kept connection: the wait for the next one starts with this pass (no growth comes
            // of it, since none was waited for during the trial).
            if case .growthKept = verdict { _ = considerGrowth(now: now, waiting: waiting, idle: idle) }
            return verdict
        }
    }

    /// One more connection when requests have waited for a stream long enough on a healthy loop
    /// with time to spare.
    private mutating func considerGrowth(now: UInt64, waiting: Bool, idle: UInt64) -> Action {
        guard waiting else {
            waitingSince = nil
            return .none
        }
        // Grow one connection at a time, only on a healthy loop: not while the newest has
        // not answered (its streams are not known yet), a connection is being retired, or
        // connects fail. Judged growth: not while a connection is on trial or one that did
        // not raise the rate holds growth off, and only against the rate of the last window.
        let judged = growth.judgedOverNanoseconds > 0
        guard connectionLimit < growth.ceiling, !cold, opensAbove == nil, retiring.isEmpty, failureRun.failures == 0,
              openConnections >= connectionLimit, trial == nil, now >= growthHeldUntil, !judged || waitingRate != nil else {
            waitingSince = nil
            return .none
        }
        guard let since = waitingSince else {
            waitingSince = now
            idleAtWaitStart = idle
            return .none
        }
        guard now >= since + growth.delayNanoseconds else { return .none }
        // Streams are what limits the rate only if the loop had time to spare while requests
        // waited for them (it waited for answers). A loop busy all along is limited by its CPU
        // (or the server's): another connection would add memory and no throughput.
        let spare = idle &- idleAtWaitStart
        guard spare >= (now - since) / ConnectionGrowth.spareFractionDivisor else {
            waitingSince = now
            idleAtWaitStart = idle
            return .none
        }
        if judged, let baseline = waitingRate {
            trial = GrowthTrial(baseline: baseline, streamsBefore: streamCapacity(configured: growth.baseStreams))
        }
        // A connection given up earlier (`undoGrowth`) and still open takes the new streams:
        // libcurl opens none, and its SETTINGS are known.
        let opensOne = openConnections <= connectionLimit
        connectionLimit += 1
        waitingSince = nil
        opensAbove = opensOne ? newestAnswered : nil
        return .setConnectionLimit(connectionLimit)
    }

    /// Runs the rate window and judges a grown connection in two steps. It first carries a
    /// quarter of its streams (`ConnectionGrowth.trialStreams`); when the rate over a window after
    /// it answered rose by `ConnectionGrowth.requiredShareOfGain` of what that quarter adds where
    /// the round trip is all that limits the rate, it carries all its streams and is judged again
    /// on them, and is kept when the rate rose by that share of what all of them add. Else, at
    /// either step, the limit goes back down and growth holds off. On a host whose CPU (or a
    /// server that) sets the pace, a connection adds only memory: about 12 KB per stream, 6 MB
    /// for 500 (docs/dispatcher.md); a trial that ends at its first step costs the quarter, 1.5 MB.
    private mutating func measure(now: UInt64, waiting: Bool) -> Action? {
        let window = growth.judgedOverNanoseconds
        let disturbed = failureRun.failures > 0 || !retiring.isEmpty || cold
        if var current = trial {
            guard let since = current.measuringSince else {
                // Once the new connection has answered (its streams known and in use) and they settled.
                if opensAbove != nil || disturbed {
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
                return nil
            }
            if disturbed {
                current.settlesAt = nil
                current.measuringSince = nil
                current.waitedThroughout = true
                trial = current
                return nil
            }
            current.waitedThroughout = current.waitedThroughout && waiting
            trial = current
            guard now >= since + window else { return nil }
            let rate = Double(answers &- current.answersAtStart) * 1e9 / Double(now - since)
            trial = nil
            rateWindow = RateWindow(since: now, answersAtStart: answers, waitedThroughout: waiting)
            let added = current.carriesAll ? growth.streamsPerConnection : growth.trialStreams
            let gain = Double(added) / Double(max(1, current.streamsBefore))
            let required = current.baseline * (1 + ConnectionGrowth.requiredShareOfGain * gain)
            if rate >= required, added < growth.streamsPerConnection {
                // Its share raised the rate: now all its streams, judged again against the same baseline.
                trial = GrowthTrial(baseline: current.baseline, streamsBefore: current.streamsBefore, carriesAll: true)
                return nil
            }
            if rate >= required {
                waitingRate = current.waitedThroughout ? rate : nil
                nextHoldOff = ConnectionGrowth.firstHoldOffNanoseconds
                lastVerdict = GrowthVerdict(kept: true, connections: connectionLimit, rateBefore: current.baseline,
                                            rateAfter: rate, rateRequired: required, holdOffNanoseconds: 0)
                return .growthKept(connections: connectionLimit)
            }
            waitingRate = nil
            waitingSince = nil
            growthHeldUntil = now + nextHoldOff
            connectionLimit = max(growth.base, connectionLimit - 1)
            lastVerdict = GrowthVerdict(kept: false, connections: connectionLimit, rateBefore: current.baseline,
                                        rateAfter: rate, rateRequired: required, holdOffNanoseconds: nextHoldOff)
            nextHoldOff = min(ConnectionGrowth.maxHoldOffNanoseconds, nextHoldOff * 2)
            return .undoGrowth(connectionLimit: connectionLimit)
        }
        guard var current = rateWindow, !disturbed else {
            rateWindow = disturbed ? nil : RateWindow(since: now, answersAtStart: answers, waitedThroughout: waiting)
            if disturbed { waitingRate = nil }
            return nil
        }
        current.waitedThroughout = current.waitedThroughout && waiting
        guard now >= current.since + window else {
            rateWindow = current
            return nil
        }
        // Only the last window counts: an older rate says little of the host's load now.
        waitingRate = current.waitedThroughout ? Double(answers &- current.answersAtStart) * 1e9 / Double(now - current.since) : nil
        rateWindow = RateWindow(since: now, answersAtStart: answers, waitedThroughout: waiting)
        return nil
    }

    /// Marks `connection` retired; false when it already was (or has no id).
    private mutating func retire(_ connection: Int64, socket: Int32?) -> Bool {
        guard connection >= 0, !retired.contains(connection) else { return false }
        retired.insert(connection)
        if retired.count > 256 { retired.remove(retired.min()!) }
        retiring[connection] = socket
        return true
    }

    private func backOff(_ action: FailureRun.Action) -> Action {
        guard case .backOff(_, let delay, let failures, let startsRun, let handsBack) = action else { return .none }
        return .backOff(delayMilliseconds: delay, failures: failures, startsRun: startsRun, handsBack: handsBack)
    }
}

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
    /// each such connection in a row, up to `maxHoldOffNanoseconds`.
    static let firstHoldOffNanoseconds: UInt64 = 30_000_000_000
    static let maxHoldOffNanoseconds: UInt64 = 480_000_000_000
    /// No growth: one connection, as many as configured.
    static let fixed = ConnectionGrowth(base: 1, ceiling: 1, streamsPerConnection: 0, delayNanoseconds: 0)
}
