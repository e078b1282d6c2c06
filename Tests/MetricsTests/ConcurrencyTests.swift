import Foundation
import Locking
import Testing
@testable import Metrics

@Suite struct ConcurrencyTests {
    /// Runs `body` on `threads` threads until `duration` has passed; each returns how
    /// many updates it made. Returns the per-thread counts.
    private func hammer(threads: Int, for duration: Duration, _ body: @escaping @Sendable () -> Void) -> [UInt64] {
        final class Counts: Sendable {
            let perThread: Lock<[UInt64]>
            init(_ threads: Int) { perThread = Lock([UInt64](repeating: 0, count: threads)) }
        }
        let counts = Counts(threads)
        let done = DispatchGroup()
        let deadline = ContinuousClock.now + duration
        for index in 0..<threads {
            done.enter()
            let thread = Thread {
                var local: UInt64 = 0
                while ContinuousClock.now < deadline {
                    for _ in 0..<1_000 { body() }
                    local += 1_000
                }
                counts.perThread.withLock { $0[index] = local }
                done.leave()
            }
            thread.start()
        }
        done.wait()
        return counts.perThread.withLock { $0 }
    }

    @Test func eightThreadsIncrementingForASecondGiveExactTotals() throws {
        let registry = MetricRegistry()
        let counter = try registry.counter("pushd_race_total", help: "R.", labels: ["app"]).labels("shop")
        let gauge = try registry.gauge("pushd_race_gauge", help: "R.").labels()
        let histogram = try registry.histogram("pushd_race_seconds", help: "R.", buckets: [0.5, 1.5]).labels()
        let perThread = hammer(threads: 8, for: .seconds(1)) {
            counter.increment()
            gauge.add(1)
            histogram.observe(1)
        }
        let total = perThread.reduce(0, +)
        #expect(perThread.allSatisfy { $0 > 0 })
        #expect(counter.value == total)
        #expect(gauge.value == Double(total))
        #expect(histogram.count == total)
        #expect(histogram.sum == Double(total))
        #expect(histogram.cumulativeCounts == [0, total, total])
        #expect(registry.expositionText().contains("pushd_race_total{app=\"shop\"} \(total)\n"))
    }

    @Test func bindingTheSameLabelsFromManyThreadsYieldsOneChild() throws {
        let registry = MetricRegistry()
        let family = try registry.counter("pushd_bind_race_total", help: "B.", labels: ["app"])
        let perThread = hammer(threads: 8, for: .milliseconds(200)) {
            try? family.labels("shop").increment()
        }
        #expect(try family.labels("shop").value == perThread.reduce(0, +))
        #expect(registry.expositionText().components(separatedBy: "pushd_bind_race_total{").count == 2)
    }
}
