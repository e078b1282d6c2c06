internal import CEpoll
import Glibc
import Synchronization

/// What a descriptor is ready for, or wanted for.
public struct EpollEvents: OptionSet, Sendable, Hashable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let readable = EpollEvents(rawValue: 1)
    public static let writable = EpollEvents(rawValue: 2)
    /// The peer hung up or the descriptor is in error (reported whether asked for or not).
    public static let hangup = EpollEvents(rawValue: 4)
    public static let error = EpollEvents(rawValue: 8)

    var mask: UInt32 {
        var mask: UInt32 = 0
        if contains(.readable) { mask |= pushd_epoll_in() | pushd_epoll_rdhup() }
        if contains(.writable) { mask |= pushd_epoll_out() }
        return mask
    }

    init(mask: UInt32) {
        var events: EpollEvents = []
        if mask & (pushd_epoll_in() | pushd_epoll_rdhup()) != 0 { events.insert(.readable) }
        if mask & pushd_epoll_out() != 0 { events.insert(.writable) }
        if mask & pushd_epoll_hup() != 0 { events.insert(.hangup) }
        if mask & pushd_epoll_err() != 0 { events.insert(.error) }
        self = events
    }
}

/// The epoll_ctl operations.
enum EpollOperation {
    case add, modify, delete

    var code: Int32 {
        switch self {
        case .add: pushd_epoll_ctl_add()
        case .modify: pushd_epoll_ctl_mod()
        case .delete: pushd_epoll_ctl_del()
        }
    }
}

/// Told when a watched descriptor is ready.
public protocol EpollHandler: AnyObject {
    func handleEvents(fd: Int32, _ events: EpollEvents)
}

/// The work a loop's owner does around each wait, on the loop's thread.
public protocol EpollLoopDriver: AnyObject {
    /// Before each wait: do what is due and return the longest wait in milliseconds, -1 for
    /// none (until a descriptor or `wake`), 0 to only poll.
    func prepareToWait() -> Int32
    /// After the loop announced it will sleep: true when work arrived meanwhile, so it polls
    /// instead (a producer that saw the loop awake did not write the eventfd).
    func workArrived() -> Bool
    /// After the ready descriptors of one wait were handled.
    func eventsHandled()
    /// On the loop's thread after its last iteration, before `stop` returns.
    func loopFinished()
}

public struct EpollError: Error, Sendable, CustomStringConvertible {
    public var call: String
    public var code: Int32
    public var description: String { "\(call): \(String(cString: strerror(code)))" }
}

/// One epoll loop on one thread, shared by the engine's libcurl loops and apns-mock's server
/// loops: descriptors with their handlers, an eventfd to wake it, and a driver that does the
/// owner's work between waits.
///
/// Thread rule: `watch`, `unwatch` and the handlers run on the loop's thread only (or before
/// `start`). Other threads call `wake`, `wakeIfSleeping` and `stop`.
public final class EpollLoop: @unchecked Sendable {
    private let epollFD: Int32
    private let wakeFD: Int32
    /// Indexed by descriptor: descriptors are small and dense, and a lookup per event matters.
    private var handlers: [EpollHandler?] = []
    private var interests: [EpollEvents] = []
    private let stopping = Atomic<Bool>(false)
    private let sleeping = Atomic<Bool>(false)
    private var thread: pthread_t?
    /// The driver `start` was given, held by the loop's thread until it ends. Not a weak
    /// reference: a weak reference gives the driver a side table, and every retain and release
    /// of it (libcurl's callbacks reach the engine's loop several times per request) then took
    /// the runtime's slow path. The thread keeps its driver alive, as it keeps this loop.
    private var driver: EpollLoopDriver?
    /// Nanoseconds the loop has spent blocked in `epoll_wait` since it started: with the
    /// clock, how much of its time the loop had to spare. Read on the loop's thread.
    public private(set) var idleNanoseconds: UInt64 = 0
    private var startNiceness: Int32 = 0

    public init() throws(EpollError) {
        epollFD = pushd_epoll_create()
        if epollFD < 0 { throw EpollError(call: "epoll_create1", code: errno) }
        wakeFD = pushd_epoll_eventfd()
        if wakeFD < 0 {
            let code = errno
            close(epollFD)
            throw EpollError(call: "eventfd", code: code)
        }
        let code = pushd_epoll_control(epollFD, EpollOperation.add.code, wakeFD, pushd_epoll_in())
        if code != 0 {
            close(wakeFD)
            close(epollFD)
            throw EpollError(call: "epoll_ctl(eventfd)", code: code)
        }
    }

    deinit {
        close(wakeFD)
        close(epollFD)
    }

    // MARK: - Any thread

    /// Runs the loop on a new thread until `stop`. A `niceness` above 0 lowers the thread's
    /// scheduling priority (see `ThreadPriority`): the loops of bulk work yield the CPU to
    /// those of urgent work.
    public func start(driver: EpollLoopDriver, niceness: Int32 = 0) throws(EpollError) {
        self.driver = driver
        let retained = Unmanaged.passRetained(self).toOpaque()
        startNiceness = niceness
        var tid = pthread_t()
        let result = pthread_create(&tid, nil, { argument in
            let loop = Unmanaged<EpollLoop>.fromOpaque(argument!).takeRetainedValue()
            ThreadPriority.lowerCurrentThread(to: loop.startNiceness)
            loop.run()
            return nil
        }, retained)
        if result != 0 {
            self.driver = nil
            Unmanaged<EpollLoop>.fromOpaque(retained).release()
            throw EpollError(call: "pthread_create", code: result)
        }
        thread = tid
    }

