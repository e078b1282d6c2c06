internal import CSignal
import Glibc
import Posix
import Synchronization

/// Delivers Unix signals as an `AsyncStream`. The handler, installed synchronously in
/// `init`, only writes the signal's number to a pipe (async-signal-safe); a thread of our
/// own reads the pipe and yields. A signal that arrives the moment `init` returns is
/// therefore delivered: libdispatch's signal sources arm asynchronously, and a SIGTERM sent
/// to a starting `pushd run` in that window was dropped while the signal was set to be
/// ignored, leaving a daemon that never drained.
///
/// Unchecked Sendable: the stored values never change after init; `cancel` may be called
/// from any thread and acts once.
final class SignalWatcher: @unchecked Sendable {
    let signals: AsyncStream<Int32>
    private let watched: [Int32]
    private let writeFD: Int32
    private let cancelled = Atomic<Bool>(false)

    /// Why signals cannot be watched: the call that failed and the system's reason. Start-up
    /// ends on it with one line instead of a trap.
    struct Failure: Error, CustomStringConvertible {
        var call: String
        var code: Int32
        var description: String { "cannot watch signals: \(call) failed: \(String(cString: strerror(code)))" }
    }

    init(_ numbers: [Int32]) throws {
        let (stream, continuation) = AsyncStream<Int32>.makeStream(bufferingPolicy: .unbounded)
        signals = stream
        watched = numbers
        var readEnd: Int32 = -1, writeEnd: Int32 = -1
        let opened = pushd_signal_pipe(&readEnd, &writeEnd)
        guard opened == 0 else { throw Failure(call: "pipe2", code: opened) }
        let readFD = readEnd
        writeFD = writeEnd
        do {
            try PosixThread.start(name: "pushd-signals") {
                // A process started with these signals blocked in every thread (the parent's mask
                // is inherited) would never run the handler: this thread takes them.
                for number in numbers { _ = pushd_signal_unblock(number) }
                var number: UInt8 = 0
                while true {
                    let count = read(readFD, &number, 1)
                    if count == 1 {
                        continuation.yield(Int32(number))
                    } else if count < 0 && errno == EINTR {
                        continue
                    } else {
                        break  // the write end closed: cancelled
                    }
                }
                close(readFD)
                continuation.finish()
            }
        } catch {
            close(readFD)
            close(writeEnd)
            throw Failure(call: "pthread_create (thread pushd-signals)", code: error.code)
        }
        for (index, number) in numbers.enumerated() {
            let result = pushd_signal_watch(number, writeFD)
            guard result == 0 else {
                // Leave nothing half-installed: the handlers set so far go back to their defaults,
                // and closing the write end ends the reading thread.
                for installed in numbers[..<index] { _ = pushd_signal_default(installed) }
                close(writeEnd)
                throw Failure(call: "sigaction(\(Self.name(number)))", code: result)
            }
            _ = pushd_signal_unblock(number)
        }
    }

    /// Restores the default actions; after this a watched signal acts as it normally would.
    func cancel() {
        guard !cancelled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for number in watched { _ = pushd_signal_default(number) }
        close(writeFD)
    }

    static func name(_ number: Int32) -> String {
        switch number {
        case SIGTERM: return "SIGTERM"
        case SIGINT: return "SIGINT"
        case SIGHUP: return "SIGHUP"
        case SIGUSR1: return "SIGUSR1"
        case SIGUSR2: return "SIGUSR2"
        default: return "signal \(number)"
        }
    }
}
