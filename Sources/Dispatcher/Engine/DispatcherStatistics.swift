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

    var snapshot: DispatcherStatistics {
        DispatcherStatistics(submitted: submitted.load(ordering: .relaxed), completed: completed.load(ordering: .relaxed),
                             retried: retried.load(ordering: .relaxed), connectionsOpened: connectionsOpened.load(ordering: .relaxed),
                             connectionsClosed: connectionsClosed.load(ordering: .relaxed),
                             connectionReplacements: connectionReplacements.load(ordering: .relaxed),
                             connectFailures: connectFailures.load(ordering: .relaxed))
    }
}
