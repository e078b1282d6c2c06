@testable import Dispatcher
import Polling
import Foundation
import Glibc
import Locking

/// Records every result the engine reports, so tests can prove none was lost or reported twice.
final class ResultCollector: Sendable {
    struct Summary {
        var timesReported: [UInt64: Int] = [:]
        var results: [UInt64: DispatchResult] = [:]
        var count = 0
    }

    let summary = Lock(Summary())

    var handler: HTTP2Dispatcher.ResultHandler {
        { result in
            self.summary.withLock { summary in
                summary.timesReported[result.tag, default: 0] += 1
                summary.results[result.tag] = result
                summary.count += 1
            }
        }
    }

    var count: Int { summary.withLock { $0.count } }

    /// Waits, without holding a thread, until `expected` results arrived or `seconds` passed;
    /// returns the count seen.
    @discardableResult
    func wait(for expected: Int, seconds: Double = 60) async -> Int {
        let deadline = monotonicNanoseconds() + UInt64(seconds * 1e9)
        while count < expected, monotonicNanoseconds() < deadline { try? await Task.sleep(nanoseconds: 2_000_000) }
        return count
    }

    func snapshot() -> Summary { summary.withLock { $0 } }
}

/// Runs a blocking submission loop on its own thread, so a full window never parks one of the
/// few threads Swift concurrency runs every test on.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread.detachNewThread {
            do { continuation.resume(returning: try body()) } catch { continuation.resume(throwing: error) }
        }
    }
}
