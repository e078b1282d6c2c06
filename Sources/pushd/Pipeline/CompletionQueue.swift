import Dispatcher
import Locking

/// Where a worker's send results arrive. The dispatchers' event-loop threads push;
/// the one worker thread that owns the queue takes.
///
/// A result's tag holds the worker's index (high 16 bits), the worker's batch
/// generation (next 24 bits) and the item's index in the batch (low 24 bits), so a
/// result that arrives after its batch was given up on is recognised and dropped.
final class CompletionQueue: @unchecked Sendable {
    private struct State {
        var items: [DispatchResult] = []
        /// How many queued results wake the sleeping taker; `Int.max` while none sleeps.
        var wakeAt = Int.max
    }

    private let state = Lock(State())
    private let ready = Semaphore()

    /// Queues `result`. The event loop pays for a wake-up (a futex call, and on a busy
    /// machine a context switch) only when the taker sleeps and this result completes the
    /// batch it waits for; otherwise a push is an append under an uncontended lock.
    func push(_ result: DispatchResult) {
        let wake = state.withLock { state -> Bool in
            state.items.append(result)
            guard state.items.count >= state.wakeAt else { return false }
            state.wakeAt = Int.max
            return true
        }
        if wake { ready.signal() }
    }

    /// Waits until at least `batch` results are queued or `deadline` (monotonic seconds,
    /// `RateLimiter.monotonicSeconds()`) passes, and returns every result queued (possibly
    /// fewer than `batch`, or none, on time-out).
    ///
    /// A campaign worker with hundreds of requests in flight asks for a batch, so it wakes
    /// once per batch instead of once per answer; a transactional worker asks for 1.
    func take(atLeast batch: Int = 1, until deadline: Double) -> [DispatchResult] {
        var taken = [DispatchResult]()
        take(atLeast: batch, until: deadline, into: &taken)
        return taken
    }

    /// As `take(atLeast:until:)`, into `taken` (emptied first): a worker that takes batch after
    /// batch passes the same array each time, and the queue and the worker swap their two
    /// arrays, so no batch allocates. Handing out the queue's array and emptying it in place
    /// allocated one as large as the largest batch yet at every take (the copy handed out
    /// keeps the old one): hundreds of results, tens of kilobytes, each mapped and unmapped on
    /// its own above the 16 KiB mmap threshold the engine sets.
    func take(atLeast batch: Int = 1, until deadline: Double, into taken: inout [DispatchResult]) {
        taken.removeAll(keepingCapacity: true)
        let wanted = max(1, batch)
        while true {
            let done = state.withLock { state -> Bool in
                if state.items.count >= wanted {
                    Self.swapAll(&state, &taken)
                    return true
                }
                state.wakeAt = wanted
                return false
            }
            if done { return }
            if !ready.wait(timeout: deadline - RateLimiter.monotonicSeconds()) {
                // A push may have signalled just after the time-out: that signal makes a later
                // call's wait return at once, and that call simply looks again.
                state.withLock { Self.swapAll(&$0, &taken) }
                return
            }
        }
    }

    /// The queued results go to `taken` (empty), whose capacity the next pushes fill.
    private static func swapAll(_ state: inout State, _ taken: inout [DispatchResult]) {
        state.wakeAt = Int.max
        swap(&state.items, &taken)
    }

    /// The capacity of the queue's own array: what pushes fill before it grows again.
    var capacity: Int { state.withLock { $0.items.capacity } }

    static func tag(worker: Int, generation: UInt32, index: Int) -> UInt64 {
        UInt64(worker) << 48 | UInt64(generation & 0xFF_FFFF) << 24 | UInt64(index & 0xFF_FFFF)
    }

    static func worker(of tag: UInt64) -> Int { Int(tag >> 48) }
    static func generation(of tag: UInt64) -> UInt32 { UInt32((tag >> 24) & 0xFF_FFFF) }
    static func index(of tag: UInt64) -> Int { Int(tag & 0xFF_FFFF) }
}

/// Routes each result to the queue of the worker that sent it. The queues are fixed
/// before any dispatcher starts, so routing takes no lock.
struct ResultRouter: Sendable {
    let queues: [CompletionQueue]

    func deliver(_ result: DispatchResult) {
        let worker = CompletionQueue.worker(of: result.tag)
        guard worker < queues.count else { return }
        queues[worker].push(result)
    }
}
