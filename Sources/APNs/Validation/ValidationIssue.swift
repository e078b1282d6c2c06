/// One thing wrong with a notification: where, which rule, and what was found.
public struct ValidationIssue: Sendable, Hashable, CustomStringConvertible {
    /// "apns-topic", "payload", "aps.sound.volume", "aps.alert.loc-args[2]", …
    public var field: String
    public var rule: ValidationRule
    public var message: String

    public init(field: String, rule: ValidationRule, message: String) {
        self.field = field
        self.rule = rule
        self.message = message
    }

    public var description: String { "\(field): \(message) [\(rule)]" }
}

/// A stable name for each rule, for tests, metrics and dead-letter reasons.
public struct ValidationRule: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public var description: String { rawValue }

    public static let topicMissing: ValidationRule = "topic-missing"
    public static let topicMalformed: ValidationRule = "topic-malformed"
    public static let topicSuffix: ValidationRule = "topic-suffix"
    public static let collapseIDTooLong: ValidationRule = "collapse-id-too-long"
    public static let collapseIDMalformed: ValidationRule = "collapse-id-malformed"
    public static let expirationNegative: ValidationRule = "expiration-negative"
    public static let payloadEmpty: ValidationRule = "payload-empty"
    public static let payloadTooLarge: ValidationRule = "payload-too-large"
    public static let payloadNotJSONObject: ValidationRule = "payload-not-json-object"
    public static let wrongType: ValidationRule = "wrong-type"
    public static let outOfRange: ValidationRule = "out-of-range"
    public static let unknownValue: ValidationRule = "unknown-value"
    public static let missingKey: ValidationRule = "missing-key"
    public static let backgroundPriority: ValidationRule = "background-priority"
    public static let liveActivityPriority: ValidationRule = "liveactivity-priority"
    public static let pushToTalkPriority: ValidationRule = "pushtotalk-priority"
    public static let pushToTalkExpiration: ValidationRule = "pushtotalk-expiration"
    public static let broadcastStart: ValidationRule = "broadcast-start"
    public static let broadcastExpiration: ValidationRule = "broadcast-expiration"
    public static let backgroundContentAvailable: ValidationRule = "background-content-available"
    public static let backgroundUserVisible: ValidationRule = "background-user-visible"
    public static let liveActivityTimestamp: ValidationRule = "liveactivity-timestamp"
    public static let liveActivityEvent: ValidationRule = "liveactivity-event"
    public static let liveActivityContentState: ValidationRule = "liveactivity-content-state"
    public static let liveActivityAttributes: ValidationRule = "liveactivity-attributes"
    public static let liveActivityStartAlert: ValidationRule = "liveactivity-start-alert"
    public static let criticalSoundVolume: ValidationRule = "critical-sound-volume"
    public static let mdmPushMagic: ValidationRule = "mdm-push-magic"
    public static let tokenAuthenticationRequired: ValidationRule = "token-authentication-required"
}

/// A notification that must not be sent, with every issue found.
public struct NotificationValidationError: Error, Sendable, Hashable, CustomStringConvertible {
    public var issues: [ValidationIssue]

    public init(issues: [ValidationIssue]) { self.issues = issues }

    public var description: String {
        "notification rejected before sending: " + issues.map(\.description).joined(separator: "; ")
    }
}
