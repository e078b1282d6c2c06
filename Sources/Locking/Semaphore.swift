/// A counting semaphore on `Condition`, in place of `DispatchSemaphore`: a module that waits
/// on this needs no Swift Dispatch overlay, and the overlay's library loads
/// `_StringProcessing` and `_RegexParser` with it (1.2 MB resident in pushd, measured in
/// docs/queue.md). Time-outs run on CLOCK_MONOTONIC, as the condition's do.
public final class Semaphore: Sendable {
    private let count: Condition<Int>

    public init(value: Int = 0) {
        count = Condition(value)
    }

    /// Adds one signal and wakes a waiter.
    public func signal() {
        count.update { $0 += 1 }
    }

    /// Takes one signal, waiting for it if none is there; with a `timeout` in seconds at most
    /// that long. Returns false when the time ran out first.
    @discardableResult
    public func wait(timeout: Double? = nil) -> Bool {
        count.wait(timeout: timeout) { count -> Bool? in
            guard count > 0 else { return nil }
            count -= 1
            return true
        } ?? false
    }
}
