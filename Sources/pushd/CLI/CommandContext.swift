import Posix
import QueueStore
import Synchronization

/// What a command needs from its surroundings: where output goes and how to find
/// the configuration and the database. Commands return an exit code: 0 ok, 1 failure
/// (2, usage, comes from the parser).
struct CommandContext {
    var environment: [String: String] = Environment.variables
    var output: @Sendable (String) -> Void = { print($0) }
    var errorOutput: @Sendable (String) -> Void = { StandardStreams.writeError($0 + "\n") }

    static let defaultConfigPath = "/etc/pushd/pushd.yml"

    /// A failure to report on one line (exit code 1).
    struct Failure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    func loadConfig(_ parsed: ParsedCommand) throws -> PushdConfig {
        try loadConfig(parsed) { path, warning in errorOutput("\(path): \(warning)") }
    }

    /// Loads the configuration and hands each warning to `warn` with the file's path (`pushd run`
    /// logs them as JSON lines like everything else it writes).
    func loadConfig(_ parsed: ParsedCommand, warn: (_ path: String, _ warning: ConfigProblem) -> Void) throws -> PushdConfig {
        let path = parsed.value("config") ?? Self.defaultConfigPath
        let (config, warnings) = try ConfigLoader.load(file: path, environment: environment)
        for warning in warnings { warn(path, warning) }
        QueueSession.deadPeerSeconds.store(config.databaseDeadPeerSeconds, ordering: .relaxed)
        return config
    }

    /// `--database-url`, else `$PUSHD_DATABASE_URL`, else the configuration file's.
    func databaseURL(_ parsed: ParsedCommand) throws -> String {
        if let url = parsed.value("database-url"), !url.isEmpty { return url }
        if let url = environment["PUSHD_DATABASE_URL"], !url.isEmpty { return url }
        if parsed.value("config") != nil || FileSystem.exists(Self.defaultConfigPath) {
            return try loadConfig(parsed).databaseURL
        }
        throw Failure("no database: pass --database-url, set PUSHD_DATABASE_URL or give --config FILE")
    }

    func connect(_ parsed: ParsedCommand, applicationName: String) throws -> PGConnection {
        try QueueSession.connect(url: databaseURL(parsed), applicationName: applicationName)
    }
}
