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

@Suite(.serialized) struct SignalWatcherStartupTests {
    /// The first `count` signals the watcher delivers, or fewer if they do not come within 3 s.
    private func delivered(_ count: Int, by watcher: SignalWatcher) async -> [Int32] {
        let received = Task { () -> [Int32] in
            var iterator = watcher.signals.makeAsyncIterator()
            var seen: [Int32] = []
            while seen.count < count, let number = await iterator.next() { seen.append(number) }
            return seen
        }
        let timeout = Task {
            try await Task.sleep(for: .seconds(3))
            received.cancel()
        }
        defer { timeout.cancel() }
        return await received.value
    }

    /// `pushd run` may be told to stop while it starts: a SIGTERM sent the moment the watcher
    /// exists must be seen, not dropped while a handler is still being armed elsewhere.
    @Test func aSignalSentTheMomentTheWatcherExistsIsDelivered() async throws {
        let watcher = SignalWatcher([SIGUSR1])
        defer { watcher.cancel() }
        kill(getpid(), SIGUSR1)
        #expect(await delivered(1, by: watcher) == [SIGUSR1], "the signal sent right after the watcher was made was lost")
    }

    @Test func eachWatchedSignalIsDeliveredOnce() async throws {
        let watcher = SignalWatcher([SIGUSR1, SIGWINCH])
        defer { watcher.cancel() }
        kill(getpid(), SIGUSR1)
        kill(getpid(), SIGWINCH)
        #expect(await delivered(3, by: watcher).sorted() == [SIGUSR1, SIGWINCH].sorted())
    }
}
