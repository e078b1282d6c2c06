#if canImport(Glibc)
import Glibc
#endif
import Polling
import Locking

/// Something the loop wakes when its descriptor is ready.
protocol EventLoopHandler: AnyObject {
    func handleEvents(readable: Bool, writable: Bool, hangup: Bool)
}

/// One server loop thread: the shared epoll loop (`Polling.EpollLoop`, the engine's too) plus
/// the mock's timers and cross-thread work items.
///
/// Thread ownership: `timers` and everything a handler touches belong to the loop thread.
/// Other threads only call `execute(_:)` and `stop()`.
final class EventLoop: EpollLoopDriver, EpollHandler, @unchecked Sendable {
    struct TimerID: Hashable { let raw: UInt64 }

    private let epoll: EpollLoop
    private var handlers: [Int32: EventLoopHandler] = [:]
    private var timers = TimerHeap()
    private var timerActions: [UInt64: () -> Void] = [:]
    /// Answers held back by a delay, in due order: one wait for all of them, not a timer each.
    let delayedAnswers = DelayedAnswers()
    private var nextTimerID: UInt64 = 1
    private let inbox = Lock<[@Sendable () -> Void]>([])

    init() throws(MockServerError) {
        do {
            epoll = try EpollLoop()
        } catch {
            throw .system(error.call, error.code)
        }
    }

    func start() throws(MockServerError) {
        do {
            try epoll.start(driver: self)
        } catch {
            throw .system(error.call, error.code)
        }
    }

    /// Stops the loop after the current iteration and waits for its thread.
    func stop() {
        epoll.stop()
    }

    /// Runs `work` on the loop thread at the next iteration.
    func execute(_ work: @escaping @Sendable () -> Void) {
        inbox.withLock { $0.append(work) }
        epoll.wake()
    }

    // MARK: loop-thread API

    func register(fd: Int32, handler: EventLoopHandler, writable: Bool = false) throws(MockServerError) {
        do {
            try epoll.watch(fd: fd, writable ? [.readable, .writable] : .readable, handler: self)
        } catch {
            throw .system(error.call, error.code)
        }
        handlers[fd] = handler
    }

    func setWritableInterest(fd: Int32, _ writable: Bool) {
        try? epoll.watch(fd: fd, writable ? [.readable, .writable] : .readable, handler: self)
    }

    func unregister(fd: Int32) {
        epoll.unwatch(fd: fd)
        handlers[fd] = nil
    }

    @discardableResult
    func schedule(afterMilliseconds delay: UInt64, _ action: @escaping () -> Void) -> TimerID {
        let id = nextTimerID
        nextTimerID += 1
        timers.push(deadline: Self.nowMilliseconds() &+ delay, id: id)
        timerActions[id] = action
        return TimerID(raw: id)
    }

    func cancel(_ timer: TimerID) {
        timerActions[timer.raw] = nil
    }

    static func nowMilliseconds() -> UInt64 {
        monotonicNanoseconds() / 1_000_000
    }

    // MARK: EpollHandler, EpollLoopDriver

    func handleEvents(fd: Int32, _ events: EpollEvents) {
        handlers[fd]?.handleEvents(readable: events.contains(.readable), writable: events.contains(.writable),
                                   hangup: !events.isDisjoint(with: [.hangup, .error]))
    }

    func prepareToWait() -> Int32 {
        runInbox()
        fireTimers()
        while let top = timers.peek(), timerActions[top.id] == nil { _ = timers.pop() }
        var timeout: Int32 = -1
        if let top = timers.peek() {
            let now = Self.nowMilliseconds()
            timeout = top.deadline <= now ? 0 : Int32(min(top.deadline - now, 60_000))
        }
        if let due = delayedAnswers.nextDeadline {
            // Rounded up: epoll waits whole milliseconds, and an answer must not leave early.
            let now = monotonicNanoseconds()
            let wait = due <= now ? 0 : Int32(min((due - now + 999_999) / 1_000_000, 60_000))
            timeout = timeout < 0 ? wait : min(timeout, wait)
        }
        return timeout
    }

    func workArrived() -> Bool {
        inbox.withLock { !$0.isEmpty }
    }

    func eventsHandled() {
        fireTimers()
    }

    func loopFinished() {}

    private func fireTimers() {
        if !timers.isEmpty {
            let now = Self.nowMilliseconds()
            while let top = timers.peek(), top.deadline <= now {
                _ = timers.pop()
                if let action = timerActions.removeValue(forKey: top.id) { action() }
            }
        }
        if !delayedAnswers.isEmpty { delayedAnswers.sendDue(now: monotonicNanoseconds()) }
    }

    private func runInbox() {
        let work = inbox.withLock { pending -> [@Sendable () -> Void] in
            let taken = pending
            pending.removeAll()
            return taken
        }
        for item in work { item() }
    }
}

/// A binary min-heap of (deadline, id); cancelled timers are dropped lazily when they surface.
struct TimerHeap {
    struct Entry { let deadline: UInt64; let id: UInt64 }
    private var entries: [Entry] = []

    var isEmpty: Bool { entries.isEmpty }

    func peek() -> Entry? { entries.first }

    mutating func push(deadline: UInt64, id: UInt64) {
        entries.append(Entry(deadline: deadline, id: id))
        var child = entries.count - 1
        while child > 0 {
            let parent = (child - 1) / 2
            if entries[parent].deadline <= entries[child].deadline { break }
            entries.swapAt(parent, child)
            child = parent
        }
    }

    mutating func pop() -> Entry? {
        guard !entries.isEmpty else { return nil }
        let top = entries[0]
        let last = entries.removeLast()
        if !entries.isEmpty {
            entries[0] = last
            var parent = 0
            while true {
                let left = parent * 2 + 1
                let right = left + 1
                var smallest = parent
                if left < entries.count && entries[left].deadline < entries[smallest].deadline { smallest = left }
                if right < entries.count && entries[right].deadline < entries[smallest].deadline { smallest = right }
                if smallest == parent { break }
                entries.swapAt(parent, smallest)
                parent = smallest
            }
        }
        return top
    }
}
