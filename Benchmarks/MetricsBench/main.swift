// Prints nanoseconds per counter increment and per histogram observation, on one
// thread and on two threads updating the same series. References measured in the same
// run: a bare relaxed atomic add for counters, and a histogram without per-thread
// stripes for histograms. Then the cost of taking the project's `Lock` beside the
// toolchain's `Synchronization.Mutex` it replaced.
import Foundation
import Locking
import Metrics
import Synchronization

let iterations = 20_000_000
let runs = 3

/// The reference: what one relaxed atomic add costs on this machine.
final class BareAtomic: Sendable {
    let value = Atomic<UInt64>(0)
}

func nanoseconds(_ duration: Duration) -> Double {
    let (seconds, attoseconds) = duration.components
    return Double(seconds) * 1e9 + Double(attoseconds) * 1e-9
}

/// The reference for histograms: the same bucket search and updates with every cell in
/// one place, as a histogram without per-thread stripes would have them.
///
/// `@unchecked Sendable`: the cells are allocated once and only touched through atomics.
final class UnstripedHistogram: @unchecked Sendable {
    let bounds: [Double]
    let cells: UnsafeMutablePointer<Atomic<UInt64>>

    init(bounds: [Double]) {
        self.bounds = bounds
        cells = .allocate(capacity: bounds.count + 2)
        for index in 0..<(bounds.count + 2) { (cells + index).initialize(to: Atomic<UInt64>(0)) }
    }

