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

/// Priorities a push type takes, where Apple narrows the three values.
public enum PriorityRules {
    /// ActivityKit: "Set the value for the apns-priority header field to 5 or 10", for pushes
    /// to a device and broadcasts on a channel alike.
    public static let liveActivity: Set<Priority> = [.immediate, .conservePower]

    static func liveActivityIssue(_ priority: Priority) -> ValidationIssue {
        ValidationIssue(field: "apns-priority", rule: .liveActivityPriority,
                        message: "Live Activity pushes must use priority 10 or 5, found \(priority.rawValue)")
    }
}
