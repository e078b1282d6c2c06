import Dispatch
import Glibc

/// Delivers Unix signals as an `AsyncStream`, through `DispatchSource` so nothing
/// runs in signal-handler context. The default action of each watched signal is
/// replaced (ignored) for as long as the watcher lives.
///
/// Unchecked Sendable: the stored arrays never change after init, and dispatch
/// sources may be cancelled from any thread.
final class SignalWatcher: @unchecked Sendable {
    let signals: AsyncStream<Int32>
    private let sources: [any DispatchSourceSignal]
    private let watched: [Int32]

    init(_ numbers: [Int32]) {
        let (stream, continuation) = AsyncStream<Int32>.makeStream(bufferingPolicy: .unbounded)
        signals = stream
        watched = numbers
        let queue = DispatchQueue(label: "pushd.signals")
        sources = numbers.map { number in
            Glibc.signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number, queue: queue)
            source.setEventHandler { continuation.yield(number) }
            source.resume()
            return source
        }
        continuation.onTermination = { _ in }
    }

    /// Restores the default actions; after this a watched signal acts as it normally would.
    func cancel() {
        for source in sources { source.cancel() }
        for number in watched { Glibc.signal(number, SIG_DFL) }
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
