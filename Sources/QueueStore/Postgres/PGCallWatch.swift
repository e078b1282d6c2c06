import Glibc
import Locking

/// A blocking libpq call in flight: the session it runs on (its `application_name`) and how
/// long it has waited so far.
public struct PGCall: Sendable, Equatable {
    public var purpose: String
    public var waited: Duration

    public init(purpose: String, waited: Duration) {
        self.purpose = purpose
        self.waited = waited
    }
}

/// Every blocking call that a `PGConnection` of this process has in flight, so that a
/// watchdog can see a database that stopped answering.
///
/// A server behind a network that drops packets, or one that accepts bytes and never
/// answers, leaves libpq waiting in `poll` with no time-out of its own; TCP keepalives and
/// `tcp_user_timeout` end that only when the kernel sees the peer gone. What the kernel
/// cannot see (a stuck server or proxy whose kernel still acknowledges) only a clock can.
///
/// Each call is registered with a duplicate of its connection's socket, so that
/// `abandon(waitingLongerThan:)` can shut the socket down from another thread: the blocked
/// call then sees the connection closed and throws, and the caller reconnects as after any
/// lost connection. The duplicate is the connection's own (closed only by `close()` on the
/// thread that owns the connection, never during a call), so its number is never reused
/// while a call is registered; shutting it down acts on the socket libpq uses.
public enum PGCallWatch {
    struct Entry {
        var purpose: String
        var started: ContinuousClock.Instant
        var socket: Int32
        var abandoned: Bool
    }

    struct State {
        var next = 0
        var calls: [Int: Entry] = [:]
        var lastAnswer: ContinuousClock.Instant?
    }

    private static let state = Lock(State())

    static func begin(purpose: String, socket: Int32) -> Int {
        state.withLock { state in
            state.next += 1
            state.calls[state.next] = Entry(purpose: purpose, started: .now, socket: socket, abandoned: false)
            return state.next
        }
    }

    /// `answered`: the call ended with the connection still open (a server error is an answer too).
    static func end(_ id: Int, answered: Bool) {
        state.withLock { state in
            state.calls[id] = nil
            if answered { state.lastAnswer = .now }
        }
    }

    /// The calls in flight, longest wait first.
    public static func inFlight(now: ContinuousClock.Instant = .now) -> [PGCall] {
        state.withLock { state in
            state.calls.values.map { PGCall(purpose: $0.purpose, waited: now - $0.started) }
        }.sorted { $0.waited > $1.waited }
    }

    /// When a call last came back with the connection open: the database answered then.
    public static var lastAnswer: ContinuousClock.Instant? { state.withLock { $0.lastAnswer } }

    /// Shuts down the socket of every call that has waited longer than `limit` (once per
    /// call), so that it fails as on a lost connection; returns those calls.
    @discardableResult
    public static func abandon(waitingLongerThan limit: Duration, now: ContinuousClock.Instant = .now) -> [PGCall] {
        state.withLock { state in
            var abandoned = [PGCall]()
            for (id, entry) in state.calls where !entry.abandoned && now - entry.started > limit {
                state.calls[id]?.abandoned = true
                // A call still connecting has no socket yet; connect_timeout bounds it.
                guard entry.socket >= 0 else { continue }
                shutdown(entry.socket, Int32(SHUT_RDWR))
                abandoned.append(PGCall(purpose: entry.purpose, waited: now - entry.started))
            }
            return abandoned.sorted { $0.waited > $1.waited }
        }
    }
}
