/// A host and port as a setting writes them: a name, an IPv4 address or an IPv6 literal in
/// brackets, then `:port`. The one parse of every such setting (`apns.host`,
/// `apns.sandbox_host`, `apns.channel_host`, `metrics.listen`): each differs only in its
/// `PortRule`, so that what one refuses the others refuse alike, with the same words.
public struct HostPort: Sendable, Hashable {
    /// Without brackets, as `getaddrinfo` takes an IPv6 literal (a URL adds them back).
    public var host: String
    /// nil when the rule lets the port out and the text names none.
    public var port: Int?

    public init(host: String, port: Int? = nil) {
        self.host = host
        self.port = port
    }

    /// Which ports a setting takes, and whether it may leave the port out.
    public struct PortRule: Sendable, Hashable {
        public var required: Bool
        public var range: ClosedRange<Int>
        /// The port an error's IPv6 example shows.
        public var examplePort: Int

        /// A host in place of another, keeping the replaced host's port when it names none.
        public static let optional = PortRule(required: false, range: 1...65_535, examplePort: 2197)
        /// An address to listen on: the port is required, and 0 asks the system for a free one.
        public static let listen = PortRule(required: true, range: 0...65_535, examplePort: 9464)

        public init(required: Bool, range: ClosedRange<Int>, examplePort: Int) {
            self.required = required
            self.range = range
            self.examplePort = examplePort
        }
    }

    /// Names the setting and the text, so the operator knows which line to fix.
    public struct Invalid: Error, Hashable, CustomStringConvertible {
        public var setting: String
        public var text: String
        public var reason: String
        /// What the setting takes (`host or host:port`) and examples of it.
        public var form: String
        public var examples: String

        public init(setting: String, text: String, reason: String, form: String, examples: String) {
            self.setting = setting
            self.text = text
            self.reason = reason
            self.form = form
            self.examples = examples
        }

        /// What is wrong with the text, without the setting's name (a configuration problem
        /// names it with its line).
        public var explanation: String { "'\(text)' is not \(form) (\(reason)); for example \(examples)" }
        public var description: String { "\(setting): \(explanation)" }
    }

    /// Parses `text`, the value of `setting`, whose ports follow `rule`; `form` and `examples`
    /// go into the error.
    public init(parsing text: String, setting: String, rule: PortRule, form: String, examples: String) throws(Invalid) {
        func invalid(_ reason: String) -> Invalid {
            Invalid(setting: setting, text: text, reason: reason, form: form, examples: examples)
        }
        guard !text.isEmpty else { throw invalid("it is empty") }
        if let bad = text.first(where: { $0 == "/" || $0 == "@" || $0.isWhitespace }) {
            throw invalid(bad == "/" ? "a host has no scheme or path" : "'\(bad)' has no place in a host")
        }
        let host: Substring
        let portText: Substring?
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { throw invalid("the IPv6 address has no closing ']'") }
            host = text[text.index(after: text.startIndex)..<close]
            guard host.contains(":") else { throw invalid("only an IPv6 address goes in brackets") }
            let rest = text[text.index(after: close)...]
            if rest.isEmpty {
                portText = nil
            } else if rest.first == ":" {
                portText = rest.dropFirst()
            } else {
                throw invalid("after ']' only ':port' may follow")
            }
        } else {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            switch parts.count {
            case 1: (host, portText) = (parts[0], nil)
            case 2: (host, portText) = (parts[0], parts[1])
            default: throw invalid("an IPv6 address goes in brackets, as [::1]:\(rule.examplePort)")
            }
            if host.contains("[") || host.contains("]") { throw invalid("a bracket goes only around an IPv6 address") }
        }
        guard !host.isEmpty else { throw invalid("the host is empty") }
        var port: Int?
        if let portText {
            let range = rule.range
            guard !portText.isEmpty, portText.allSatisfy(\.isASCII), portText.allSatisfy(\.isNumber),
                  let number = Int(portText), range.contains(number) else {
                throw invalid("the port '\(portText)' is not a number from \(range.lowerBound) to \(range.upperBound)")
            }
            port = number
        } else if rule.required {
            throw invalid("the port is missing")
        }
        self.init(host: String(host), port: port)
    }
}
