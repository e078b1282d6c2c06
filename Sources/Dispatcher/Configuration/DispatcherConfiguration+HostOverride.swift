import APNs

extension DispatcherConfiguration {
    /// Sends to the host of `text`, the value of `setting`, and to its port when it names one
    /// (otherwise the port stays the one of the host it replaces).
    public mutating func applyHostOverride(_ text: String, setting: String) throws(HostOverride.Invalid) {
        let override = try HostOverride(parsing: text, setting: setting)
        host = override.host
        if let port = override.port { self.port = port }
    }
}
