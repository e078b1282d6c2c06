import Locking
import Synchronization

/// Running totals kept by the engine itself, readable at any time (tests and `pushd` status).
public struct DispatcherStatistics: Sendable, Equatable {
    public var submitted: Int
    public var completed: Int
    public var retried: Int
    public var connectionsOpened: Int
    public var connectionsClosed: Int
    public var connectionReplacements: Int
    public var connectFailures: Int
    /// Requests libcurl sent again by itself (a refused stream, a GOAWAY above the stream, or a
    /// reused connection found dead), apart from the engine's own `retried`: libcurl's
    /// pre-request callback ran more than once for one transfer.
    public var resentByTransport: Int
    /// Connection failures and server-side ends by reason.
    public var connectionFailures: [ConnectionFailureReason: Int]
    /// Times a loop raised its connection limit because requests waited for a stream.
    public var connectionsGrown: Int = 0
    /// Times a loop lowered its connection limit again because the connection it had added did
    /// not raise the answer rate (`connectionGrowthJudgedOverMilliseconds`).
    public var connectionGrowthsUndone: Int = 0
    /// Connections put on trial (judged growth), and trials that ended unjudged.
    public var connectionGrowthsStarted: Int = 0
    public var connectionGrowthsAbandoned: Int = 0
    /// The most connections open at once, across the loops.
    public var peakOpenConnections: Int = 0
    /// Loop passes that handed socket events to libcurl; each runs every transfer on the
    /// connections that had events (see `answerCoalescingMilliseconds`).
    public var socketReads: Int = 0
    /// Readable sockets read through one of their transfers instead (`readsSocketsThroughOneTransfer`):
    /// libcurl then runs that transfer and the ones whose frames it read.
    public var socketReadsThroughOneTransfer: Int = 0
    /// Easy handles the loops made: each loop makes one only when all of its own are inside
    /// libcurl, so this is the sum of the most requests each loop held in libcurl at once.
    public var easyHandles: Int = 0
    /// The loops' limits on requests inside libcurl now, summed: the adaptive window's, or
    /// connections × streams where it is pinned.
    public var inFlightLimit: Int = 0
    /// Failed connections (connect, TLS, 503 Shutdown, no answer in time) after which a loop
    /// waited before opening another.
    public var reconnectBackoffs: Int = 0
    /// Requests answered at their answer deadline without a further attempt
    /// (`DispatcherConfiguration.answerDeadlineMilliseconds`), most of them `notSent`.
    public var pastDeadline: Int = 0
}

/// Shared by the engine and its loops; relaxed atomics because they are only ever read as totals.
final class DispatcherCounters: Sendable {
    let submitted = Atomic<Int>(0)
    let completed = Atomic<Int>(0)
    let retried = Atomic<Int>(0)
    let connectionsOpened = Atomic<Int>(0)
    let connectionsClosed = Atomic<Int>(0)
    let connectionReplacements = Atomic<Int>(0)
    let connectFailures = Atomic<Int>(0)
    let resentByTransport = Atomic<Int>(0)
    let connectionsGrown = Atomic<Int>(0)
    let connectionGrowthsUndone = Atomic<Int>(0)
    let connectionGrowthsStarted = Atomic<Int>(0)
    let connectionGrowthsAbandoned = Atomic<Int>(0)
    let socketReads = Atomic<Int>(0)
    let socketReadsThroughOneTransfer = Atomic<Int>(0)
    let easyHandles = Atomic<Int>(0)
    let inFlightLimit = Atomic<Int>(0)
    let reconnectBackoffs = Atomic<Int>(0)
    let pastDeadline = Atomic<Int>(0)
    private let openConnections = Atomic<Int>(0)
    private let peakOpenConnections = Atomic<Int>(0)
    /// Rare events (a few per connection at most), so a lock is cheap enough.
    private let failures = Lock<[ConnectionFailureReason: Int]>([:])

    func countFailure(_ reason: ConnectionFailureReason) {
        failures.withLock { $0[reason, default: 0] += 1 }
    }

    /// A loop's socket opened (+1) or closed (-1); keeps the peak of what is open at once.
    func connectionsChanged(by delta: Int) {
        let open = openConnections.wrappingAdd(delta, ordering: .relaxed).newValue
        var peak = peakOpenConnections.load(ordering: .relaxed)
        while open > peak {
            let (exchanged, current) = peakOpenConnections.compareExchange(expected: peak, desired: open, ordering: .relaxed)
            if exchanged { break }
            peak = current
        }
    }

    var snapshot: DispatcherStatistics {
        DispatcherStatistics(submitted: submitted.load(ordering: .relaxed), completed: completed.load(ordering: .relaxed),
                             retried: retried.load(ordering: .relaxed), connectionsOpened: connectionsOpened.load(ordering: .relaxed),
                             connectionsClosed: connectionsClosed.load(ordering: .relaxed),
                             connectionReplacements: connectionReplacements.load(ordering: .relaxed),
                             connectFailures: connectFailures.load(ordering: .relaxed),
                             resentByTransport: resentByTransport.load(ordering: .relaxed),
                             connectionFailures: failures.withLock { $0 },
                             connectionsGrown: connectionsGrown.load(ordering: .relaxed),
                             connectionGrowthsUndone: connectionGrowthsUndone.load(ordering: .relaxed),
                             connectionGrowthsStarted: connectionGrowthsStarted.load(ordering: .relaxed),
                             connectionGrowthsAbandoned: connectionGrowthsAbandoned.load(ordering: .relaxed),
                             peakOpenConnections: peakOpenConnections.load(ordering: .relaxed),
                             socketReads: socketReads.load(ordering: .relaxed),
                             socketReadsThroughOneTransfer: socketReadsThroughOneTransfer.load(ordering: .relaxed),
                             easyHandles: easyHandles.load(ordering: .relaxed),
                             inFlightLimit: inFlightLimit.load(ordering: .relaxed),
                             reconnectBackoffs: reconnectBackoffs.load(ordering: .relaxed),
                             pastDeadline: pastDeadline.load(ordering: .relaxed))
    }
}
