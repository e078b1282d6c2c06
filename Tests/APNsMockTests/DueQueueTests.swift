@testable import APNsMock
import Testing

@Suite("apns-mock delayed answers: due order")
struct DueQueueTests {
    @Test func aFixedDelayLeavesFirstInFirstOutAndOnlyWhenDue() {
        var queue = DueQueue<Int>()
        for index in 0..<200 { queue.add(index, deadline: 1_000 + UInt64(index / 10)) }
        #expect(queue.nextDeadline == 1_000)
        #expect(queue.popDue(now: 999) == nil)
        var taken: [Int] = []
        while let element = queue.popDue(now: 1_004) { taken.append(element) }
        #expect(taken == Array(0..<50))
        #expect(queue.nextDeadline == 1_005)
        while let element = queue.popDue(now: .max) { taken.append(element) }
        #expect(taken == Array(0..<200))
        #expect(queue.isEmpty && queue.nextDeadline == nil)
    }

    /// Adds and takes interleaved, so the ring wraps and grows with entries in it; deadlines
    /// that go back (a random delay, a delay lowered at run time) mixed in. Every element
    /// leaves once, by deadline, equal deadlines in the order added.
    @Test func mixedDeadlinesLeaveByDeadlineThenOrderAddedAndNoneIsLost() {
        var generator = SplitMix64(seed: 16)
        var queue = DueQueue<Int>()
        var expected: [(deadline: UInt64, element: Int)] = []
        var taken: [(deadline: UInt64, element: Int)] = []
        var now: UInt64 = 0
        var next = 0
        for round in 0..<400 {
            for _ in 0..<Int(generator.next() % 12) {
                let backwards = round % 3 == 0 && generator.next() % 4 == 0
                let deadline = now + 50 - (backwards ? generator.next() % 40 : 0) + UInt64(round % 5)
                queue.add(next, deadline: deadline)
                expected.append((deadline, next))
                next += 1
            }
            now += generator.next() % 4
            var pass: [(deadline: UInt64, element: Int)] = []
            while let element = queue.popDue(now: now) {
                let deadline = expected.first { $0.element == element }!.deadline
                #expect(deadline <= now, "element \(element) due at \(deadline) taken at \(now)")
                pass.append((deadline, element))
            }
            // One pass takes what is due earliest first, equal deadlines in the order added.
            for (earlier, later) in zip(pass, pass.dropFirst()) {
                #expect(earlier.deadline < later.deadline || (earlier.deadline == later.deadline && earlier.element < later.element))
            }
            taken += pass
            if let due = queue.nextDeadline { #expect(due > now) }
        }
        while let element = queue.popDue(now: .max) {
            taken.append((expected.first { $0.element == element }!.deadline, element))
        }
        #expect(taken.count == expected.count)
        #expect(Set(taken.map(\.element)).count == expected.count)
        // Taken in due order across passes: a later pass never takes an earlier deadline than
        // one still held, and within a deadline the order added.
        for (earlier, later) in zip(taken, taken.dropFirst()) where earlier.deadline == later.deadline {
            #expect(earlier.element < later.element)
        }
        #expect(queue.isEmpty)
    }

    @Test func removingOneOwnersEntriesKeepsTheOthersInOrder() {
        var queue = DueQueue<Int>()
        for index in 0..<100 { queue.add(index, deadline: UInt64(index)) }
        for index in 100..<110 { queue.add(index, deadline: UInt64(index - 100)) }
        queue.removeAll { $0 % 3 == 0 }
        var taken: [Int] = []
        while let element = queue.popDue(now: .max) { taken.append(element) }
        let survivors = (0..<110).filter { $0 % 3 != 0 }
        #expect(taken.sorted() == survivors)
        #expect(taken.count == survivors.count)
        let deadlines = taken.map { UInt64($0 < 100 ? $0 : $0 - 100) }
        #expect(deadlines == deadlines.sorted())
    }
}