    func observe(_ value: Double) {
        var index = 0
        while index < bounds.count && value > bounds[index] { index += 1 }
        cells[index].wrappingAdd(1, ordering: .relaxed)
        let sum = cells + bounds.count + 1
        var current = sum.pointee.load(ordering: .relaxed)
        while true {
            let (exchanged, original) = sum.pointee.weakCompareExchange(
                expected: current, desired: (Double(bitPattern: current) + value).bitPattern,
                successOrdering: .relaxed, failureOrdering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
}

/// CPU time this thread has used, in nanoseconds.
func threadCPUNanoseconds() -> UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &time)
    return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
}

/// Runs `body(iterations)` on `threads` threads released together. Returns the CPU time
/// per update averaged over the threads (what an update costs the thread making it,
/// cache-line waits included, preemption by other processes excluded) and the wall time
/// divided by the per-thread iteration count.
func measure(threads: Int, _ body: @escaping @Sendable (Int) -> Void) -> (cpu: Double, wall: Double) {
    final class Gate: Sendable {
        let ready = Atomic<Int>(0)
        let go = Atomic<Bool>(false)
        let cpuNanoseconds = Atomic<UInt64>(0)
    }
    let gate = Gate()
    let done = DispatchGroup()
    for _ in 0..<threads {
        done.enter()
        Thread {
            gate.ready.add(1, ordering: .relaxed)
            while !gate.go.load(ordering: .acquiring) {}
            let start = threadCPUNanoseconds()
            body(iterations)
            gate.cpuNanoseconds.add(threadCPUNanoseconds() - start, ordering: .relaxed)
            done.leave()
        }.start()
    }
    while gate.ready.load(ordering: .relaxed) < threads {}
    let clock = ContinuousClock()
    let start = clock.now
    gate.go.store(true, ordering: .releasing)
    done.wait()
    let wall = nanoseconds(clock.now - start) / Double(iterations)
    let cpu = Double(gate.cpuNanoseconds.load(ordering: .relaxed)) / Double(threads * iterations)
    return (cpu, wall)
}

/// The best of a few runs: other processes on the machine only ever add time.
func best(threads: Int, _ body: @escaping @Sendable (Int) -> Void) -> (cpu: Double, wall: Double) {
    let runs = (0..<runs).map { _ in measure(threads: threads, body) }
    return (runs.map(\.cpu).min() ?? 0, runs.map(\.wall).min() ?? 0)
}

let registry = MetricRegistry()
let metrics = try PushdMetrics(registry: registry, version: "bench")
let counter = metrics.sent(app: "shop", environment: "production", pushType: "alert", lane: "transactional")
let histogram = metrics.requestDuration(app: "shop", environment: "production")
let bare = BareAtomic()
// Latencies spread over the buckets, so the bucket search is not always the shortest.
let latencies: [Double] = [0.0008, 0.003, 0.007, 0.012, 0.03, 0.06, 0.2, 0.4, 0.9, 3]

let unstriped = UnstripedHistogram(bounds: HistogramBuckets.apnsLatency)

func bareAdd(_ n: Int) { for _ in 0..<n { bare.value.wrappingAdd(1, ordering: .relaxed) } }
func increment(_ n: Int) { for _ in 0..<n { counter.increment() } }
func observe(_ n: Int) {
    var index = 0
    for _ in 0..<n {
        histogram.observe(latencies[index])
        index = index == latencies.count - 1 ? 0 : index + 1
    }
}

func observeUnstriped(_ n: Int) {
    var index = 0
    for _ in 0..<n {
        unstriped.observe(latencies[index])
        index = index == latencies.count - 1 ? 0 : index + 1
    }
}

// Warm up caches and page in the code once.
bareAdd(1_000_000); increment(1_000_000); observe(1_000_000); observeUnstriped(1_000_000)

var loadAverage = [Double](repeating: 0, count: 3)
_ = getloadavg(&loadAverage, 3)
print("MetricsBench: \(iterations) updates per thread, best of \(runs) runs, \(ProcessInfo.processInfo.activeProcessorCount) CPUs, load average \(String(format: "%.2f", loadAverage[0]))")
print("ns per update: CPU time of the updating thread (wall time per thread in brackets); counter ratio to the bare atomic add, histogram ratio to the unstriped one")
print("threads    bare atomic add       counter.increment              unstriped histogram    histogram.observe")
var singleCounter = 0.0, singleHistogram = 0.0
for threads in [1, 2] {
    let reference = best(threads: threads) { bareAdd($0) }
    let counterNs = best(threads: threads) { increment($0) }
    let unstripedNs = best(threads: threads) { observeUnstriped($0) }
    let histogramNs = best(threads: threads) { observe($0) }
    if threads == 1 { (singleCounter, singleHistogram) = (counterNs.cpu, histogramNs.cpu) }
    print(String(format: "%-10@ %6.2f (%6.2f)      %6.2f (%6.2f) %5.2fx        %6.2f (%6.2f)        %6.2f (%6.2f) %5.2fx of unstriped",
                 "\(threads) thread\(threads == 1 ? "" : "s")", reference.cpu, reference.wall,
                 counterNs.cpu, counterNs.wall, counterNs.cpu / reference.cpu,
                 unstripedNs.cpu, unstripedNs.wall,
                 histogramNs.cpu, histogramNs.wall, histogramNs.cpu / unstripedNs.cpu))
}
print(String(format: "target: counter < 20 ns (%@), histogram < 50 ns (%@) on one thread",
             singleCounter < 20 ? "met" : "missed", singleHistogram < 50 ? "met" : "missed"))
let expected = UInt64(iterations * runs) * 3 + 1_000_000
print("check: counter total \(counter.value) (expected \(expected)), histogram count \(histogram.count) (expected \(expected))")

// A scrape of the catalog with 100 APNs response series and 10 latency histograms, the size of a busy
// deployment with a few apps.
for app in 0..<10 {
    for reason in ["none", "BadDeviceToken", "Unregistered", "TooManyRequests", "InternalServerError",
                   "ServiceUnavailable", "ExpiredProviderToken", "PayloadTooLarge", "DeviceTokenNotForTopic", "timeout"] {
        metrics.apnsResponse(app: "app\(app)", environment: "production", status: "400", reason: reason).increment()
    }
    metrics.requestDuration(app: "app\(app)", environment: "production").observe(0.02)
}
let scrapes = 1_000
let clock = ContinuousClock()
let scrapeStart = clock.now
var bytes = 0
for _ in 0..<scrapes { bytes = registry.exposition().count }
let scrapeMicroseconds = nanoseconds(clock.now - scrapeStart) / Double(scrapes) / 1_000
print(String(format: "scrape: %.1f µs for %d bytes (process metrics from /proc included)", scrapeMicroseconds, bytes))

// The project's Lock (a pthread mutex) beside the toolchain's Mutex (a futex) it replaced:
// one withLock around an integer add, uncontended on one thread and contended on two.
final class LockPair: Sendable {
    let lock = Lock<UInt64>(0)
    let mutex = Mutex<UInt64>(0)
}
let pair = LockPair()
func addUnderLock(_ n: Int) { for _ in 0..<n { pair.lock.withLock { $0 &+= 1 } } }
func addUnderMutex(_ n: Int) { for _ in 0..<n { pair.mutex.withLock { $0 &+= 1 } } }
addUnderLock(1_000_000); addUnderMutex(1_000_000)
print("threads    Mutex.withLock        Lock.withLock   (ns per lock, add and unlock; wall time per thread in brackets)")
for threads in [1, 2] {
    let mutexNs = best(threads: threads) { addUnderMutex($0) }
    let lockNs = best(threads: threads) { addUnderLock($0) }
    print(String(format: "%-10@ %6.2f (%6.2f)      %6.2f (%6.2f) %5.2fx of Mutex",
                 "\(threads) thread\(threads == 1 ? "" : "s")", mutexNs.cpu, mutexNs.wall,
                 lockNs.cpu, lockNs.wall, lockNs.cpu / mutexNs.cpu))
}
