import Posix

/// A small command-line parser: nested commands, `--name value`, `--name=value`,
/// `-x value`, boolean flags, positionals, `--` to end options, and generated `--help`.

struct OptionSpec: Sendable {
    var long: String
    var short: Character?
    /// The placeholder shown in help; nil for a boolean flag.
    var valueName: String?
    var help: String
    var repeatable = false

    static func flag(_ long: String, short: Character? = nil, _ help: String) -> OptionSpec {
        OptionSpec(long: long, short: short, valueName: nil, help: help)
    }

    static func value(_ long: String, short: Character? = nil, _ valueName: String, _ help: String, repeatable: Bool = false) -> OptionSpec {
        OptionSpec(long: long, short: short, valueName: valueName, help: help, repeatable: repeatable)
    }
}

struct CommandSpec: Sendable {
    var name: String
    var summary: String
    var options: [OptionSpec] = []
    /// Positional arguments by name, in order; a trailing "..." name takes the rest.
    var positionals: [(name: String, help: String, required: Bool)] = []
    var subcommands: [CommandSpec] = []
}

struct ParsedCommand: Sendable, Equatable {
    /// The command names from the root, for example ["pushd", "campaign", "start"].
    var path: [String]
    var values: [String: [String]] = [:]
    var flags: Set<String> = []
    var positionals: [String] = []

    func value(_ name: String) -> String? { values[name]?.last }
    func has(_ flag: String) -> Bool { flags.contains(flag) }
}

/// A wrong command line: the message and the usage of the command it concerns (exit code 2).
struct UsageError: Error, CustomStringConvertible {
    var message: String
    var usage: String
    var description: String { "error: \(message)\n\n\(usage)" }
}

/// `--help` was asked for: print `text` and exit 0.
struct HelpRequest: Error {
    var text: String
}

enum ArgumentParser {
    static func parse(_ arguments: [String], root: CommandSpec) throws -> ParsedCommand {
        var command = root
        var parsed = ParsedCommand(path: [root.name])
        var index = 0
        var optionsEnded = false

        // Walk down the subcommands named first.
        while index < arguments.count, !command.subcommands.isEmpty {
            let word = arguments[index]
            if word == "--help" || word == "-h" || word == "help" { throw HelpRequest(text: help(for: command, path: parsed.path)) }
            guard let next = command.subcommands.first(where: { $0.name == word }) else {
                if word.hasPrefix("-") {
                    throw UsageError(message: "'\(word)' needs a command before it", usage: help(for: command, path: parsed.path))
                }
                let known = command.subcommands.map(\.name)
                let hint = known.min { editDistance($0, word) < editDistance($1, word) }
                    .flatMap { editDistance($0, word) <= 2 ? " (did you mean '\($0)'?)" : nil } ?? ""
                throw UsageError(message: "unknown command '\(word)'\(hint)", usage: help(for: command, path: parsed.path))
            }
            command = next
            parsed.path.append(next.name)
            index += 1
        }
        if !command.subcommands.isEmpty {
            throw UsageError(message: "\(parsed.path.joined(separator: " ")) needs a command", usage: help(for: command, path: parsed.path))
        }

        while index < arguments.count {
            let word = arguments[index]
            index += 1
            if optionsEnded || word == "-" || !word.hasPrefix("-") {
                parsed.positionals.append(word)
                continue
            }
            if word == "--" { optionsEnded = true; continue }
            if word == "--help" || word == "-h" { throw HelpRequest(text: help(for: command, path: parsed.path)) }

            var name: String
            var inlineValue: String?
            let option: OptionSpec?
            if word.hasPrefix("--") {
                name = String(word.dropFirst(2))
                if let equals = name.firstIndex(of: "=") {
                    inlineValue = String(name[name.index(after: equals)...])
                    name = String(name[..<equals])
                }
                option = command.options.first { $0.long == name }
            } else {
                let letter = word.dropFirst().first!
                option = word.count == 2 ? command.options.first { $0.short == letter } : nil
                name = String(letter)
            }
            guard let option else {
                throw UsageError(message: "unknown option '\(word)' for \(parsed.path.joined(separator: " "))",
                                 usage: help(for: command, path: parsed.path))
            }
            if option.valueName == nil {
                if inlineValue != nil {
                    throw UsageError(message: "--\(option.long) takes no value", usage: help(for: command, path: parsed.path))
                }
                parsed.flags.insert(option.long)
                continue
            }
            let value: String
            if let inlineValue {
                value = inlineValue
            } else {
                guard index < arguments.count else {
                    throw UsageError(message: "--\(option.long) needs a value (\(option.valueName!))", usage: help(for: command, path: parsed.path))
                }
                value = arguments[index]
                index += 1
            }
            if !option.repeatable, parsed.values[option.long] != nil {
                throw UsageError(message: "--\(option.long) is given twice", usage: help(for: command, path: parsed.path))
            }
            parsed.values[option.long, default: []].append(value)
        }

        let required = command.positionals.filter(\.required)
        if parsed.positionals.count < required.count {
            let missing = required[parsed.positionals.count].name
            throw UsageError(message: "missing \(missing)", usage: help(for: command, path: parsed.path))
        }
        let takesRest = command.positionals.last?.name.hasSuffix("...") == true
        if !takesRest, parsed.positionals.count > command.positionals.count {
            throw UsageError(message: "unexpected argument '\(parsed.positionals[command.positionals.count])'",
                             usage: help(for: command, path: parsed.path))
        }
        return parsed
    }

    static func help(for command: CommandSpec, path: [String]) -> String {
        var usage = "usage: \(path.joined(separator: " "))"
        if !command.subcommands.isEmpty { usage += " <command>" }
        if !command.options.isEmpty { usage += " [options]" }
        for positional in command.positionals {
            usage += positional.required ? " \(positional.name)" : " [\(positional.name)]"
        }
        var lines = [usage, "", command.summary]
        if !command.subcommands.isEmpty {
            lines += ["", "commands:"]
            let width = command.subcommands.map(\.name.count).max() ?? 0
            for sub in command.subcommands {
                lines.append("  \(sub.name.padded(to: width))  \(sub.summary)")
            }
            lines += ["", "Run '\(path.joined(separator: " ")) <command> --help' for a command's options."]
        }
        if !command.positionals.isEmpty {
            lines += ["", "arguments:"]
            for positional in command.positionals { lines.append("  \(positional.name)  \(positional.help)") }
        }
        let options = command.options + [.flag("help", short: "h", "show this help")]
        lines += ["", "options:"]
        let rendered = options.map { option -> (String, String) in
            var left = option.short.map { "-\($0), " } ?? "    "
            left += "--\(option.long)"
            if let valueName = option.valueName { left += " \(valueName)" }
            return (left, option.help)
        }
        let width = rendered.map(\.0.count).max() ?? 0
        for (left, text) in rendered {
            lines.append("  \(left.padded(to: width))  \(text)")
        }
        return lines.joined(separator: "\n")
    }
}
