/// Work held until a deadline, taken out in due order.
///
/// Delayed answers are added with a fixed delay, so each deadline is at or after the one
/// added before it: those go to a ring buffer, first in first out, at a constant cost and no
/// allocation once the ring has grown. A deadline earlier than the last one added (a random
/// delay, or a delay lowered at run time) goes to a min-heap beside it. Entries of equal
/// deadline leave in the order they were added, whichever of the two holds them.
struct DueQueue<Element> {
    private struct Entry {
        let deadline: UInt64
        let sequence: UInt64
        let element: Element

        func isBefore(_ other: Entry) -> Bool {
            deadline != other.deadline ? deadline < other.deadline : sequence < other.sequence
        }
    }

    private var ring: [Entry?] = []
    private var head = 0
    private var ringCount = 0
    private var heap: [Entry] = []
    private var nextSequence: UInt64 = 0

    var count: Int { ringCount + heap.count }
    var isEmpty: Bool { count == 0 }

    /// The earliest deadline held, nil when empty.
    var nextDeadline: UInt64? {
        switch (ringHead, heap.first) {
        case (nil, nil): return nil
        case (let entry?, nil), (nil, let entry?): return entry.deadline
        case (let ringEntry?, let heapEntry?): return min(ringEntry.deadline, heapEntry.deadline)
        }
    }

    mutating func add(_ element: Element, deadline: UInt64) {
        let entry = Entry(deadline: deadline, sequence: nextSequence, element: element)
        nextSequence &+= 1
        if ringCount == 0 || ring[(head + ringCount - 1) & (ring.count - 1)]!.deadline <= deadline {
            appendToRing(entry)
        } else {
            pushToHeap(entry)
        }
    }

    /// The earliest element whose deadline is at or before `now`, removed; nil when none is due.
    mutating func popDue(now: UInt64) -> Element? {
        let fromRing: Bool
        switch (ringHead, heap.first) {
        case (nil, nil): return nil
        case (let entry?, nil):
            guard entry.deadline <= now else { return nil }
            fromRing = true
        case (nil, let entry?):
            guard entry.deadline <= now else { return nil }
            fromRing = false
        case (let ringEntry?, let heapEntry?):
            fromRing = ringEntry.isBefore(heapEntry)
            guard (fromRing ? ringEntry : heapEntry).deadline <= now else { return nil }
        }
        return fromRing ? popRing().element : popHeap().element
    }

    /// Drops every element `shouldRemove` picks, keeping the order of the rest.
    mutating func removeAll(where shouldRemove: (Element) -> Bool) {
        var kept: [Entry] = []
        kept.reserveCapacity(ringCount)
        while ringCount > 0 {
            let entry = popRing()
            if !shouldRemove(entry.element) { kept.append(entry) }
        }
        for entry in kept { appendToRing(entry) }
        let heapKept = heap.filter { !shouldRemove($0.element) }
        heap.removeAll(keepingCapacity: true)
        for entry in heapKept { pushToHeap(entry) }
    }

    // MARK: ring

    private var ringHead: Entry? { ringCount == 0 ? nil : ring[head] }

    private mutating func appendToRing(_ entry: Entry) {
        if ringCount == ring.count { growRing() }
        ring[(head + ringCount) & (ring.count - 1)] = entry
        ringCount += 1
    }

    private mutating func popRing() -> Entry {
        let entry = ring[head]!
        ring[head] = nil
        head = (head + 1) & (ring.count - 1)
        ringCount -= 1
        return entry
    }

    /// Doubles the ring (a power of two, so positions wrap with a mask), oldest first.
    private mutating func growRing() {
        var grown = [Entry?](repeating: nil, count: max(64, ring.count * 2))
        for index in 0..<ringCount { grown[index] = ring[(head + index) & (ring.count - 1)] }
        ring = grown
        head = 0
    }

    // MARK: heap

    private mutating func pushToHeap(_ entry: Entry) {
        heap.append(entry)
        var child = heap.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            guard heap[child].isBefore(heap[parent]) else { break }
            heap.swapAt(parent, child)
            child = parent
        }
    }

    private mutating func popHeap() -> Entry {
        let top = heap[0]
        let last = heap.removeLast()
        guard !heap.isEmpty else { return top }
        heap[0] = last
        var parent = 0
        while true {
            let left = parent * 2 + 1
            let right = left + 1
            var first = parent
            if left < heap.count && heap[left].isBefore(heap[first]) { first = left }
            if right < heap.count && heap[right].isBefore(heap[first]) { first = right }
            if first == parent { break }
            heap.swapAt(parent, first)
            parent = first
        }
        return top
    }
}
