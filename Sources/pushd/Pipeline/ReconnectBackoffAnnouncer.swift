import Synchronization

/// How many event loops of one APNs client are in a run of failed connections: the first to
/// start one announces it, the last to end one says so, and the loops in between stay quiet.
///
/// Thread rule: called on the engine's event-loop threads; one atomic.
final class ReconnectBackoffAnnouncer: Sendable {
    private let loopsBackingOff = Atomic<Int>(0)

    /// True when no other loop of the client was backing off.
    func started() -> Bool {
        loopsBackingOff.wrappingAdd(1, ordering: .relaxed).oldValue == 0
    }

    /// True when this was the last loop backing off.
    func ended() -> Bool {
        loopsBackingOff.wrappingSubtract(1, ordering: .relaxed).newValue == 0
    }
}
