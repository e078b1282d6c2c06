import Foundation

/// Wakes every waiting worker at once: rung when `pg_notify` says jobs were inserted,
/// and on shutdown. A worker that was busy when it rang sees the ring on its next wait.
final class Doorbell: @unchecked Sendable {
    // `rings` is read and written only while `condition` is locked.
    private let condition = NSCondition()
    private var rings: UInt64 = 0

    func ring() {
        condition.lock()
        rings &+= 1
        condition.broadcast()
        condition.unlock()
    }

    /// The current ring count, to pass to `wait(after:timeout:)`.
    var current: UInt64 {
        condition.lock()
        defer { condition.unlock() }
        return rings
    }

    /// Waits until the bell rings after `seen`, or `timeout` seconds pass.
    func wait(after seen: UInt64, timeout: Double) {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        while rings == seen {
            if !condition.wait(until: deadline) { break }
        }
        condition.unlock()
    }
}
