import APNs
import Posix

extension DispatcherConfiguration {
    /// Sends to the host of `text`, the value of `setting`, and to its port when it names one
    /// (otherwise the port stays the one of the host it replaces).
    public mutating func applyHostOverride(_ text: String, setting: String) throws(HostOverride.Invalid) {
        let override = try HostOverride(parsing: text, setting: setting)
        host = override.host
        if let port = override.port { self.port = port }
    }

    /// Sends to the channel management API of `environment`: Apple's host and port, or the
    /// host of `override` (`apns.channel_host`) with its port, and without one the
    /// environment's channel management port (2195 development, 2196 production), never the
    /// push port the configuration had: the API listens on no other.
    public mutating func applyChannelManagementHost(_ override: String?, environment: APNsEnvironment) throws(HostOverride.Invalid) {
        var parsed: HostOverride?
        if let override { parsed = try HostOverride(parsing: override, setting: "apns.channel_host") }
        host = parsed?.host ?? environment.channelManagementHost
        port = parsed?.port ?? environment.channelManagementPort
    }
}
