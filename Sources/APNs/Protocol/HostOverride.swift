import Posix

/// An operator's host in place of an APNs host (`apns.host`, `apns.sandbox_host`,
/// `apns.channel_host`): a name, an IPv4 address or an IPv6 literal in brackets, with an
/// optional port (nil: the port the replaced host would have had). The one parse of these
/// settings, `HostPort`'s, which `metrics.listen` shares: the configuration loader refuses
/// what it refuses, and every dispatcher built from the settings applies what it returns.
public typealias HostOverride = HostPort

extension HostPort {
    /// What an override is, and examples, in its errors.
    static let overrideForm = "host or host:port"
    static let overrideExamples = "apns-mock.internal, 127.0.0.1:2197 or [::1]:2197"

    /// Parses `text`, the value of `setting`, an override: the port is optional.
    public init(parsing text: String, setting: String) throws(Invalid) {
        try self.init(parsing: text, setting: setting, rule: .optional, form: Self.overrideForm, examples: Self.overrideExamples)
    }
}

extension HostPort.Invalid {
    /// An override's error (`HostOverride`).
    public init(setting: String, text: String, reason: String) {
        self.init(setting: setting, text: text, reason: reason, form: HostPort.overrideForm, examples: HostPort.overrideExamples)
    }
}
