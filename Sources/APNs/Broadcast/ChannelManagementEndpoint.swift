/// Where the channel management API lives: its own hosts and ports, apart from the
/// notification hosts (Apple: "Sending channel management requests to APNs").
extension APNsEnvironment {
    public var channelManagementHost: String {
        switch self {
        case .production: return "api-manage-broadcast.push.apple.com"
        case .sandbox: return "api-manage-broadcast.sandbox.push.apple.com"
        }
    }

    /// 2196 in production, 2195 in development; there is no 443 for this API.
    public var channelManagementPort: Int {
        switch self {
        case .production: return 2196
        case .sandbox: return 2195
        }
    }
}
