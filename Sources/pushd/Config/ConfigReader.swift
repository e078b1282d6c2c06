/// Reads typed settings out of a YAML mapping, collecting every problem instead of
/// stopping at the first, and reporting keys it was not asked about (typos).
final class ConfigReader {
    private(set) var problems: [ConfigProblem] = []

    func error(_ path: String, line: Int, _ message: String) {
        problems.append(ConfigProblem(severity: .error, path: path, line: line, message: message))
    }

    func warning(_ path: String, line: Int, _ message: String) {
        problems.append(ConfigProblem(severity: .warning, path: path, line: line, message: message))
    }

    var hasErrors: Bool { problems.contains { $0.severity == .error } }

    /// A view of one mapping: values are looked up by key and marked as used.
    final class Section {
        let reader: ConfigReader
        let path: String
        let line: Int
        private let pairs: [(key: String, value: YAMLNode)]
        private var used: Set<String> = []

        init(reader: ConfigReader, path: String, node: YAMLNode) {
            self.reader = reader
            self.path = path
            self.line = node.line
            switch node {
            case .mapping(let pairs, _): self.pairs = pairs
            case .empty: self.pairs = []
            default:
                self.pairs = []
                reader.error(path, line: node.line, "expected a mapping of settings, found \(node.kindName)")
            }
        }

        func childPath(_ key: String) -> String { path.isEmpty ? key : "\(path).\(key)" }

        func node(_ key: String) -> YAMLNode? {
            used.insert(key)
            guard let value = pairs.first(where: { $0.key == key })?.value else { return nil }
            if case .scalar(let text, let quoted, _) = value, !quoted, text == "~" || text == "null" || text.isEmpty {
                return nil
            }
            return value
        }

        func section(_ key: String) -> Section {
            Section(reader: reader, path: childPath(key), node: node(key) ?? .empty)
        }

        func string(_ key: String) -> String? {
            guard let value = node(key) else { return nil }
            guard case .scalar(let text, _, _) = value else {
                reader.error(childPath(key), line: value.line, "expected a single value, found \(value.kindName)")
                return nil
            }
            return text
        }

        func requiredString(_ key: String, what: String) -> String? {
            guard let text = string(key), !text.isEmpty else {
                reader.error(childPath(key), line: node(key)?.line ?? line, "missing: \(what)")
                return nil
            }
            return text
        }

        func int(_ key: String, default value: Int, range: ClosedRange<Int>) -> Int {
            guard let node = node(key) else { return value }
            guard case .scalar(let text, _, let line) = node, let number = Int(String(text.filter { $0 != "_" })) else {
                reader.error(childPath(key), line: node.line, "expected a whole number between \(range.lowerBound) and \(range.upperBound)")
                return value
            }
            guard range.contains(number) else {
                reader.error(childPath(key), line: line, "\(number) is out of range: expected \(range.lowerBound)…\(range.upperBound)")
                return value
            }
            return number
        }

        func bool(_ key: String, default value: Bool) -> Bool {
            guard let node = node(key) else { return value }
            guard case .scalar(let text, _, _) = node else {
                reader.error(childPath(key), line: node.line, "expected true or false, found \(node.kindName)")
                return value
            }
            switch text.lowercased() {
            case "true", "yes", "on": return true
            case "false", "no", "off": return false
            default:
                reader.error(childPath(key), line: node.line, "expected true or false, found '\(text)'")
                return value
            }
        }

        func choice<T: RawRepresentable>(_ key: String, default value: T) -> T
        where T: CaseIterable, T.RawValue == String {
            guard let text = string(key) else { return value }
            guard let parsed = T(rawValue: text.lowercased()) else {
                let options = T.allCases.map(\.rawValue).joined(separator: ", ")
                reader.error(childPath(key), line: node(key)?.line ?? line, "'\(text)' is not one of: \(options)")
                return value
            }
            return parsed
        }

        func list(_ key: String) -> [(path: String, node: YAMLNode)] {
            guard let node = node(key) else { return [] }
            guard case .sequence(let items, _) = node else {
                reader.error(childPath(key), line: node.line, "expected a list, found \(node.kindName)")
                return []
            }
            return items.enumerated().map { ("\(childPath(key))[\($0.offset)]", $0.element) }
        }

        /// Reports every key of this mapping that no one asked for, with a suggestion.
        func rejectUnknownKeys() {
            for (key, value) in pairs where !used.contains(key) {
                let suggestion = used.min { editDistance($0, key) < editDistance($1, key) }
                    .flatMap { editDistance($0, key) <= 2 ? " (did you mean '\($0)'?)" : nil } ?? ""
                reader.error(childPath(key), line: value.line, "unknown setting\(suggestion)")
            }
        }
    }
}

/// Levenshtein distance, for "did you mean" hints on mistyped keys.
func editDistance(_ a: String, _ b: String) -> Int {
    let a = Array(a), b = Array(b)
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var previous = Array(0...b.count)
    var current = [Int](repeating: 0, count: b.count + 1)
    for i in 1...a.count {
        current[0] = i
        for j in 1...b.count {
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
        }
        swap(&previous, &current)
    }
    return previous[b.count]
}
