/// The `reason` string of an APNs error response.
///
/// A struct over the string rather than an enum: APNs adds reasons over time, and a reason
/// this code has never seen must still be carried, logged and classified, never rejected.
public struct APNsReason: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
    public let rawValue: String

    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { self.rawValue = value }

    public var description: String { rawValue }

    // 400
    public static let badCollapseId: APNsReason = "BadCollapseId"
    public static let badDeviceToken: APNsReason = "BadDeviceToken"
    public static let badExpirationDate: APNsReason = "BadExpirationDate"
    public static let badMessageId: APNsReason = "BadMessageId"
    public static let badPriority: APNsReason = "BadPriority"
    public static let badTopic: APNsReason = "BadTopic"
    public static let deviceTokenNotForTopic: APNsReason = "DeviceTokenNotForTopic"
    public static let duplicateHeaders: APNsReason = "DuplicateHeaders"
    public static let idleTimeout: APNsReason = "IdleTimeout"
    public static let invalidPushType: APNsReason = "InvalidPushType"
    public static let missingDeviceToken: APNsReason = "MissingDeviceToken"
    public static let missingTopic: APNsReason = "MissingTopic"
    public static let payloadEmpty: APNsReason = "PayloadEmpty"
    public static let topicDisallowed: APNsReason = "TopicDisallowed"
    // 403
    public static let badCertificate: APNsReason = "BadCertificate"
    public static let badCertificateEnvironment: APNsReason = "BadCertificateEnvironment"
    public static let expiredProviderToken: APNsReason = "ExpiredProviderToken"
    public static let forbidden: APNsReason = "Forbidden"
    public static let invalidProviderToken: APNsReason = "InvalidProviderToken"
    public static let missingProviderToken: APNsReason = "MissingProviderToken"
    /// Apple's documentation has used both spellings; both are recognised.
    public static let badEnvironmentKeyInToken: APNsReason = "BadEnvironmentKeyInToken"
    public static let badEnvironmentKeyIdInToken: APNsReason = "BadEnvironmentKeyIdInToken"
    public static let unrelatedKeyIdInToken: APNsReason = "UnrelatedKeyIdInToken"
    // 404, 405
    public static let badPath: APNsReason = "BadPath"
    public static let methodNotAllowed: APNsReason = "MethodNotAllowed"
    // 410
    public static let expiredToken: APNsReason = "ExpiredToken"
    public static let unregistered: APNsReason = "Unregistered"
    // 413
    public static let payloadTooLarge: APNsReason = "PayloadTooLarge"
    // 429
    public static let tooManyProviderTokenUpdates: APNsReason = "TooManyProviderTokenUpdates"
    public static let tooManyRequests: APNsReason = "TooManyRequests"
    // 500, 503
    public static let internalServerError: APNsReason = "InternalServerError"
    public static let serviceUnavailable: APNsReason = "ServiceUnavailable"
    public static let shutdown: APNsReason = "Shutdown"
    // Broadcast sends and channel management (iOS 18 Live Activity channels)
    public static let missingChannelId: APNsReason = "MissingChannelId"
    public static let badChannelId: APNsReason = "BadChannelId"
    public static let channelNotRegistered: APNsReason = "ChannelNotRegistered"
    public static let cannotCreateChannelConfig: APNsReason = "CannotCreateChannelConfig"
    public static let featureNotEnabled: APNsReason = "FeatureNotEnabled"
    /// Broadcast and channel requests: the bundle id of the request (`/1/apps/<bundle-id>/…`)
    /// is not one the credentials cover (a different team's, or different letter case).
    public static let topicMismatch: APNsReason = "TopicMismatch"
    /// Broadcast and channel requests: "The JSON Request payload is unparseable."
    public static let badRequestPayload: APNsReason = "BadRequestPayload"
    /// Broadcast and channel requests: "The JSON Request payload contained an unrecognizable attribute."
    public static let badRequestParams: APNsReason = "BadRequestParams"
    public static let missingPushType: APNsReason = "MissingPushType"

    /// Every documented reason with the HTTP status APNs sends it with.
    public static let known: [(reason: APNsReason, status: Int)] = [
        (.badCollapseId, 400), (.badDeviceToken, 400), (.badExpirationDate, 400), (.badMessageId, 400),
        (.badPriority, 400), (.badTopic, 400), (.deviceTokenNotForTopic, 400), (.duplicateHeaders, 400),
        (.idleTimeout, 400), (.invalidPushType, 400), (.missingDeviceToken, 400), (.missingTopic, 400),
        (.payloadEmpty, 400), (.topicDisallowed, 400),
        (.badCertificate, 403), (.badCertificateEnvironment, 403), (.expiredProviderToken, 403),
        (.forbidden, 403), (.invalidProviderToken, 403), (.missingProviderToken, 403),
        (.badEnvironmentKeyInToken, 403), (.badEnvironmentKeyIdInToken, 403), (.unrelatedKeyIdInToken, 403),
        (.badPath, 404), (.methodNotAllowed, 405),
        (.expiredToken, 410), (.unregistered, 410),
        (.payloadTooLarge, 413),
        (.tooManyProviderTokenUpdates, 429), (.tooManyRequests, 429),
        (.internalServerError, 500), (.serviceUnavailable, 503), (.shutdown, 503),
        (.missingChannelId, 400), (.badChannelId, 400), (.cannotCreateChannelConfig, 400),
        (.featureNotEnabled, 400), (.missingPushType, 400), (.channelNotRegistered, 400),
        (.badRequestPayload, 400), (.badRequestParams, 400), (.topicMismatch, 403),
    ]

    private static let statusByReason: [String: Int] = {
        var map = [String: Int]()
        for entry in known { map[entry.reason.rawValue] = entry.status }
        return map
    }()

    /// Whether this is one of the documented reasons.
    public var isKnown: Bool { APNsReason.statusByReason[rawValue] != nil }

    /// The HTTP status APNs pairs with this reason; nil for reasons not documented.
    public var status: Int? { APNsReason.statusByReason[rawValue] }
}
