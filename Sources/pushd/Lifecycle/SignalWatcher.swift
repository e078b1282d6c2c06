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

    init(_ numbers: [Int32]) {
        let (stream, continuation) = AsyncStream<Int32>.makeStream(bufferingPolicy: .unbounded)
        signals = stream
        watched = numbers
        var readEnd: Int32 = -1, writeEnd: Int32 = -1
        let opened = pushd_signal_pipe(&readEnd, &writeEnd)
        precondition(opened == 0, "cannot watch signals: pipe2: \(String(cString: strerror(opened)))")
        let readFD = readEnd
        writeFD = writeEnd
        PosixThread.detach(name: "pushd-signals") {
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
        for number in numbers {
            let result = pushd_signal_watch(number, writeFD)
            precondition(result == 0, "cannot watch \(Self.name(number)): sigaction: \(String(cString: strerror(result)))")
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
