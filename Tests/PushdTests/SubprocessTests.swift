import Foundation
import Glibc
import PushdTestSupport
import Spawn
import Testing

/// Children started by pushd (the demo's PostgreSQL, openssl, curl) and by the tests
/// (pushd, apns-mock, `pushd status`) go through `Subprocess`.
@Suite struct SubprocessTests {
    /// A descriptor this process holds open without close-on-exec (as a Foundation `Pipe`'s
    /// are) must not live on in a child: a long-running child would hold the write end of
    /// another child's output pipe, and its reader would never see the end.
    @Test func aChildGetsOnlyItsStandardStreams() throws {
        var held: [Int32] = [0, 0]
        #expect(pipe(&held) == 0)
        defer { close(held[0]); close(held[1]) }
        let listing = Pipe()
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/ls")
        process.arguments = ["/proc/self/fd"]
        process.standardOutput = listing
        process.standardError = FileHandle.nullDevice
        try process.run()
        let output = String(decoding: listing.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        // 0, 1 and 2, and the descriptor ls opened to read the directory.
        let descriptors = output.split(separator: "\n").compactMap { Int32($0) }.sorted()
        #expect(descriptors == [0, 1, 2, 3], "the child held \(descriptors) (this process holds \(held[0]) and \(held[1]))")
    }

    @Test func anExitCodeAndASignalAreToldApart() throws {
        func run(_ script: String) throws -> ChildProcess {
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/bin/sh")
            process.arguments = ["-c", script]
            try process.run()
            process.waitUntilExit()
            return process
        }
        let exited = try run("exit 130")
        #expect(exited.terminationReason == .exit && exited.terminationStatus == 130)
        let killed = try run("kill -TERM $$")
        #expect(killed.terminationReason == .uncaughtSignal && killed.terminationStatus == SIGTERM)
    }

    /// An exited child is reaped without anyone waiting for it, as Foundation's `Process`
    /// does: a test that polls `kill(pid, 0)` to see a program gone must not find a zombie.
    @Test func anExitedChildIsReapedWithoutAWait() throws {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/true")
        try process.run()
        let pid = process.processIdentifier
        let deadline = Date().addingTimeInterval(10)
        while kill(pid, 0) == 0 && Date() < deadline { usleep(10_000) }
        #expect(kill(pid, 0) != 0, "pid \(pid) still exists 10 s after /bin/true was started")
        #expect(!process.isRunning)
    }

    /// A child reaped behind `Subprocess`'s back (by another waiter, or with SIGCHLD ignored)
    /// has an end waitpid cannot tell: that is said, and never taken for exit 0.
    @Test func anEndWaitpidCannotTellIsNoSuccess() throws {
        var waited = try Subprocess.start(["/bin/sh", "-c", "exit 3"], output: .discard, error: .discard)
        var status: Int32 = 0
        #expect(waitpid(waited.pid, &status, 0) == waited.pid)
        let termination = waited.waitForTermination()
        #expect(termination == .unknown(errno: ECHILD), "\(termination)")
        let again = waited.wait()
        #expect(again == -1)
        #expect("\(termination)".contains("could not tell"))

        var polled = try Subprocess.start(["/bin/sh", "-c", "exit 3"], output: .discard, error: .discard)
        #expect(waitpid(polled.pid, &status, 0) == polled.pid)
        let running = polled.isRunning()
        #expect(!running)
        #expect(polled.termination == .unknown(errno: ECHILD), "\(String(describing: polled.termination))")
    }

    @Test func environmentDirectoryAndInputReachTheChild() throws {
        let directory = FileManager.default.temporaryDirectory.path
        let input = Pipe(), output = Pipe()
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sh")
        process.arguments = ["-c", #"printf '%s %s ' "$SUBPROCESS_TEST" "$(pwd)"; head -c 5"#]
        process.environment = ["SUBPROCESS_TEST": "given", "PATH": "/usr/bin:/bin"]
        process.currentDirectoryURL = URL(fileURLWithPath: directory)
        process.standardInput = input
        process.standardOutput = output
        try process.run()
        input.fileHandleForWriting.write(Data("typed".utf8))
        try input.fileHandleForWriting.close()
        let printed = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(printed == "given \(directory) typed")
    }

    @Test func aProgramThatCannotStartIsAnErrorNamingIt() {
        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: "/nonexistent/program")
        #expect(throws: Subprocess.Failure.self) { try process.run() }
        process.waitUntilExit()
        #expect(!process.isRunning)
        #expect((try? Subprocess.start(["/nonexistent/program"])) == nil)
        do {
            _ = try Subprocess.start(["/nonexistent/program"])
        } catch {
            #expect("\(error)" == "cannot start /nonexistent/program: No such file or directory")
        }
        do {
            _ = try Subprocess.start(["/bin/true"], directory: "/nonexistent/directory", output: .discard, error: .append("/nonexistent/errors"))
            Issue.record("/bin/true started in a directory that does not exist")
        } catch {
            #expect("\(error)" == "cannot start /bin/true (in /nonexistent/directory, errors to /nonexistent/errors): No such file or directory")
        }
    }

    /// The tests start hundreds of children; one through Foundation's `Process` can crash the
    /// whole test process (see ChildProcess).
    @Test func noTestStartsAChildThroughFoundationsProcess() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        let use = try Regex(#"(^|[^A-Za-z_])(Foundation\.)?Process\s*\("#)
        var found: [String] = []
        var scanned = 0
        let files = FileManager.default.enumerator(at: root, includingPropertiesForKeys: nil)
        while let file = files?.nextObject() as? URL {
            guard file.pathExtension == "swift" else { continue }
            scanned += 1
            let lines = try String(contentsOf: file, encoding: .utf8).split(separator: "\n", omittingEmptySubsequences: false)
            for (index, line) in lines.enumerated() where line.contains(use) {
                found.append("\(file.lastPathComponent):\(index + 1)")
            }
        }
        #expect(scanned > 100, "found only \(scanned) Swift files under \(root.path)")
        #expect(found.isEmpty, "start children with ChildProcess (Tests/Support): \(found.joined(separator: ", "))")
    }
}
