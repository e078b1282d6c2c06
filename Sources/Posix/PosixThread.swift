import Glibc

/// Threads of our own on pthreads, in place of Foundation's `Thread`, so that the daemon
/// needs no more than FoundationEssentials (Foundation would map libFoundation and ICU,
/// about 6 MB of resident memory in a process that uses neither).
public enum PosixThread {
    private final class Body: Sendable {
        let name: String
        let work: @Sendable () -> Void
        init(name: String, work: @escaping @Sendable () -> Void) {
            self.name = name
            self.work = work
        }

        func run() {
            PosixThread.nameCurrentThread(name)
            work()
        }
    }

    /// A thread that could not be made: the call and the system's reason.
    public struct StartFailure: Error, CustomStringConvertible {
        public var name: String
        public var code: Int32
        public var description: String {
            "cannot start thread \(name): pthread_create: \(String(cString: strerror(code)))"
        }
    }

    /// Runs `work` on a new detached thread named `name` (as `top -H` and /proc show it;
    /// the kernel keeps 15 bytes). A thread that cannot be made (the process is out of
    /// threads or memory) stops the process with the reason: every caller starts a worker
    /// the daemon cannot run without.
    public static func detach(name: String, _ work: @escaping @Sendable () -> Void) {
        do {
            try start(name: name, work)
        } catch {
            preconditionFailure(error.description)
        }
    }

    /// `detach` for a caller that can report the failure itself, such as start-up code that
    /// should end with a clear line rather than a trap.
    public static func start(name: String, _ work: @escaping @Sendable () -> Void) throws(StartFailure) {
        let body = Unmanaged.passRetained(Body(name: name, work: work)).toOpaque()
        var thread = pthread_t()
        let result = pthread_create(&thread, nil, { raw in
            Unmanaged<Body>.fromOpaque(raw!).takeRetainedValue().run()
            return nil
        }, body)
        if result != 0 {
            Unmanaged<Body>.fromOpaque(body).release()
            throw StartFailure(name: name, code: result)
        }
        pthread_detach(thread)
    }

    /// pthread_setname_np is hidden behind _GNU_SOURCE from Swift; the kernel takes the same
    /// name written to the thread's comm file. A name that cannot be set is only cosmetic.
    fileprivate static func nameCurrentThread(_ name: String) {
        let descriptor = open("/proc/thread-self/comm", O_WRONLY)
        guard descriptor >= 0 else { return }
        let bytes = Array(name.utf8.prefix(15))
        _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
    }

    /// Blocks the calling thread for `seconds` (nothing for zero or less), resuming after a
    /// signal handler interrupts the wait.
    public static func sleep(seconds: Double) {
        guard seconds > 0 else { return }
        let whole = seconds.rounded(.down)
        var request = timespec(tv_sec: Int(whole), tv_nsec: Int((seconds - whole) * 1_000_000_000))
        var remaining = timespec()
        while nanosleep(&request, &remaining) != 0 && errno == EINTR { request = remaining }
    }
}
