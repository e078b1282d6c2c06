/// A growable FIFO with O(1) push/pop at both ends, for the per-thread backlog: retried
/// requests go back to the front so they keep their place.
struct RingBuffer<Element> {
    private var storage: [Element?]
    private var head = 0
    private(set) var count = 0

    init(capacity: Int = 16) {
        storage = Array(repeating: nil, count: max(1, capacity))
    }

    var isEmpty: Bool { count == 0 }

    /// Elements it holds before it grows.
    var capacity: Int { storage.count }

    // Elements are moved in and out, not copied: a request holds references, and a copy
    // costs a retain and a release of each for every request the loop passes through.
    mutating func pushBack(_ element: consuming Element) {
        if count == storage.count { grow() }
        storage[(head + count) % storage.count] = consume element
        count += 1
    }

    mutating func pushFront(_ element: consuming Element) {
        if count == storage.count { grow() }
        head = (head - 1 + storage.count) % storage.count
        storage[head] = consume element
        count += 1
    }

    /// The element `popFront` would return, left in place.
    var front: Element? { count == 0 ? nil : storage[head] }

    mutating func popFront() -> Element? {
        guard count > 0 else { return nil }
        let element = storage[head].take()
        head = (head + 1) % storage.count
        count -= 1
        return element
    }

    private mutating func grow() {
        var bigger = [Element?](repeating: nil, count: storage.count * 2)
        for offset in 0..<count { bigger[offset] = storage[(head + offset) % storage.count].take() }
        storage = bigger
        head = 0
    }
}
