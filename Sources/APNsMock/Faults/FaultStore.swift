import Locking
import Synchronization

/// The current faults, read by every loop thread and replaced from any thread.
///
/// Readers keep a copy and refresh it only when `version` moves, so the hot path is one
/// relaxed atomic load.
final class FaultStore: Sendable {
    private let current: Lock<FaultConfiguration>
    private let versionCounter = Atomic<UInt64>(0)

    init(_ initial: FaultConfiguration) { current = Lock(initial) }

    var version: UInt64 { versionCounter.load(ordering: .acquiring) }

    var snapshot: FaultConfiguration { current.withLock { $0 } }

    func replace(_ faults: FaultConfiguration) {
        current.withLock { $0 = faults }
        versionCounter.add(1, ordering: .releasing)
    }
}

/// A loop thread's cached copy of the faults.
struct FaultView {
    private let store: FaultStore
    private var seenVersion: UInt64
    private(set) var faults: FaultConfiguration

    init(store: FaultStore) {
        self.store = store
        seenVersion = store.version
        faults = store.snapshot
    }

    mutating func refresh() {
        let version = store.version
        if version != seenVersion {
            seenVersion = version
            faults = store.snapshot
        }
    }
}
