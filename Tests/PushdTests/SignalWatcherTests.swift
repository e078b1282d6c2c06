import Glibc
import Testing
@testable import pushd

@Suite struct SignalWatcherTests {
    @Test func deliversASignalSentToTheProcess() async throws {
        let watcher = SignalWatcher([SIGUSR2])
        defer { watcher.cancel() }
        // The dispatch source is armed asynchronously, so keep signalling until it
        // reports one (the signal is ignored, not fatal, in the meantime), for at most 5 s.
        let sender = Task {
            for _ in 0..<250 {
                kill(getpid(), SIGUSR2)
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        defer { sender.cancel() }
        var iterator = watcher.signals.makeAsyncIterator()
        let received = await iterator.next()
        #expect(received == SIGUSR2)
        #expect(SignalWatcher.name(SIGUSR2) == "SIGUSR2")
    }
}
