import Glibc

/// Starts programs with posix_spawn and waits for them with waitpid.
///
/// The demo watches SIGINT and SIGTERM through dispatch sources, and child-exit
/// notices can then go missing for Foundation's `Process`; waiting on the pid itself
/// cannot miss an exit.
public struct Subprocess: Sendable {
    public let pid: pid_t
    public private(set) var exitStatus: Int32?

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
    }

    /// Starts `arguments[0]` (an absolute path) with its output appended to `outputPath`
    /// (or discarded when nil) and standard input from /dev/null.
    public static func start(_ arguments: [String], outputPath: String? = nil) throws -> Subprocess {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        let target = outputPath ?? "/dev/null"
        posix_spawn_file_actions_addopen(&actions, 1, target, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        // Children start with the default actions and no blocked signals, whatever this process set.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] { sigaddset(&defaults, number) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let cStrings = arguments.map { strdup($0) } + [nil]
        defer { cStrings.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, arguments[0], &actions, &attributes, cStrings, environ)
        guard result == 0 else {
            throw Failure(description: "cannot start \(arguments[0]): \(String(cString: strerror(result)))")
        }
        return Subprocess(pid: pid)
    }

    /// Runs a command to its end; throws with its output when it exits non-zero.
    public static func run(_ arguments: [String], outputPath: String) throws {
        var process = try start(arguments, outputPath: outputPath)
        let status = process.wait()
        guard status == 0 else {
            let output = (try? FileSystem.readText(outputPath)) ?? ""
            throw Failure(description: "\(arguments.joined(separator: " ")) exited with \(status): \(output)")
        }
    }

    /// Blocks until the program exits; its exit code, or 128 + the signal that ended it.
    public mutating func wait() -> Int32 {
        if let exitStatus { return exitStatus }
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        exitStatus = Self.decode(status)
        return exitStatus!
    }

    /// Whether the program still runs (reaping it if it has exited).
    public mutating func isRunning() -> Bool {
        if exitStatus != nil { return false }
        var status: Int32 = 0
        let result = waitpid(pid, &status, WNOHANG)
        if result == pid {
            exitStatus = Self.decode(status)
            return false
        }
        return result == 0
    }

    public mutating func terminate() {
        if isRunning() {
            kill(pid, SIGTERM)
            _ = wait()
        }
    }

    private static func decode(_ status: Int32) -> Int32 {
        let signal = status & 0x7f
        return signal == 0 ? (status >> 8) & 0xff : 128 + signal
    }
}
