internal import CNghttp2
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

/// Something the loop wakes when its descriptor is ready.
protocol EventLoopHandler: AnyObject {
    func handleEvents(readable: Bool, writable: Bool, hangup: Bool)
}

/// One epoll loop on one thread.
///
/// Thread ownership: `handlers`, `timers` and everything a handler touches belong to the loop
/// thread. Other threads only call `execute(_:)` and `stop()`, which lock `inbox` and write
/// the eventfd.
final class EventLoop: @unchecked Sendable {
    struct TimerID: Hashable { let raw: UInt64 }

    private struct Timer {
        let deadline: UInt64
        let id: UInt64
        let action: () -> Void
    }

    private let epollFD: Int32
    private let wakeFD: Int32
    private var handlers: [Int32: EventLoopHandler] = [:]
    private var timers = TimerHeap()
    private var timerActions: [UInt64: () -> Void] = [:]
    private var nextTimerID: UInt64 = 1
    private let inbox = Mutex<[@Sendable () -> Void]>([])
    private let stopping = Atomic<Bool>(false)
    private var thread: LoopThread?

    init() throws(MockServerError) {
        epollFD = pushd_nghttp2_epoll_create()
        if epollFD < 0 { throw .system("epoll_create1", errno) }
        wakeFD = pushd_nghttp2_eventfd()
        if wakeFD < 0 {
            let code = errno
            close(epollFD)
            throw .system("eventfd", code)
        }
        var event = epoll_event()
        event.events = pushd_nghttp2_epoll_mask(1, 0)
        event.data.fd = wakeFD
        if epoll_ctl(epollFD, Int32(EPOLL_CTL_ADD), wakeFD, &event) != 0 {
            let code = errno
            close(wakeFD)
            close(epollFD)
            throw .system("epoll_ctl(eventfd)", code)
        }
    }

    deinit {
        close(wakeFD)
        close(epollFD)
    }

    func start() throws(MockServerError) {
        thread = try LoopThread { [self] in run() }
    }

    /// Stops the loop after the current iteration and waits for its thread.
    func stop() {
        stopping.store(true, ordering: .releasing)
        wake()
        thread?.join()
        thread = nil
    }

    /// Runs `work` on the loop thread at the next iteration.
    func execute(_ work: @escaping @Sendable () -> Void) {
        inbox.withLock { $0.append(work) }
        wake()
    }

    private func wake() {
        var one: UInt64 = 1
        _ = withUnsafeBytes(of: &one) { write(wakeFD, $0.baseAddress, 8) }
    }

    // MARK: loop-thread API

    func register(fd: Int32, handler: EventLoopHandler, writable: Bool = false) throws(MockServerError) {
        var event = epoll_event()
        event.events = Self.mask(writable: writable)
        event.data.fd = fd
        if epoll_ctl(epollFD, Int32(EPOLL_CTL_ADD), fd, &event) != 0 { throw .system("epoll_ctl(add)", errno) }
        handlers[fd] = handler
    }

    func setWritableInterest(fd: Int32, _ writable: Bool) {
        var event = epoll_event()
        event.events = Self.mask(writable: writable)
        event.data.fd = fd
        _ = epoll_ctl(epollFD, Int32(EPOLL_CTL_MOD), fd, &event)
    }

    func unregister(fd: Int32) {
        _ = epoll_ctl(epollFD, EPOLL_CTL_DEL, fd, nil)
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
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1000 + UInt64(spec.tv_nsec) / 1_000_000
    }

    private static func mask(writable: Bool) -> UInt32 {
        pushd_nghttp2_epoll_mask(1, writable ? 1 : 0)
    }

    private func run() {
        let capacity = 256
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        defer { events.deallocate() }
        while !stopping.load(ordering: .acquiring) {
            let count = epoll_wait(epollFD, events, Int32(capacity), nextTimeout())
            if count < 0 && errno != EINTR { break }
            if count > 0 {
                for index in 0..<Int(count) {
                    let event = events[index]
                    let fd = event.data.fd
                    if fd == wakeFD {
                        drainWake()
                        continue
                    }
                    guard let handler = handlers[fd] else { continue }
                    let flags = event.events
                    handler.handleEvents(
                        readable: pushd_nghttp2_epoll_is_readable(flags) != 0,
                        writable: pushd_nghttp2_epoll_is_writable(flags) != 0,
                        hangup: pushd_nghttp2_epoll_is_hangup(flags) != 0)
                }
            }
            fireTimers()
        }
    }

    private func nextTimeout() -> Int32 {
        while let top = timers.peek(), timerActions[top.id] == nil { _ = timers.pop() }
        guard let top = timers.peek() else { return -1 }
        let now = Self.nowMilliseconds()
        return top.deadline <= now ? 0 : Int32(min(top.deadline - now, 60_000))
    }

    private func fireTimers() {
        let now = Self.nowMilliseconds()
        while let top = timers.peek(), top.deadline <= now {
            _ = timers.pop()
            if let action = timerActions.removeValue(forKey: top.id) { action() }
        }
    }

    private func drainWake() {
        var value: UInt64 = 0
        _ = withUnsafeMutableBytes(of: &value) { read(wakeFD, $0.baseAddress, 8) }
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
