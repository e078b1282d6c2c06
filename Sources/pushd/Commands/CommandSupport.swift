import Posix
import QueueStore

/// What the database commands share: the configuration when one is named, the connection,
/// and the parsing of values that every command reads the same way.
extension CommandContext {
    /// The configuration named by `--config`, or nil: commands that only need the database
    /// work with `--database-url` or `$PUSHD_DATABASE_URL` alone.
    func configIfGiven(_ parsed: ParsedCommand) throws -> PushdConfig? {
        parsed.value("config") == nil ? nil : try loadConfig(parsed)
    }

    /// Connects with `--database-url`, else `$PUSHD_DATABASE_URL`, else `config`'s URL, else the
    /// default configuration file's.
    func connect(_ parsed: ParsedCommand, config: PushdConfig?, applicationName: String) throws -> PGConnection {
        if parsed.value("database-url")?.isEmpty ?? true, environment["PUSHD_DATABASE_URL"]?.isEmpty ?? true, let config {
            return try QueueSession.connect(url: config.databaseURL, applicationName: applicationName)
        }
        return try connect(parsed, applicationName: applicationName)
    }
}

enum CommandValue {
    /// A campaign id as typed on the command line.
    static func campaignID(_ text: String) throws -> Int64 {
        guard let id = Int64(text), id > 0 else {
            throw CommandContext.Failure("'\(text)' is not a campaign id: expected a positive whole number, as printed by 'pushd campaign create'")
        }
        return id
    }

    static func integer(_ parsed: ParsedCommand, _ option: String, in range: ClosedRange<Int>) throws -> Int? {
        guard let text = parsed.value(option) else { return nil }
        guard let value = Int(text), range.contains(value) else {
            throw CommandContext.Failure("--\(option) '\(text)' must be a whole number from \(range.lowerBound) to \(range.upperBound)")
        }
        return value
    }

    /// ISO 8601 with a time zone: `2026-12-01T09:00:00Z`, `2026-12-01T09:00:00+01:00`, fractions allowed.
    static func time(_ parsed: ParsedCommand, _ option: String) throws -> Timestamp? {
        guard let text = parsed.value(option) else { return nil }
        if let date = Timestamp(iso8601: text) { return date }
        throw CommandContext.Failure("--\(option) '\(text)' is not an ISO 8601 time with a zone, for example 2026-12-01T09:00:00Z")
    }

    /// A payload from `--payload` or `--payload-file` (`-` reads standard input); nil when neither is given.
    static func payload(_ parsed: ParsedCommand, readStandardInput: () -> [UInt8] = { StandardStreams.readInput() }) throws -> [UInt8]? {
        switch (parsed.value("payload"), parsed.value("payload-file")) {
        case (.some, .some):
            throw CommandContext.Failure("give the payload once: --payload or --payload-file, not both")
        case (let text?, nil):
            return Array(text.utf8)
        case (nil, let file?):
            if file == "-" { return [UInt8](readStandardInput()) }
            do {
                return try FileSystem.read(file)
            } catch {
                throw CommandContext.Failure("--payload-file \(file) cannot be read: \(FileSystem.exists(file) ? error.reason : "no such file")")
            }
        case (nil, nil):
            return nil
        }
    }
}

/// Aligned columns for terminal output, the first row being the header.
enum TextTable {
    static func render(_ rows: [[String]]) -> [String] {
        guard let columns = rows.map(\.count).max() else { return [] }
        var widths = [Int](repeating: 0, count: columns)
        for row in rows { for (index, cell) in row.enumerated() { widths[index] = max(widths[index], cell.count) } }
        return rows.map { row in
            row.enumerated().map { index, cell in
                index == row.count - 1 ? cell : cell.padded(to: widths[index])
            }.joined(separator: "  ")
        }
    }
}

enum TimeText {
    /// `2026-11-29 14:01:05Z`: what operators compare with logs.
    static func moment(_ date: Timestamp?) -> String {
        guard let date else { return "-" }
        return date.iso8601(separator: " ")
    }

    /// `42s`, `3m05s`, `2h10m`, `3d04h`.
    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds >= 0 else { return "-" }
        let total = Int(seconds.rounded())
        if total < 60 { return "\(total)s" }
        if total < 3600 { return "\(total / 60)m\((total % 60).zeroPadded(2))s" }
        if total < 86_400 { return "\(total / 3600)h\((total % 3600 / 60).zeroPadded(2))m" }
        return "\(total / 86_400)d\((total % 86_400 / 3600).zeroPadded(2))h"
    }
}
