import Dispatch
import Dispatcher
import Locking

/// Where a worker's send results arrive. The dispatchers' event-loop threads push;
/// the one worker thread that owns the queue takes.
///
/// A result's tag holds the worker's index (high 16 bits), the worker's batch
/// generation (next 24 bits) and the item's index in the batch (low 24 bits), so a
/// result that arrives after its batch was given up on is recognised and dropped.
final class CompletionQueue: @unchecked Sendable {
    private let items = Lock<[DispatchResult]>([])
    private let ready = DispatchSemaphore(value: 0)

    func push(_ result: DispatchResult) {
        items.withLock { $0.append(result) }
        ready.signal()
    }

    /// Waits until at least one result is there or `deadline` passes; returns every
    /// result queued (empty on time-out).
    func take(until deadline: DispatchTime) -> [DispatchResult] {
        while ready.wait(timeout: deadline) == .success {
            let taken = items.withLock { items -> [DispatchResult] in
                let all = items
                items.removeAll(keepingCapacity: true)
                return all
            }
            // One signal per result: consume those of the other results taken. A signal
            // not yet given when this runs wakes a later call to an empty queue, which
            // simply waits again.
            for _ in 1..<max(1, taken.count) { _ = ready.wait(timeout: .now()) }
            if !taken.isEmpty { return taken }
        }
        return []
    }

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
