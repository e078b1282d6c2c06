@testable import Dispatcher
import Foundation
import Glibc
import Locking
import Polling
import Synchronization
import Testing

/// The two hand-overs between the threads that submit and the loop threads: the window's
/// wake-up of a blocked submitter, and the loop's wake-up when a request arrives. Each wakes
/// only when the other side sleeps; a wake-up lost in the race between "about to sleep" and
/// "work arrived" strands a submitter or a request for good once nothing else happens. These
/// tests run closed loops (each thread waits for what it handed over before it goes on, with
/// random pauses), so a stranded hand-over is never rescued by later traffic and shows as a
/// thread that waits past its bound.
@Suite struct HandOverTests {
    /// Submitters block on a small window; one thread returns slots in batches, as a loop does
    /// after each pass. Every `acquire` must return while slots come back. With one submitter
    /// and one slot each round is a race between the submitter going to sleep and the slot
    /// coming back; with six and eight slots, batches and thresholds come into it.
    @Test(arguments: [(submitters: 1, capacity: 1, rounds: 600_000), (submitters: 6, capacity: 8, rounds: 20_000)])
    func aSubmitterBlockedOnTheWindowIsAlwaysWoken(_ shape: (submitters: Int, capacity: Int, rounds: Int)) async throws {
        let gate = WindowGate(capacity: shape.capacity)
        let held = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
        let progress = Atomic<Int>(0)
        let stop = Atomic<Bool>(false)
        // Returns what the submitters took, all at once, after a short spin (so that a release
        // often meets a submitter on its way to sleep) or now and then a pause of up to 50 µs.
        Thread {
            var random = SystemRandomNumberGenerator()
            while !stop.load(ordering: .acquiring) {
                gate.release(held.exchange(0, ordering: .acquiringAndReleasing))
                if Int.random(in: 0..<64, using: &random) == 0 {
                    usleep(UInt32.random(in: 0...50, using: &random))
                } else {
                    for _ in 0..<Int.random(in: 0..<256, using: &random) where stop.load(ordering: .relaxed) { break }
                }
            }
        }.start()
        for _ in 0..<shape.submitters {
            Thread {
                var random = SystemRandomNumberGenerator()
                for _ in 0..<shape.rounds where !stop.load(ordering: .relaxed) {
                    gate.acquire()
                    held.add(1, ordering: .releasing)
                    progress.add(1, ordering: .relaxed)
                    if shape.submitters > 1, Int.random(in: 0..<16, using: &random) == 0 { usleep(UInt32.random(in: 0...20, using: &random)) }
                }
                finished.add(1, ordering: .releasing)
            }.start()
        }
        // Waits while the submitters get on; 5 s without a slot taken is a stranded submitter.
        var seen = -1
        var lastProgress = monotonicNanoseconds()
        while finished.load(ordering: .acquiring) < shape.submitters, monotonicNanoseconds() - lastProgress < 5_000_000_000 {
            try await Task.sleep(nanoseconds: 5_000_000)
            let now = progress.load(ordering: .relaxed)
            if now != seen {
                seen = now
                lastProgress = monotonicNanoseconds()
            }
        }
        let done = finished.load(ordering: .acquiring)
        stop.store(true, ordering: .releasing)
        // A stranded submitter never finishes its rounds: every slot it waits for is back.
        #expect(done == shape.submitters,
                "\(shape.submitters - done) submitters blocked for 5 s on a window with free slots, after \(seen) rounds")
        // Lets a stranded submitter go, so that it ends with the test.
        gate.release(shape.capacity)
    }

    /// `Condition.update` (behind `Semaphore.signal`, which pushd's `CompletionQueue` and the
    /// workers' stop signals use) wakes the waiters after it has let go of the mutex. A waiter
    /// that checked the value before the update must be woken by it, and one that checks after
    /// must see it. Closed loop: the updater publishes a round and waits until every waiter has
    /// seen it (on a second condition), with random spins and pauses on both sides, so each
    /// round is a race between a waiter going to sleep and the update; a lost wake-up strands
    /// a thread for the 5 s of its time-out. The waiters' voluntary context switches per
    /// round are printed: one is the sleep itself, more is a wake-up that found the mutex
    /// still held and slept again.
    @Test(arguments: [(waiters: 1, rounds: 100_000), (waiters: 3, rounds: 20_000)])
    func everyWaiterOnAConditionIsWokenByTheUpdateItWaitsFor(_ shape: (waiters: Int, rounds: Int)) async throws {
        let turn = Condition(0)
        let seen = Condition(0)
        let stranded = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
        let switches = Atomic<Int>(0)
        for _ in 0..<shape.waiters {
            Thread {
                var random = SystemRandomNumberGenerator()
                let before = Self.voluntarySwitchesOfThisThread()
                for round in 1...shape.rounds {
                    guard turn.wait(timeout: 5, until: { $0 >= round ? true : nil }) != nil else {
                        stranded.add(1, ordering: .relaxed)
                        break
                    }
                    seen.update { $0 += 1 }
                    Self.pause(&random)
                }
                switches.add(Self.voluntarySwitchesOfThisThread() - before, ordering: .relaxed)
                finished.add(1, ordering: .releasing)
            }.start()
        }
        Thread {
            var random = SystemRandomNumberGenerator()
            for round in 1...shape.rounds {
                turn.update { $0 = round }
                guard seen.wait(timeout: 5, until: { $0 >= round * shape.waiters ? true : nil }) != nil else {
                    stranded.add(1, ordering: .relaxed)
                    break
                }
                Self.pause(&random)
            }
            finished.add(1, ordering: .releasing)
        }.start()
        let deadline = monotonicNanoseconds() + 600_000_000_000
        while finished.load(ordering: .acquiring) < shape.waiters + 1, monotonicNanoseconds() < deadline {
            try await Task.sleep(nanoseconds: 10_000_000)
        }
        #expect(finished.load(ordering: .acquiring) == shape.waiters + 1)
        #expect(stranded.load(ordering: .relaxed) == 0, "threads waited 5 s for an update that had been made")
        print("condition hand-over: \(shape.waiters) waiters, \(shape.rounds) rounds, "
              + "\(Double(switches.load(ordering: .relaxed)) / Double(shape.waiters * shape.rounds)) voluntary switches per waiter and round")
    }

    /// Mostly a short spin (an update often meets a waiter on its way to sleep), now and then a
    /// pause of up to 50 µs.
    private static func pause(_ random: inout SystemRandomNumberGenerator) {
        if Int.random(in: 0..<64, using: &random) == 0 {
            usleep(UInt32.random(in: 0...50, using: &random))
        } else {
            var sink = 0
            for step in 0..<Int.random(in: 0..<256, using: &random) { sink &+= step }
            withExtendedLifetime(sink) {}
        }
    }

    private static func voluntarySwitchesOfThisThread() -> Int {
        var usage = rusage()
        getrusage(1, &usage)  // RUSAGE_THREAD, which Glibc's module does not name
        return usage.ru_nvcsw
    }

    /// Threads submit single requests with random pauses, each waiting for its answer before the
    /// next, so the loop goes to sleep and wakes again thousands of times. Every request must be
    /// answered within the bound: a request left in the inbox of a sleeping loop would wait for
    /// good (no other thread's submission wakes the loop while the inbox is not empty).
    @Test func everySingleSubmissionWakesASleepingLoop() async throws {
        try await withMock { _, port, material in
            var configuration = DispatcherConfiguration(host: "127.0.0.1", port: port)
            mockTuning(material, threads: 2, streams: 100)(&configuration)
            let threads = 4
            let rounds = 250
            let answered = (0..<(threads * rounds)).map { _ in Semaphore() }
            let engine = try HTTP2Dispatcher(configuration: configuration, onResult: { result in
                answered[Int(result.tag)].signal()
            })
            defer { engine.shutdown() }
            let request = try unauthenticatedRequest(1)
            let stranded = Atomic<Int>(0)
            let done = Atomic<Int>(0)
            for thread in 0..<threads {
                Thread {
                    var random = SystemRandomNumberGenerator()
                    for round in 0..<rounds {
                        let tag = thread * rounds + round
                        engine.submit(request, tag: UInt64(tag))
                        if !answered[tag].wait(timeout: 5) {
                            stranded.add(1, ordering: .relaxed)
                            break
                        }
                        // Mostly back at once (the loop is still awake), sometimes after it slept.
                        switch Int.random(in: 0..<10, using: &random) {
                        case 0..<5: break
                        case 5..<9: usleep(UInt32.random(in: 0...200, using: &random))
                        default: usleep(UInt32.random(in: 500...3_000, using: &random))
                        }
                    }
                    done.add(1, ordering: .releasing)
                }.start()
            }
            let deadline = monotonicNanoseconds() + 120_000_000_000
            while done.load(ordering: .acquiring) < threads, monotonicNanoseconds() < deadline {
                try await Task.sleep(nanoseconds: 10_000_000)
            }
            #expect(done.load(ordering: .acquiring) == threads)
            #expect(stranded.load(ordering: .relaxed) == 0, "requests not answered within 5 s of their submission")
            #expect(engine.outstanding == 0)
        }
    }
}
