import Posix

/// One Live Activity update to every device subscribed to a channel:
/// `POST /4/broadcasts/apps/<bundle id>` on the ordinary notification host, with
/// `apns-channel-id` and push type `liveactivity`. Token authentication only.
public struct BroadcastNotification: Sendable, Hashable {
    public var bundleID: String
    public var channelID: ChannelID
    /// nil omits `apns-priority`; APNs then uses 10. Broadcasts accept 10, 5 and 1.
    public var priority: Priority?
    /// Epoch seconds; 0 delivers only to devices online now; nil omits the header.
    public var expiration: Int64?
    /// nil omits `apns-id`; APNs makes one.
    public var apnsID: APNsID?
    public var payload: [UInt8]

    public init(bundleID: String, channelID: ChannelID, priority: Priority? = nil, expiration: Int64? = nil,
                apnsID: APNsID? = nil, payload: [UInt8]) {
        self.bundleID = bundleID
        self.channelID = channelID
        self.priority = priority
        self.expiration = expiration
        self.apnsID = apnsID
        self.payload = payload
    }

    public static let pathPrefix = "/4/broadcasts/apps/"
    public static let pushType = PushType.liveactivity

    public var path: String { BroadcastNotification.pathPrefix + bundleID }

    public func headerFields(authorization: String) -> [HeaderField] {
        var fields = [HeaderField(name: APNsHeader.authorization, value: authorization)]
        if let apnsID { fields.append(HeaderField(name: APNsHeader.id, value: apnsID.lowercasedString)) }
        fields.append(HeaderField(name: APNsHeader.pushType, value: PushType.liveactivity.rawValue))
        fields.append(HeaderField(name: APNsHeader.channelID, value: channelID.value))
        if let expiration { fields.append(HeaderField(name: APNsHeader.expiration, value: String(expiration))) }
        if let priority { fields.append(HeaderField(name: APNsHeader.priority, value: priority.headerValue)) }
        return fields
    }

    /// Every issue found: the bundle id, the expiration, token authentication, and the same
    /// Live Activity payload rules a per-device `liveactivity` push is held to.
    public func issues(authentication: AuthenticationMode) -> [ValidationIssue] {
        var found = [ValidationIssue]()
        if authentication == .certificate {
            found.append(.init(field: "authentication", rule: .tokenAuthenticationRequired,
                               message: "APNs accepts broadcast pushes only with token (JWT) authentication"))
        }
        BroadcastRules.checkBundleID(bundleID, into: &found)
        if let expiration, expiration < 0 {
            found.append(.init(field: "apns-expiration", rule: .expirationNegative,
                               message: "\(expiration) is negative; use epoch seconds, or 0 to deliver only once"))
        }
        NotificationValidator.checkPayload(payload, pushType: .liveactivity, into: &found)
        return found
    }

    public func validate(authentication: AuthenticationMode) throws(NotificationValidationError) {
        let found = issues(authentication: authentication)
        if !found.isEmpty { throw NotificationValidationError(issues: found) }
    }
}

enum BroadcastRules {
    /// Both APIs name the app in the path: a bundle id, not a topic with a push-type suffix.
    static func checkBundleID(_ bundleID: String, into found: inout [ValidationIssue]) {
        if bundleID.isEmpty {
            found.append(.init(field: "bundle id", rule: .topicMissing, message: "the bundle id is empty"))
            return
        }
        let allowed = bundleID.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                 UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."):
                return true
            default:
                return false
            }
        }
        if !allowed || bundleID.utf8.count > NotificationLimits.maxTopicBytes {
            found.append(.init(field: "bundle id", rule: .topicMalformed,
                               message: "\"\(bundleID)\" must be letters, digits, '-' and '.', at most \(NotificationLimits.maxTopicBytes) bytes"))
        } else if let owner = PushType.typeOwningSuffix(of: bundleID) {
            found.append(.init(field: "bundle id", rule: .topicSuffix,
                               message: "\"\(bundleID)\" ends in the \(owner) suffix; broadcasts and channels name the bundle id itself"))
        }
    }
}
