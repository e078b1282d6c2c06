import Locking

/// Wakes every waiting worker at once: rung when `pg_notify` says jobs were inserted,
/// and on shutdown. A worker that was busy when it rang sees the ring on its next wait.
final class Doorbell: @unchecked Sendable {
    private let rings = Condition<UInt64>(0)

    func ring() {
        rings.update { $0 &+= 1 }
    }

    /// The current ring count, to pass to `wait(after:timeout:)`.
    var current: UInt64 { rings.withLock { $0 } }

    /// Waits until the bell rings after `seen`, or `timeout` seconds pass.
    func wait(after seen: UInt64, timeout: Double) {
        _ = rings.wait(timeout: timeout) { $0 != seen ? () : nil }
    }
}
