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
        /// streams. If it never answered, or churned (`ConnectionChurn`: a few answers, then
        /// lost, again and again), it failed: it takes no new stream, and its replacement waits
        /// out a backoff; `unitRandom` in [0, 1) places it. `endedAt`: when it ended, if before
        /// `now` (a connection ended in order is judged at its last answer, its backoff from now).
        case connectionLost(connection: Int64, socket: Int32?, now: UInt64, unitRandom: Double, endedAt: UInt64? = nil)
        /// No transfer remains on (or may still join) the retired `connection`; `closedBefore`
        /// when libcurl had closed it before it was judged (`ConnectionChurn.endedInOrder`).
        case drained(connection: Int64, closedBefore: Bool = false)
        /// Opening a connection failed at `now`; `unitRandom` in [0, 1) places the backoff.
        case connectFailed(now: UInt64, unitRandom: Double)
        /// The loop is about to wait at `now`: `waiting` when requests wait for a stream (its
        /// queue holds some and libcurl already has as many as the policy admits); `idle`, the
        /// loop's nanoseconds blocked in epoll so far (a running total); `hasWork` while requests
        /// are in libcurl or in the loop's queue.
        case beforeWait(now: UInt64, waiting: Bool, idle: UInt64, hasWork: Bool = true)
        /// The loop stops (the engine shuts down) at `now`.
        case stopped(now: UInt64)
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
        /// Judged growth: as `setConnectionLimit`, and the connection added goes on trial
        /// (`lastStart` says against what).
        case growthStarted(connectionLimit: Int)
        /// The trial ended before it could be judged (`lastVerdict.abandoned` says why): let libcurl
        /// hold this many connections, as after `undoGrowth`, but with no hold-off.
        case growthAbandoned(connectionLimit: Int)
    }

    typealias GrowthVerdict = GrowthJudge.GrowthVerdict
    typealias GrowthTrial = GrowthJudge.GrowthTrial

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
    /// Set when a connection churned, the first of a streak (`ConnectionChurn`): its id. Until a
    /// connection above it answers, libcurl's own resends of what it left unanswered open no
    /// connection (they come back to the loop's queue) and the loop lets in one request beyond
    /// what the other connections carry (`opensAbove`). libcurl would put them all on a fresh
    /// connection before its SETTINGS were read, and a server that starts a connection at one
    /// stream (APNs, token connections) answers one and refuses the rest, connection after
    /// connection; sent so, the next connection carries them only once it has answered, and a
    /// loss of it then is the server's doing.
    private(set) var resendsHeldAbove: Int64?
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
    /// How many answers recent connections gave, and when: what tells a churned connection.
    private(set) var churn: ConnectionChurn
    /// Answers so far (HTTP answers of any status): what the growth verdicts count.
    private(set) var answers = 0
    /// The time of the last `beforeWait`: when events without a time of their own happened.
    private var lastPass: UInt64 = 0
    /// Judged growth: the rate measured, the connection on trial, verdicts and hold-offs.
    private(set) var judge: GrowthJudge
    var waitingRate: Double? { judge.waitingRate }
    var trial: GrowthTrial? { judge.trial }
    var growthHeldUntil: UInt64 { judge.growthHeldUntil }
    var lastVerdict: GrowthVerdict? { judge.lastVerdict }
    var lastStart: GrowthJudge.GrowthStart? { judge.lastStart }

    /// `holdOffRandom` places each growth hold-off in its spread; the midpoint by default, so
    /// that a hold-off is exactly 30 s, 60 s, … (the loop seeds it from the system's generator).
    init(backoff: ReconnectBackoff, growth: ConnectionGrowth = .fixed, holdOffRandom: UnitRandom = .fixed(0.5)) {
        failureRun = FailureRun(backoff: backoff)
        churn = ConnectionChurn(longestBackoffMilliseconds: backoff.maxMilliseconds)
        self.growth = growth
        judge = GrowthJudge(growth: growth, holdOffRandom: holdOffRandom)
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
    /// `resend`: for a request libcurl sends again by itself (`resendsHeldAbove`).
    func mayOpenConnection(now: UInt64, resend: Bool = false) -> Bool {
        now >= failureRun.until && !(resend && resendsHeldAbove != nil)
    }

    /// An answer's status line arrived on `connection`. The loop says so from libcurl's header
    /// callback, before the transfer finishes: a GOAWAY read with the connection's first
    /// answers makes libcurl send the refused requests again at once, and their connection
    /// must then already count as one that answered.
    mutating func noteAnswer(on connection: Int64, now: @autoclosure () -> UInt64 = 0) {
        churn.answered(on: connection, heard: true, now: now())
        remember(connection)
    }

    private mutating func remember(_ connection: Int64) {
        guard connection != lastAnswered else { return }
        lastAnswered = connection
        if connection >= 0 { _ = answeredConnections.insert(connection) }
    }

    /// Whether a loss of `connection` needs the policy: it never answered, or it is a recent
    /// connection whose loss was not judged yet. The loop asks before it looks up the
    /// connection's socket, so the many streams of a connection that ended are one look-up.
    func lossNeedsJudging(_ connection: Int64) -> Bool {
        guard connection >= 0 else { return false }
        return !hasAnswered(connection) || (!retired.contains(connection) && churn.awaitsJudgement(connection))
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
            judge.connectionClosed()
            // The retired connection is gone by itself (and its descriptor number may be reused:
            // it must never be closed later).
            for (connection, known) in retiring where known == socket { retiring.removeValue(forKey: connection) }
            // A grown connection libcurl let go (idle past `idleCloseSeconds`, or lost) is not
            // kept as room: the limit follows what is open, never below the base.
            let limit = max(growth.base, min(connectionLimit, openConnections))
            guard limit != connectionLimit else { return .none }
            connectionLimit = limit
            opensAbove = nil
            waitingSince = nil
            // The connection on trial (or one before it) is gone: the limit follows what is open.
            if judge.abandonTrial(.connectionClosed, now: lastPass, answers: answers, connections: limit) {
                return .growthAbandoned(connectionLimit: limit)
            }
            return .setConnectionLimit(limit)
        case .answered(let connection, let now):
            answers &+= 1
            cold = false
            churn.answered(on: connection, heard: false, now: now)
            remember(connection)
            newestAnswered = max(newestAnswered, connection)
            if let above = opensAbove, connection > above { opensAbove = nil }
            if let above = resendsHeldAbove, connection > above { resendsHeldAbove = nil }
            // While connections churn, answers prove nothing (a churning server answers a few on
            // each, a lane's probes included): the run ends once one connection answered enough.
            guard churn.lastChurnedAt == nil else { return .none }
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
        case .connectionLost(let connection, let socket, let now, let unitRandom, let endedAt):
            // A connection that answered enough, or for long enough, and then ended (a GOAWAY, an
            // idle close, a reset) did its work; its unanswered requests simply go again. One
            // that never answered is a failed connection, once however many of its streams
            // report it, whether it was reset, closed or reset every stream it was sent; so is
            // one that churned (`ConnectionChurn`) after another.
            guard connection >= 0 else { return .none }
            if hasAnswered(connection) {
                guard !retired.contains(connection) else { return retiring.isEmpty ? .none : .holdAdmissions }
                switch churn.judgeLoss(of: connection, now: endedAt ?? now) {
                case .healthy, .judged:
                    return .none
                case .firstChurned:
                    // No failure; its requests go again, one on the next connection until it
                    // answers. Unless a newer connection has answered already (a connection
                    // judged after libcurl closed it): that one is the next, and holding until a
                    // connection newer still answers would hold a healthy loop to one request.
                    guard newestAnswered <= connection else { return .none }
                    opensAbove = connection
                    resendsHeldAbove = connection
                    return .none
                case .churned:
                    _ = retire(connection, socket: socket)
                }
            } else {
                guard retire(connection, socket: socket) else { return retiring.isEmpty ? .none : .holdAdmissions }
            }
            return backOff(failureRun.handle(.failed(now: now, unitRandom: unitRandom)))
        case .drained(let connection, let closedBefore):
            guard let socket = retiring.removeValue(forKey: connection) else { return .none }
            // One at a time until a connection newer than every one that answered answers. A
            // connection judged after libcurl closed it (`closedBefore`): not when one newer has
            // answered already, since libcurl sends on that one and may never open a newer (its
            // close, which would have reset the hold, came before).
            if !closedBefore || newestAnswered <= connection { opensAbove = newestAnswered }
            if let socket { return .closeRetired(socket: socket) }
            return .freshConnect
        case .connectFailed(let now, let unitRandom):
            return backOff(failureRun.handle(.failed(now: now, unitRandom: unitRandom)))
        case .beforeWait(let now, let waiting, let idle, let hasWork):
            lastPass = now
            guard growth.judgedOverNanoseconds > 0, let verdict = measure(now: now, waiting: waiting, hasWork: hasWork) else {
                return considerGrowth(now: now, waiting: waiting, idle: idle)
            }
            // A kept connection: the wait for the next one starts with this pass (no growth comes
            // of it, since none was waited for during the trial).
            if case .growthKept = verdict { _ = considerGrowth(now: now, waiting: waiting, idle: idle) }
            return verdict
        case .stopped(let now):
            guard judge.abandonTrial(.stopped, now: now, answers: answers, connections: connectionLimit) else { return .none }
            return .growthAbandoned(connectionLimit: connectionLimit)
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
              openConnections >= connectionLimit, !judged || judge.allowsGrowth(now: now) else {
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
        if judged {
            judge.startTrial(streamsBefore: streamCapacity(configured: growth.baseStreams), connectionsBefore: connectionLimit,
                             waitedNanoseconds: now - since)
        }
        // A connection given up earlier (`undoGrowth`) and still open takes the new streams:
        // libcurl opens none, and its SETTINGS are known.
        let opensOne = openConnections <= connectionLimit
        connectionLimit += 1
        waitingSince = nil
        opensAbove = opensOne ? newestAnswered : nil
        return judged ? .growthStarted(connectionLimit: connectionLimit) : .setConnectionLimit(connectionLimit)
    }

    /// Judged growth's pass: the rate window runs, and a connection on trial may be judged
    /// (`GrowthJudge.measure`).
    private mutating func measure(now: UInt64, waiting: Bool, hasWork: Bool) -> Action? {
        let disturbed = failureRun.failures > 0 || !retiring.isEmpty || cold
        switch judge.measure(now: now, waiting: waiting, answers: answers, disturbed: disturbed,
                             newConnectionPending: opensAbove != nil, connectionLimit: connectionLimit, hasWork: hasWork) {
        case .none:
            return nil
        case .kept:
            return .growthKept(connections: connectionLimit)
        case .givenUp(let limit):
            waitingSince = nil
            connectionLimit = limit
            return .undoGrowth(connectionLimit: limit)
        case .abandoned(let limit):
            waitingSince = nil
            connectionLimit = limit
            return .growthAbandoned(connectionLimit: limit)
        }
    }

    /// When the loop must wake, whatever else it waits for: a trial ends if its loop stays out
    /// of work (`GrowthJudge.trialDeadline`), and nothing else may wake an idle loop.
    func wakeDeadline() -> UInt64? { judge.trialDeadline }

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