    /// Stops the loop after its current iteration and waits for its thread.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        wake()
        if let thread { pthread_join(thread, nil) }
        thread = nil
    }

    public var isStopping: Bool { stopping.load(ordering: .acquiring) }

    public func wake() {
        var one: UInt64 = 1
        _ = write(wakeFD, &one, 8)
    }

    /// Wakes the loop only when it is (about to be) asleep; a busy loop asks its driver for
    /// work before it next waits anyway.
    public func wakeIfSleeping() {
        if sleeping.load(ordering: .sequentiallyConsistent) { wake() }
    }

    // MARK: - Loop thread

    /// Watches `fd` for `events` (replacing an earlier interest); empty events keep the handler
    /// but ask for nothing.
    public func watch(fd: Int32, _ events: EpollEvents, handler: EpollHandler) throws(EpollError) {
        let index = Int(fd)
        if index >= handlers.count {
            let grown = index + 64 - handlers.count
            handlers += [EpollHandler?](repeating: nil, count: grown)
            interests += [EpollEvents](repeating: [], count: grown)
        }
        let operation: EpollOperation = handlers[index] == nil ? .add : .modify
        var code = pushd_epoll_control(epollFD, operation.code, fd, events.mask)
        if code == EEXIST { code = pushd_epoll_control(epollFD, EpollOperation.modify.code, fd, events.mask) }
        if code == ENOENT { code = pushd_epoll_control(epollFD, EpollOperation.add.code, fd, events.mask) }
        if code != 0 { throw EpollError(call: "epoll_ctl(\(operation))", code: code) }
        handlers[index] = handler
        interests[index] = events
    }

    /// The interest registered for `fd`, nil when it is not watched.
    public func interest(fd: Int32) -> EpollEvents? {
        let index = Int(fd)
        guard index >= 0, index < handlers.count, handlers[index] != nil else { return nil }
        return interests[index]
    }

    /// Stops watching `fd`; harmless when it is not watched (or already closed).
    public func unwatch(fd: Int32) {
        let index = Int(fd)
        guard index >= 0, index < handlers.count, handlers[index] != nil else { return }
        _ = pushd_epoll_control(epollFD, EpollOperation.delete.code, fd, 0)
        handlers[index] = nil
        interests[index] = []
    }

    private func run() {
        guard let driver else { return }
        // Let go when the loop ends: the driver usually owns this loop.
        defer { self.driver = nil }
        var readyFDs = [Int32](repeating: 0, count: 256)
        var readyMasks = [UInt32](repeating: 0, count: 256)
        while !stopping.load(ordering: .acquiring) {
            var timeout = driver.prepareToWait()
            if stopping.load(ordering: .acquiring) { break }
            if timeout != 0 {
                // Announce the sleep, then ask once more: work handed over before the
                // announcement is seen here, work handed over after it writes the eventfd.
                sleeping.store(true, ordering: .sequentiallyConsistent)
                if driver.workArrived() { timeout = 0 }
            }
            let blockedFrom = timeout != 0 ? monotonicNanoseconds() : 0
            let ready = readyFDs.withUnsafeMutableBufferPointer { fds in
                readyMasks.withUnsafeMutableBufferPointer { masks in
                    pushd_epoll_wait(epollFD, fds.baseAddress, masks.baseAddress, 256, timeout)
                }
            }
            if timeout != 0 { idleNanoseconds &+= monotonicNanoseconds() &- blockedFrom }
            sleeping.store(false, ordering: .sequentiallyConsistent)
            if ready > 0 {
                for slot in 0..<Int(ready) {
                    let fd = readyFDs[slot]
                    if fd == wakeFD {
                        var value: UInt64 = 0
                        _ = read(wakeFD, &value, 8)
                        continue
                    }
                    let index = Int(fd)
                    guard index < handlers.count, let handler = handlers[index] else { continue }
                    handler.handleEvents(fd: fd, EpollEvents(mask: readyMasks[slot]))
                }
            }
            driver.eventsHandled()
        }
        driver.loopFinished()
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
public func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

/// Per-thread scheduling priority. On Linux the nice value belongs to the thread, so a bulk
/// lane's threads can give way to an urgent lane's within one process.
public enum ThreadPriority {
    /// Sets the calling thread's nice value to `niceness` (0…19) when that is lower priority
    /// than it has; raising priority back needs privileges, so it is never attempted.
    public static func lowerCurrentThread(to niceness: Int32) {
        guard niceness > 0 else { return }
        let thread = id_t(pushd_epoll_thread_id())
        errno = 0
        let current = getpriority(__priority_which_t(PRIO_PROCESS.rawValue), thread)
        if errno == 0, current >= niceness { return }
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), thread, min(19, niceness))
    }

    /// The calling thread's nice value.
    public static var currentThread: Int32 {
        getpriority(__priority_which_t(PRIO_PROCESS.rawValue), id_t(pushd_epoll_thread_id()))
    }
}
