import CSpawn
import Posix
import Glibc

/// Starts programs with posix_spawn and waits for them with waitpid.
///
/// The demo watches SIGINT and SIGTERM through dispatch sources, and child-exit
/// notices can then go missing for Foundation's `Process`; waiting on the pid itself
/// cannot miss an exit. A child gets only its three standard streams: every other
/// descriptor of this process is closed in it, so none of ours (a database connection,
/// the write end of someone else's pipe) lives on in a program we started.
public struct Subprocess: Sendable {
    public let pid: pid_t
    public private(set) var termination: Termination?

    public struct Failure: Error, CustomStringConvertible {
        public var description: String
        public init(description: String) { self.description = description }
    }

    /// How a program ended: its exit code, or the signal that ended it, or that waitpid could
    /// not tell (`unknown`, with its errno: the child was reaped elsewhere, or SIGCHLD is ignored).
    public enum Termination: Sendable, Equatable, CustomStringConvertible {
        case exited(Int32)
        case signalled(Int32)
        case unknown(errno: Int32)

        /// The exit code, or 128 + the signal's number, as a shell reports it; -1 when unknown,
        /// which no exit code is, so that it is never taken for a success.
        public var status: Int32 {
            switch self {
            case .exited(let code): return code
            case .signalled(let signal): return 128 + signal
            case .unknown: return -1
            }
        }

        public var description: String {
            switch self {
            case .exited(let code): return "exited with \(code)"
            case .signalled(let signal): return "ended by signal \(signal)"
            case .unknown(let number): return "ended in a way waitpid could not tell (\(String(cString: strerror(number))))"
            }
        }
    }

    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable, Equatable {
        /// This process's own stream of the same number.
        case inherit
        /// /dev/null.
        case discard
        /// An open descriptor of this process (dup'ed onto the stream in the child).
        case descriptor(Int32)
        /// A file, created when missing, written at its end.
        case append(String)

        var path: String? {
            if case .append(let path) = self { return path }
            return nil
        }
    }

    /// Starts `arguments[0]` (an absolute path) with its output appended to `outputPath`
    /// (or discarded when nil), its errors with it, and standard input from /dev/null.
    public static func start(_ arguments: [String], outputPath: String? = nil) throws -> Subprocess {
        let output = outputPath.map(Stream.append) ?? .discard
        return try start(arguments, output: output, error: output)
    }

    /// Starts `arguments[0]` (an absolute path) with `environment` (this process's when nil),
    /// in `directory` (this process's when nil), and its standard streams where each says.
    public static func start(_ arguments: [String], environment: [String: String]? = nil, directory: String? = nil,
                             input: Stream = .discard, output: Stream, error: Stream) throws -> Subprocess {
        guard let executable = arguments.first else { throw Failure(description: "no program to start") }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for (number, stream) in [(Int32(0), input), (1, output), (2, error)] {
            let result: Int32
            switch stream {
            case .inherit: result = 0
            case .discard: result = posix_spawn_file_actions_addopen(&actions, number, "/dev/null", number == 0 ? O_RDONLY : O_WRONLY, 0)
            case .descriptor(let descriptor): result = posix_spawn_file_actions_adddup2(&actions, descriptor, number)
            case .append(let path):
                result = posix_spawn_file_actions_addopen(&actions, number, path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
            }
            guard result == 0 else { throw Failure(description: "cannot start \(executable): standard stream \(number): \(String(cString: strerror(result)))") }
        }
        if let directory {
            let result = pushd_spawn_chdir(&actions, directory)
            guard result == 0 else { throw Failure(description: "cannot start \(executable) in \(directory): \(String(cString: strerror(result)))") }
        }
        let closing = pushd_spawn_close_from(&actions, 3)
        guard closing == 0 else {
            throw Failure(description: "cannot start \(executable): closing its other descriptors: \(String(cString: strerror(closing)))")
        }
        // Children start with the default actions and no blocked signals, whatever this process set.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for number in [SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD] { sigaddset(&defaults, number) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let cArguments = arguments.map { strdup($0) } + [nil]
        defer { cArguments.forEach { free($0) } }
        let cEnvironment = environment.map { $0.map { strdup("\($0.key)=\($0.value)") } + [nil] }
        defer { cEnvironment?.forEach { free($0) } }
        var pid: pid_t = 0
        let result = cEnvironment.map { posix_spawn(&pid, executable, &actions, &attributes, cArguments, $0) }
            ?? posix_spawn(&pid, executable, &actions, &attributes, cArguments, environ)
        guard result == 0 else {
            // The file actions fail at spawn too: a missing directory or output file is told here.
            let place = [directory.map { "in \($0)" }, output.path.map { "output to \($0)" }, error.path.map { "errors to \($0)" }]
                .compactMap { $0 }
            throw Failure(description: "cannot start \(executable)" + (place.isEmpty ? "" : " (\(place.joined(separator: ", ")))")
                          + ": \(String(cString: strerror(result)))")
        }
        return Subprocess(pid: pid)
    }

    /// Runs a command to its end; throws with its output when it exits non-zero.
    public static func run(_ arguments: [String], outputPath: String) throws {
        var process = try start(arguments, outputPath: outputPath)
        let termination = process.waitForTermination()
        guard termination != .exited(0) else { return }
        let output = (try? FileSystem.readText(outputPath)) ?? ""
        throw Failure(description: "\(arguments.joined(separator: " ")) \(termination): \(output)")
    }

    /// Blocks until the program exits; its exit code, or 128 + the signal that ended it, or -1
    /// when waitpid could not tell (`Termination.unknown`).
    public mutating func wait() -> Int32 {
        waitForTermination().status
    }

    /// Blocks until the program ends; how it ended.
    public mutating func waitForTermination() -> Termination {
        if let termination { return termination }
        var status: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &status, 0) } while result < 0 && errno == EINTR
        // A failed wait leaves `status` as it was: it is no exit code, least of all 0.
        termination = result == pid ? Self.decode(status) : .unknown(errno: errno)
        return termination!
    }

    /// Whether the program still runs (reaping it if it has exited).
    public mutating func isRunning() -> Bool {
        if termination != nil { return false }
        var status: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &status, WNOHANG) } while result < 0 && errno == EINTR
        if result == pid {
            termination = Self.decode(status)
            return false
        }
        if result < 0 {
            termination = .unknown(errno: errno)
            return false
        }
        return true
    }

    public mutating func terminate() {
        if isRunning() {
            kill(pid, SIGTERM)
            _ = wait()
        }
    }

    private static func decode(_ status: Int32) -> Termination {
        let signal = status & 0x7f
        return signal == 0 ? .exited((status >> 8) & 0xff) : .signalled(signal)
    }
}
