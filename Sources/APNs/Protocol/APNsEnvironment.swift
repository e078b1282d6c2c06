/// Which APNs service a device token belongs to: tokens of one never work with the other.
public enum APNsEnvironment: String, Sendable, Hashable, CaseIterable, Codable, CustomStringConvertible {
    case production
    case sandbox

    public var host: String {
        switch self {
        case .production: return "api.push.apple.com"
        case .sandbox: return "api.sandbox.push.apple.com"
        }
    }

    /// The standard HTTPS port.
    public static let defaultPort = 443
    /// The alternative port APNs offers for networks that block outbound 443.
    public static let alternativePort = 2197

    /// `https://<host>:<port>` with no trailing slash.
    public func baseURL(port: Int = APNsEnvironment.defaultPort) -> String {
        port == 443 ? "https://\(host)" : "https://\(host):\(port)"
    }

    public var description: String { rawValue }

    /// Accepts "production"/"sandbox" and the common aliases "development"/"prod"/"dev".
    public init?(name: String) {
        switch name.lowercased() {
        case "production", "prod": self = .production
        case "sandbox", "development", "dev": self = .sandbox
        default: return nil
        }
    }
}
