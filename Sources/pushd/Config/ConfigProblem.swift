/// One thing wrong (or worth a warning) in the configuration, with where it is.
struct ConfigProblem: Sendable, Equatable, CustomStringConvertible {
    enum Severity: String, Sendable { case error, warning }

    var severity: Severity
    /// The setting's path, for example `apps[0].token.key_id`.
    var path: String
    /// The line in the file, 0 when the problem is not tied to one.
    var line: Int
    var message: String

    var description: String {
        let place = line > 0 ? "\(path) (line \(line))" : path
        return "\(severity.rawValue): \(place): \(message)"
    }
}

/// The configuration could not be used; every problem found is listed.
struct ConfigError: Error, CustomStringConvertible {
    var file: String
    var problems: [ConfigProblem]
    var description: String {
        problems.map { "\(file): \($0)" }.joined(separator: "\n")
    }
}
