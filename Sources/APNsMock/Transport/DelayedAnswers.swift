import Polling

/// The answers one loop holds back (`--delay-ms`, `--random-delay-ms`) until they are due.
///
/// A timer per answer cost two closures (one allocation each), a heap entry, an entry in the
/// loop's table and one in the connection's, hashed in and out. The delay is the same for
/// every request, so answers come due in the order they were added: they wait in a
/// `DueQueue`, the loop sleeps until the first is due, and every answer due by then is
/// submitted in one pass, each connection written once after it.
///
/// Thread ownership: the loop thread's, like the connections it holds.
final class DelayedAnswers {
    /// The answer itself waits in its stream (`heldAnswer`): an entry here is two words.
    struct Pending {
        let connection: HTTP2Connection
        let streamID: Int32
    }

    private var queue = DueQueue<Pending>()
    /// Connections given answers in the current pass, each once.
    private var toFlush: [HTTP2Connection] = []

    var isEmpty: Bool { queue.isEmpty }
    var count: Int { queue.count }

    /// CLOCK_MONOTONIC nanoseconds at which the first held answer is due.
    var nextDeadline: UInt64? { queue.nextDeadline }

    /// Holds the answer of `streamID` for at least `delayMilliseconds` from now.
    func add(streamID: Int32, on connection: HTTP2Connection, delayMilliseconds: UInt64) {
        let deadline = monotonicNanoseconds() &+ delayMilliseconds &* 1_000_000
        queue.add(Pending(connection: connection, streamID: streamID), deadline: deadline)
    }

    /// Submits every answer due at `now` (nanoseconds), oldest first, then writes each
    /// connection that got one.
    func sendDue(now: UInt64) {
        while let pending = queue.popDue(now: now) {
            if pending.connection.submitDelayedAnswer(pending.streamID) {
                toFlush.append(pending.connection)
            }
        }
        guard !toFlush.isEmpty else { return }
        for connection in toFlush { connection.flushDelayedAnswers() }
        toFlush.removeAll(keepingCapacity: true)
    }

    /// Forgets the answers of a connection that closed.
    func drop(for connection: HTTP2Connection) {
        queue.removeAll { $0.connection === connection }
    }
}
