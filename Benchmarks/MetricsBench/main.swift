// Prints nanoseconds per counter increment and per histogram observation, on one
// thread and on two threads updating the same series, next to a bare relaxed atomic
// add measured in the same run as the reference.
import Foundation
import Metrics
import Synchronization

let iterations = 20_000_000

/// The reference: what one relaxed atomic add costs on this machine.
final class BareAtomic: Sendable {
    let value = Atomic<UInt64>(0)
}

func nanoseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1e9 + Double(attoseconds) * 1e-9
}

/// Runs `body(iterations)` on `threads` threads released together; returns the wall
/// time divided by the per-thread iteration count: the time one update takes a thread
/// while the others do the same.
func measure(threads: Int, _ body: @escaping @Sendable (Int) -> Void) -> Double {
    final class Gate: Sendable {
        let ready = Atomic<Int>(0)
        let go = Atomic<Bool>(false)
    }
    let gate = Gate()
    let done = DispatchGroup()
    for _ in 0..<threads {
        done.enter()
        Thread {
            gate.ready.add(1, ordering: .relaxed)
            while !gate.go.load(ordering: .acquiring) {}
            body(iterations)
            done.leave()
        }.start()
    }
    while gate.ready.load(ordering: .relaxed) < threads {}
    let clock = ContinuousClock()
    let start = clock.now
    gate.go.store(true, ordering: .releasing)
    done.wait()
    return nanoseconds(clock.now - start) / Double(iterations)
}

let registry = MetricRegistry()
let metrics = try PushdMetrics(registry: registry, version: "bench")
let counter = metrics.sent(app: "shop", environment: "production", pushType: "alert", lane: "transactional")
let histogram = metrics.requestDuration(app: "shop", environment: "production")
let bare = BareAtomic()
// Latencies spread over the buckets, so the bucket search is not always the shortest.
let latencies: [Double] = [0.0008, 0.003, 0.007, 0.012, 0.03, 0.06, 0.2, 0.4, 0.9, 3]

func bareAdd(_ n: Int) { for _ in 0..<n { bare.value.wrappingAdd(1, ordering: .relaxed) } }
func increment(_ n: Int) { for _ in 0..<n { counter.increment() } }
func observe(_ n: Int) {
    var index = 0
    for _ in 0..<n {
        histogram.observe(latencies[index])
        index = index == latencies.count - 1 ? 0 : index + 1
    }
}

// Warm up caches and page in the code once.
bareAdd(1_000_000); increment(1_000_000); observe(1_000_000)

print("MetricsBench: \(iterations) updates per thread, \(ProcessInfo.processInfo.activeProcessorCount) CPUs")
var rows: [(String, Double, Double, Double)] = []
for threads in [1, 2] {
    let reference = measure(threads: threads) { bareAdd($0) }
    let counterNs = measure(threads: threads) { increment($0) }
    let histogramNs = measure(threads: threads) { observe($0) }
    rows.append(("\(threads) thread\(threads == 1 ? "" : "s")", reference, counterNs, histogramNs))
}
print("threads    bare atomic add   counter.increment (ratio)   histogram.observe (ratio)")
for (label, reference, counterNs, histogramNs) in rows {
    print(String(format: "%-10@ %10.2f ns     %10.2f ns (%5.2fx)       %10.2f ns (%5.2fx)",
                 label, reference, counterNs, counterNs / reference, histogramNs, histogramNs / reference))
}
let singleCounter = rows[0].2, singleHistogram = rows[0].3
print(String(format: "target: counter < 20 ns (%@), histogram < 50 ns (%@) single-threaded",
             singleCounter < 20 ? "met" : "missed", singleHistogram < 50 ? "met" : "missed"))
let expected = UInt64(iterations) * 3 + 1_000_000
print("check: counter total \(counter.value) (expected \(expected)), histogram count \(histogram.count) (expected \(expected))")
