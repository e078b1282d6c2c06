import APNs
internal import CCurl
import Glibc
import Polling
import Locking
import Synchronization

/// One event-loop thread: an epoll loop driving a libcurl multi handle, its own connections
/// and its own pool of easy handles. Requests come in through `inbox`; this type moves them
/// into libcurl, reads what finished and applies `TransferDisposition` and `ConnectionPolicy`.
///
/// Thread rule: the multi handle, the transfers, the backlog and the policy are touched only
/// on this loop's thread (after `init` returns). Other threads reach the loop only through
/// `enqueue`, `stop` and `outstanding` (read).
final class CurlEventLoop: EpollLoopDriver, @unchecked Sendable {
    private struct Inbox {
        var items = RingBuffer<PendingRequest>()
        /// Set once the loop has stopped taking requests; later ones are refused at the door.
        var closed = false
    }

    let configuration: DispatcherConfiguration
    let sink: CompletionSink
    let epoll: EpollLoop
    let multi: CurlMulti
    private let inbox = Lock(Inbox())
    /// Requests accepted and not yet reported. The dispatcher hands each chunk of window slots to
    /// the loop with the fewest: dealt out in turn, the chunks (a quarter of the window each, one
    /// per wake-up of the submitter) kept one loop's backlog full while the other's ran dry.
    let outstanding = Atomic<Int>(0)

    var transfers: [CurlTransfer] = []
    /// libcurl's id of the newest connection a request went on (ids grow as connections are
    /// made): a connection with a higher id was opened after this was read, whatever idles in
    /// libcurl's pool meanwhile (`TransferDisposition`, UnrelatedKeyIdInToken).
    var newestConnectionID: Int64 = -1
    /// Unmapped only after `deinit` has cleaned up every easy handle that may still write to one.
    private let errorBuffers = CurlErrorBuffers()
    var freeTransfers: [Int] = []
    var backlog = RingBuffer<PendingRequest>(capacity: 1024)
    private var drained = RingBuffer<PendingRequest>()
    /// Requests' worth of `drained` kept between wake-ups: more than a wake-up brings in steady state.
    private static let drainedCapacityKept = 1024
    var inCurl = 0
    private let inCurlLimit: Int
    /// `answerDeadlineMilliseconds` and `requestTimeoutMilliseconds` in nanoseconds (0: none).
    let answerDeadlineNanoseconds: UInt64
    let requestTimeoutNanoseconds: UInt64
    /// What the policy and the window admitted at the last refill: requests beyond it wait.
    private var admitted = 0
    /// What the policy alone admitted (the streams): requests beyond it wait for a stream.
    private var streamsAdmitted = 0
    /// The bulk lane's adaptive limit on requests inside libcurl; nil keeps the streams' limit.
    var inFlightSampler: InFlightSampler?
    /// The limit last reported to the metrics hook.
    private var reportedLimit = 0
    /// libcurl's `CURLMOPT_MAX_HOST_CONNECTIONS` for this loop.
    var connectionLimit: Int
    var policy: ConnectionPolicy
    /// The next transfer opens a new connection (a retired one's socket was not known).
    var nextTransferFresh = false
    var openSockets: Set<Int32> = []
    /// Open sockets that became established connections (a request went on them), by socket,
    /// with their local port; and those ports, looked up on every send.
    var establishedSockets: [Int32: Int32] = [:]
    var establishedPorts: Set<Int32> = []
    /// Connections this loop has established; those beyond its configured count and the ones it
    /// grew are reconnects. A socket whose connect or TLS handshake failed is not one.
    var connectionsEverEstablished = 0
    var connectionsExpected: Int
    // SystemRandom, not SystemRandomNumberGenerator: see Sources/APNs/Retry/SystemRandom.swift.
    var random = SystemRandom()
    var slotsToRelease = 0
    /// Set when a completion batch held requests a dropped connection left unanswered; one
    /// lost connection fails many streams at once and is reported once.
    var lostThisBatch = false
    /// Connection-level failures seen in one completion batch, reported once each: a thousand
    /// streams timing out on one connection are one failed connection.
    var failuresThisBatch: Set<ConnectionFailureReason> = []
    /// Whether a connection could not be opened in this completion batch, and the cause its
    /// backoff gives: the transfers that waited for it fail together, and that is one failure.
    var connectFailureThisBatch = BatchFailureCause()
    /// Backoffs the policy decided inside libcurl's callbacks, with their causes, carried out
    /// once libcurl has returned.
    var deferredBackoffs: [(action: ConnectionPolicy.Action, cause: ConnectionFailureCause)] = []
    /// Connections whose sockets libcurl closed, and when, to judge once it has returned
    /// (`judgeClosedConnections`).
    var closedConnections: [(connection: Int64, at: UInt64)] = []
    /// Connections libcurl moved requests away from, already reported (libcurl never reuses an id).
    var endedConnections = RecentSet(capacity: 64)
    /// Connections on which a sent request failed without an answer: they broke, not ended in order.
    var brokenConnections = RecentSet(capacity: 64)
    /// Connections libcurl moved a request away from, and when: judged a moment later, since
    /// the requests that failed on a broken one may be reported after one it moved.
    var movedFrom: [(connection: Int64, at: UInt64, refused: Bool)] = []
    var coalescing: AnswerCoalescing
    /// Of the requests the last `readCompletions` finished, those with an HTTP status.
    var answeredInLastBatch = 0
    /// Nanoseconds the loop has paused to let answers gather: idle time, like time blocked in
    /// epoll, for the connection policy.
    private var coalescedNanoseconds: UInt64 = 0
    /// Idle nanoseconds (epoll and pauses) at the last socket read.
    private var idleAtLastRead: UInt64 = 0
    var readRoute: SocketReadRoute
    /// Some socket of this round of events was read through one transfer.
    var readThroughOneTransfer = false
    /// What handles get before their next request (`CurlTransfer.credentialGeneration`), the
    /// established connections a replaced certificate retires, and a certificate handed in by
    /// another thread (`CurlEventLoop+Certificate.swift`).
    var credential: ClientCredential
    var credentialGeneration: Int32 = 0
    var connectionOfSocket: [Int32: Int64] = [:]
    let certificateInbox = Lock<ClientIdentity?>(nil)
    let certificateWaiting = Atomic<Bool>(false)

