/// An operator's host in place of an APNs host (`apns.host`, `apns.sandbox_host`,
/// `apns.channel_host`): a name, an IPv4 address or an IPv6 literal in brackets, with an
/// optional port. The one parse of these settings: the configuration loader refuses what it
/// refuses, and every dispatcher built from the settings applies what it returns.
public struct HostOverride: Sendable, Hashable {
    /// Without brackets: the URL adds them back to an IPv6 literal.
    public var host: String
    /// nil: the port the replaced host would have had.
    public var port: Int?

    public init(host: String, port: Int? = nil) {
        self.host = host
        self.port = port
    }

    /// Names the setting and the text, so the operator knows which line to fix.
    public struct Invalid: Error, Hashable, CustomStringConvertible {
        public var setting: String
        public var text: String
        public var reason: String

        public init(setting: String, text: String, reason: String) {
            self.setting = setting
            self.text = text
            self.reason = reason
        }
        /// What is wrong with the text, without the setting's name (a configuration problem
        /// names it with its line).
        public var explanation: String {
            "'\(text)' is not host or host:port (\(reason)); for example api.push.apple.com, 127.0.0.1:2197 or [::1]:2197"
        }
        public var description: String { "\(setting): \(explanation)" }
    }

    /// Parses `text`, the value of `setting`.
    public init(parsing text: String, setting: String) throws(Invalid) {
        func invalid(_ reason: String) -> Invalid { Invalid(setting: setting, text: text, reason: reason) }
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
            default: throw invalid("an IPv6 address goes in brackets, as [::1]:2197")
            }
            if host.contains("[") || host.contains("]") { throw invalid("a bracket goes only around an IPv6 address") }
        }
        guard !host.isEmpty else { throw invalid("the host is empty") }
        var port: Int?
        if let portText {
            guard !portText.isEmpty, portText.allSatisfy(\.isASCII), portText.allSatisfy(\.isNumber),
                  let number = Int(portText), (1...65_535).contains(number) else {
                throw invalid("the port '\(portText)' is not a number from 1 to 65535")
            }
            port = number
        }
        self.init(host: String(host), port: port)
    }
}

