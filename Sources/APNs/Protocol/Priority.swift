/// The `apns-priority` header value.
public enum Priority: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Deliver immediately (alerts, VoIP, push-to-talk).
    case immediate = 10
    /// Deliver when it suits the device's power state; the only value background pushes may use.
    case conservePower = 5
    /// Deliver when it suits the device's power state, and never wake it.
    case prioritizePower = 1

    public var headerValue: String { String(rawValue) }
    public var description: String { headerValue }

    /// Parses a header value; only the exact decimal strings "10", "5" and "1" are accepted.
    public init?(headerValue: String) {
        switch headerValue {
        case "10": self = .immediate
        case "5": self = .conservePower
        case "1": self = .prioritizePower
        default: return nil
        }
    }
}