    init(configuration: DispatcherConfiguration, sink: CompletionSink) throws(DispatcherConfigurationError) {
        self.configuration = configuration
        self.sink = sink
        credential = configuration.credential
        inCurlLimit = configuration.inFlightPerThread
        answerDeadlineNanoseconds = UInt64(max(0, configuration.answerDeadlineMilliseconds)) * 1_000_000
        requestTimeoutNanoseconds = UInt64(max(0, configuration.requestTimeoutMilliseconds)) * 1_000_000
        connectionLimit = configuration.connectionsPerThread
        connectionsExpected = configuration.connectionsPerThread
        coalescing = AnswerCoalescing(maximumPauseMilliseconds: configuration.answerCoalescingMilliseconds,
                                      minimumInFlight: configuration.answerCoalescingMinimumInFlight)
        readRoute = SocketReadRoute(enabled: configuration.readsSocketsThroughOneTransfer,
                                    minimumInFlight: configuration.answerCoalescingMinimumInFlight)
        var seed = SystemRandom()
        policy = ConnectionPolicy(backoff: configuration.reconnectBackoff, growth: configuration.connectionGrowth,
                                  holdOffRandom: UnitRandom(seed: seed.next()))
        if let window = configuration.adaptiveInFlightWindow { inFlightSampler = InFlightSampler(window: window) }
        do {
            epoll = try EpollLoop()
        } catch {
            throw .transportRejected(setting: "epoll", message: error.description)
        }
        multi = try CurlMulti(loop: epoll, connectionsPerHost: configuration.connectionsPerThread,
                              connectionCeiling: configuration.connectionGrowth.ceiling,
                              streamsPerConnection: configuration.streamsPerConnection)
        if readRoute.enabled {
            multi.readerForSocket = { [unowned self] fd, readable, writable, failed in
                reader(for: fd, readable: readable, writable: writable, failed: failed)
            }
        }
        // The first easy handle is made now so a rejected option surfaces at start-up, not on a request.
        try freeTransfers.append(makeTransfer().index)
    }

    deinit {
        // Easy handles go before the multi handle that may still hold their connections.
        transfers.removeAll()
        multi.cleanUp()
    }

    // MARK: - Cross-thread entry points

    func start() throws(DispatcherConfigurationError) {
        do {
            try epoll.start(driver: self, niceness: configuration.threadNiceness)
        } catch {
            throw .transportRejected(setting: "event loop thread", message: error.description)
        }
    }

    /// Any thread. Never blocks on the loop: a lock around an append, and an eventfd write
    /// only when the loop is asleep in epoll and this is the first request it will find.
    /// Returns false, keeping nothing, once the loop has stopped.
    func enqueue(_ request: PendingRequest) -> Bool {
        enqueue(contentsOf: CollectionOfOne(request))
    }

