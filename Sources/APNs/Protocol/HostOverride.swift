import Posix

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
    public typealias Invalid = HostPort.Invalid

    /// What an override is, and examples, in its errors.
    static let form = "host or host:port"
    static let examples = "api.push.apple.com, 127.0.0.1:2197 or [::1]:2197"

    /// Parses `text`, the value of `setting`: the parse `metrics.listen` shares (`HostPort`),
    /// with the port optional.
    public init(parsing text: String, setting: String) throws(Invalid) {
        let parsed = try HostPort(parsing: text, setting: setting, rule: .optional, form: Self.form, examples: Self.examples)
        self.init(host: parsed.host, port: parsed.port)
    }
}

extension HostPort.Invalid {
    /// An override's error (`HostOverride`).
    public init(setting: String, text: String, reason: String) {
        self.init(setting: setting, text: text, reason: reason, form: HostOverride.form, examples: HostOverride.examples)
    }
}
