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
    /// Rare events (a few per connection at most), so a lock is cheap enough.
    private let failures = Mutex<[ConnectionFailureReason: Int]>([:])

    func countFailure(_ reason: ConnectionFailureReason) {
        failures.withLock { $0[reason, default: 0] += 1 }
    }

    var snapshot: DispatcherStatistics {
        DispatcherStatistics(submitted: submitted.load(ordering: .relaxed), completed: completed.load(ordering: .relaxed),
                             retried: retried.load(ordering: .relaxed), connectionsOpened: connectionsOpened.load(ordering: .relaxed),
                             connectionsClosed: connectionsClosed.load(ordering: .relaxed),
                             connectionReplacements: connectionReplacements.load(ordering: .relaxed),
                             connectFailures: connectFailures.load(ordering: .relaxed),
                             resentByTransport: resentByTransport.load(ordering: .relaxed),
                             connectionFailures: failures.withLock { $0 })
    }
}