    /// `enqueue` for many requests under one lock.
    func enqueue(contentsOf requests: some Collection<PendingRequest>) -> Bool {
        let (accepted, first) = inbox.withLock { inbox -> (Bool, Bool) in
            guard !inbox.closed else { return (false, false) }
            let wasEmpty = inbox.items.isEmpty
            for request in requests { inbox.items.pushBack(request) }
            outstanding.add(requests.count, ordering: .relaxed)
            return (true, wasEmpty)
        }
        if first { epoll.wakeIfSleeping() }
        return accepted
    }

    func stop() {
        epoll.stop()
    }

    // MARK: - EpollLoopDriver

    func prepareToWait() -> Int32 {
        // Connections libcurl closed outside a socket action (removing a finished transfer).
        takeDeferredBackoffs()
        takeInbox()
        // After the inbox: a request submitted after `replaceCertificate` returned is then
        // seen with its certificate, never admitted with the old one.
        if certificateWaiting.load(ordering: .acquiring) { takeReplacedCertificate() }
        answerOverdue()
        refill()
        var now = monotonicNanoseconds()
        judgeMovedConnections(now: now)
        coalesceAnswers(now: &now)
        // The policy and the in-flight window see every pass, before libcurl's timer runs: in a
        // saturated drain the timer is due on most passes (the requests just added, the streams
        // a read left to run), and a pass that ran it and returned first left a connection on
        // trial unjudged for seconds (docs/dispatcher.md, The event loop and the multi driver).
        trackInFlightLimit(now: now)
        let waiting = !backlog.isEmpty && inCurl >= streamsAdmitted
        if apply(policy.handle(.beforeWait(now: now, waiting: waiting, idle: epoll.idleNanoseconds &+ coalescedNanoseconds,
                                           hasWork: !backlog.isEmpty || inCurl > 0))) {
            refill()
            return 0
        }
        if multi.runTimerIfDue(now: now) {
            readCompletions()
            return 0
        }
        var wait = wakeForGrowthTrial(multi.timerWait(now: now), now: now)
        if let oldest = movedFrom.first {
            let judge = Int64((oldest.at + Self.endJudgedAfter - min(now, oldest.at + Self.endJudgedAfter) + 999_999) / 1_000_000)
            wait = wait < 0 ? judge : min(wait, judge)
        }
        if !backlog.isEmpty, let until = policy.backoffDeadline(now: now) {
            let backoff = Int64((until - now + 999_999) / 1_000_000)
            wait = wait < 0 ? backoff : min(wait, backoff)
        }
        if let front = backlog.front, let last = lastStart(of: front) {
            // Wakes to answer the oldest waiting request by its deadline, even while nothing else happens.
            let due = Int64((last - min(now, last) + 999_999) / 1_000_000)
            wait = wait < 0 ? due : min(wait, due)
        }
        return Int32(clamping: wait)
    }

    func workArrived() -> Bool {
        certificateWaiting.load(ordering: .acquiring) || inbox.withLock { !$0.items.isEmpty }
    }

    func eventsHandled() {
        let now = monotonicNanoseconds()
        let socketsRead = multi.takeSocketEvents()
        let throughOneTransfer = readThroughOneTransfer
        readThroughOneTransfer = false
        if !multi.runReaders() { multi.runTimerIfDue(now: now) }
        let inFlight = inCurl
        let answers = readCompletions()
        if socketsRead {
            readRoute.roundFinished(throughOneTransfer: throughOneTransfer, answered: answeredInLastBatch,
                                    unanswered: answers - answeredInLastBatch)
            sink.counters.socketReads.add(1, ordering: .relaxed)
            let idle = epoll.idleNanoseconds &+ coalescedNanoseconds
            coalescing.socketsRead(at: now, waited: idle &- idleAtLastRead, answers: answers, inFlight: inFlight)
            idleAtLastRead = idle
        }
    }

    /// Notes whether work waited for the window, hands a finished period to the adaptive
    /// window, and reports the loop's limit when it changed: the window's, or the streams' when
    /// the limit is pinned.
    private func trackInFlightLimit(now: UInt64) {
        let capacity = policy.streamCapacity(configured: inCurlLimit)
        var limit = capacity
        if var sampler = inFlightSampler {
            if !backlog.isEmpty, inCurl >= admitted { sampler.workWaited() }
            if let decision = sampler.tick(now: now, inFlight: inCurl, capacity: capacity), decision.notable {
                sink.metrics.inFlightLimitSettled(limit: decision.limit, rate: sampler.lastRate,
                                                  roundTripNanoseconds: sampler.lastRoundTrip)
            }
            limit = sampler.limit
            inFlightSampler = sampler
        }
        guard limit != reportedLimit else { return }
        sink.metrics.inFlightLimitChanged(by: limit - reportedLimit)
        sink.counters.inFlightLimit.add(limit - reportedLimit, ordering: .relaxed)
        reportedLimit = limit
    }

