import Foundation
import PushdTestSupport
import Glibc
import Testing
@testable import pushd

@Suite struct SignalWatcherTests {
    @Test func deliversASignalSentToTheProcess() async throws {
        let watcher = try SignalWatcher([SIGUSR2])
        defer { watcher.cancel() }
        // The dispatch source is armed asynchronously, so keep signalling until it
        // reports one (the signal is ignored, not fatal, in the meantime), for at most 5 s.
        let sender = Task {
            for _ in 0..<250 {
                kill(getpid(), SIGUSR2)
                try await Task.sleep(for: .milliseconds(20))
            }
        }
        var iterator = watcher.signals.makeAsyncIterator()
        let received = await iterator.next()
        // The sender is done before the watcher puts SIGUSR2's default action back (which
        // ends the process): one already awake could otherwise still send it.
        sender.cancel()
        _ = await sender.result
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
        let watcher = try SignalWatcher([SIGUSR1])
        defer { watcher.cancel() }
        kill(getpid(), SIGUSR1)
        #expect(await delivered(1, by: watcher) == [SIGUSR1], "the signal sent right after the watcher was made was lost")
    }

    @Test func eachWatchedSignalIsDeliveredOnce() async throws {
        let watcher = try SignalWatcher([SIGUSR1, SIGWINCH])
        defer { watcher.cancel() }
        kill(getpid(), SIGUSR1)
        kill(getpid(), SIGWINCH)
        #expect(await delivered(3, by: watcher).sorted() == [SIGUSR1, SIGWINCH].sorted())
    }
}

/// `pushd run` out of file descriptors when it starts: the signal watcher cannot make its pipe.
@Suite struct SignalWatcherFailureTests {
    /// Starts `pushd run` with at most `limit` open files (set by the shell, inherited by
    /// pushd) and ends it after 3 s if it is still running.
    private func run(config: String, limit: Int, folder: FileFixture) throws -> (process: ChildProcess, errors: String) {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", "ulimit -n \(limit) && exec \"$0\" run --config \"$1\"", PushdBinary.path, config]
        process.environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
        let errors = folder.path("errors-\(limit)")
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errors))
        try process.run()
        let deadline = Date().addingTimeInterval(3)
        while process.isRunning && Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return (process, (try? String(contentsOfFile: errors, encoding: .utf8)) ?? "")
    }

    /// The descriptors pushd opens before the watcher (standard streams, the metrics socket)
    /// differ between builds, so the limit is raised one at a time until a start gets as far
    /// as the watcher's pipe. That start must end with exit 1 and one line naming the call,
    /// not a trap.
    @Test func aPipeThatCannotBeMadeEndsRunWithOneLineNamingTheCall() throws {
        let folder = try FileFixture()
        try folder.signingKey("key.p8")
        try folder.certificate("ca")
        let config = try folder.write("pushd.yml", """
            database:
              url: postgresql://pushd@127.0.0.1:1/pushd
            metrics:
              listen: 127.0.0.1:0
            apns:
              ca_file: \(folder.path("ca.crt"))
            apps:
              - name: shop
                bundle_id: com.example.shop
                environment: sandbox
                token:
                  team_id: TEAM123456
                  key_id: KEY1234567
                  key_file: \(folder.path("key.p8"))
            """)
        var reached: (process: ChildProcess, errors: String)?
        for limit in 4...12 {
            let attempt = try run(config: config, limit: limit, folder: folder)
            if attempt.errors.contains("watch signals") {
                reached = attempt
                break
            }
        }
        let failed = try #require(reached, "no start with 4 to 12 open files got as far as the signal watcher")
        #expect(failed.process.terminationReason == .exit, "pushd was killed by a signal: \(failed.errors)")
        #expect(failed.process.terminationStatus == 1)
        let lines = failed.errors.split(separator: "\n")
        #expect(lines == ["pushd: cannot watch signals: pipe2 failed: \(String(cString: strerror(EMFILE)))"], "\(failed.errors)")
    }
}
