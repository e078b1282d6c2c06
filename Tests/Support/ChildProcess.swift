import Foundation
import Glibc
import Spawn

/// A program a test starts (pushd, apns-mock, curl, openssl …), with the part of
/// Foundation's `Process` the tests use.
///
/// Foundation's `Process.run` on Linux lists /proc/self/fd to close this process's
/// descriptors in the child, and the toolchain's corelibs copy each entry's whole 256-byte
/// name, reading past the end of glibc's buffer: now and then the test process dies of a
/// bad pointer while starting a child (seen in CI starting `pushd status`). This starts
/// children with `Subprocess` (posix_spawn; every descriptor above 2 is closed in the
/// child by the C library) and, as Foundation does, reaps each on a thread of its own, so
/// an exited child never lingers as a zombie that `kill(pid, 0)` still finds.
public final class ChildProcess: @unchecked Sendable {
    public enum TerminationReason: Sendable { case exit, uncaughtSignal }

    public var executableURL: URL?
    public var arguments: [String]?
    /// The child's whole environment; this process's when nil.
    public var environment: [String: String]?
    public var currentDirectoryURL: URL?
    /// Each a `Pipe` (the child gets its far end, which this process then closes), a
    /// `FileHandle` (`FileHandle.nullDevice` or nil for /dev/null); left alone, this process's own stream.
    public var standardInput: Any? = FileHandle.standardInput
    public var standardOutput: Any? = FileHandle.standardOutput
    public var standardError: Any? = FileHandle.standardError

    private let state = NSCondition()
    private var pid: pid_t = 0
    private var termination: Subprocess.Termination?

    public init() {}

    public var processIdentifier: Int32 { state.withLock { pid } }

    public var isRunning: Bool { state.withLock { pid != 0 && termination == nil } }

    /// The exit code, or the number of the signal that ended the program.
    public var terminationStatus: Int32 {
        switch ended() {
        case .exited(let code): return code
        case .signalled(let signal): return signal
        case .unknown: return -1
        }
    }

    public var terminationReason: TerminationReason {
        if case .signalled = ended() { return .uncaughtSignal }
        return .exit
    }

    public func run() throws {
        guard let executableURL else { throw Subprocess.Failure(description: "no executableURL to run") }
        precondition(processIdentifier == 0, "\(executableURL.path) was started already")
        var handedOver = [FileHandle]()
        func stream(_ value: Any?, number: Int32) -> Subprocess.Stream {
            switch value {
            case nil: return .discard
            case let pipe as Pipe:
                let far = number == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting
                if !handedOver.contains(where: { $0 === far }) { handedOver.append(far) }
                return .descriptor(far.fileDescriptor)
            case let handle as FileHandle:
                // Foundation's null device has no descriptor of its own.
                if handle === FileHandle.nullDevice || handle.fileDescriptor < 0 { return .discard }
                return handle.fileDescriptor == number ? .inherit : .descriptor(handle.fileDescriptor)
            default:
                preconditionFailure("standard stream \(number) of \(executableURL.path): \(type(of: value!)) is neither a Pipe nor a FileHandle")
            }
        }
        let input = stream(standardInput, number: 0), output = stream(standardOutput, number: 1)
        let error = stream(standardError, number: 2)
        let child = try Subprocess.start([executableURL.path] + (arguments ?? []), environment: environment,
                                         directory: currentDirectoryURL?.path, input: input, output: output, error: error)
        // The child holds its ends now: a reader of the output sees its end once the child exits.
        for handle in handedOver { try? handle.close() }
        state.withLock { pid = child.pid }
        let reaper = Thread { [self] in
            // Waits for the exit without reaping, then reaps under the lock: `terminate` never
            // signals a pid that is already free for another process.
            var info = siginfo_t()
            while waitid(P_PID, id_t(child.pid), &info, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
            state.withLock {
                var reaped = child
                termination = reaped.waitForTermination()
                state.broadcast()
            }
        }
        reaper.name = "reaper of \(child.pid)"
        reaper.start()
    }

    /// Returns at once for a program that was never started (its `run` threw).
    public func waitUntilExit() {
        if processIdentifier != 0 { _ = ended() }
    }

    /// Sends SIGTERM while the program runs.
    public func terminate() {
        state.withLock {
            if pid != 0 && termination == nil { kill(pid, SIGTERM) }
        }
    }

    private func ended() -> Subprocess.Termination {
        state.lock()
        defer { state.unlock() }
        precondition(pid != 0, "\(executableURL?.path ?? "a program") was never started")
        while termination == nil { state.wait() }
        return termination!
    }
}