    /// Pauses as `AnswerCoalescing` says before the sockets are read again. New requests and
    /// libcurl's timers wait out the pause too (at most `answerCoalescingMilliseconds`).
    private func coalesceAnswers(now: inout UInt64) {
        let pause = coalescing.pause(now: now, inFlight: inCurl)
        guard pause > 0 else { return }
        var interval = timespec(tv_sec: Int(pause / 1_000_000_000), tv_nsec: Int(pause % 1_000_000_000))
        nanosleep(&interval, nil)
        let woke = monotonicNanoseconds()
        coalescedNanoseconds &+= woke &- now
        now = woke
    }

    func loopFinished() {
        apply(policy.handle(.stopped(now: monotonicNanoseconds())))
        shutDownTransfers()
        // The requests just reported `.engineStopped` go out again by their callers: a
        // connection left open lets the server go on answering them, unread, until this loop
        // is released (for `pushd run`, at exit), each answer a notification sent twice.
        multi.cleanUp()
    }

    // MARK: - Requests into libcurl

    private func takeInbox() {
        inbox.withLock { inbox in
            if !inbox.items.isEmpty { swap(&inbox.items, &drained) }
        }
        guard !drained.isEmpty else { return }
        // Moved, not copied: reversing an array and popping from its end copied each request
        // (a retain and a release of each of its references).
        while let request = drained.popFront() { backlog.pushBack(request) }
        // The window filling at once (at start, after a stall) grows both buffers to half the
        // window each, and swapped they would keep that size: the one just emptied is let go.
        if drained.capacity > Self.drainedCapacityKept { drained = RingBuffer() }
    }

    /// Moves requests from the backlog into libcurl up to what the policy admits. Called before
    /// every wait so that finished streams are replaced at once, not after the next poll.
    private func refill() {
        guard !backlog.isEmpty else { return }
        let now = monotonicNanoseconds()
        let streams = policy.admissionLimit(configured: inCurlLimit, now: now)
        streamsAdmitted = streams
        let limit = inFlightSampler.map { min(streams, $0.limit) } ?? streams
        admitted = limit
        var added = 0
        while inCurl < limit, !backlog.isEmpty {
            let transfer: CurlTransfer
            if let index = freeTransfers.popLast() {
                transfer = transfers[index]
            } else {
                do {
                    transfer = try makeTransfer()
                } catch {
                    break
                }
            }
            guard var request = backlog.popFront() else { break }
            if !mayStart(request, now: now) {
                freeTransfers.append(transfer.index)
                answerPastDeadline(request)
                continue
            }
            request.attempts += 1
            if transfer.credentialGeneration != credentialGeneration, let refused = transfer.use(credential, generation: credentialGeneration) {
                freeTransfers.append(transfer.index)
                deliver(request, outcome: .transportFailure(refused.transportError))
                continue
            }
            if let failure = transfer.prepare(for: request.request, fresh: nextTransferFresh) {
                freeTransfers.append(transfer.index)
                deliver(request, outcome: .transportFailure(failure))
                continue
            }
            transfer.pending = consume request
            if let refused = multi.add(transfer.easy), let refusedRequest = transfer.pending.take() {
                freeTransfers.append(transfer.index)
                deliver(refusedRequest, outcome: .transportFailure(refused))
                continue
            }
            transfer.attachErrorBuffer()
            nextTransferFresh = false
            transfer.enteredCurlAt = now
            inCurl += 1
            added += 1
        }
        if added > 0 { sink.metrics.inFlightChanged(by: added) }
        if inFlightSampler != nil {
            inFlightSampler!.inCurl(inCurl)
            if streams < min(inCurlLimit, inFlightSampler!.limit) { inFlightSampler!.admissionsHeld() }
        }
        releaseSlots()
    }

    private func makeTransfer() throws(DispatcherConfigurationError) -> CurlTransfer {
        let transfer = try CurlTransfer.make(index: transfers.count, configuration: configuration, credential: credential,
                                             generation: credentialGeneration, socketOwner: Unmanaged.passUnretained(self).toOpaque(),
                                             errorBuffer: errorBuffers.buffer(for: transfers.count))
        transfers.append(transfer)
        sink.counters.easyHandles.add(1, ordering: .relaxed)
        return transfer
    }

    private func shutDownTransfers() {
        for transfer in transfers {
            guard let pending = transfer.pending else { continue }
            multi.remove(transfer.easy)
            transfer.pending = nil
            deliver(pending, outcome: .transportFailure(.engineStopped))
        }
        inbox.withLock { $0.closed = true }
        takeInbox()
        while let pending = backlog.popFront() { deliver(pending, outcome: .transportFailure(.engineStopped)) }
        releaseSlots()
    }
}
