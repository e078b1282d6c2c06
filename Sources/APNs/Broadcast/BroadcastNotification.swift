import Posix

/// One Live Activity update to every device subscribed to a channel:
/// `POST /4/broadcasts/apps/<bundle id>` on the ordinary notification host, with
/// `apns-channel-id` and push type `liveactivity`. Apple ("Sending broadcast push notification
/// requests to APNs"): "APNs validates the request using either the provided authentication
/// token or your server's certificate", so it goes with a provider token or on a connection
/// that presents the app's certificate for the environment.
public struct BroadcastNotification: Sendable, Hashable {
    public var bundleID: String
    public var channelID: ChannelID
    /// nil sends 10. Apple lists `apns-priority` as required on broadcasts, and ActivityKit
    /// allows Live Activity updates only 10 and 5.
    public var priority: Priority?
    /// Epoch seconds; 0 delivers only to devices online now; nil sends 0. Apple lists
    /// `apns-expiration` as required on broadcasts, and 0 is the one value a channel of either
    /// storage policy takes.
    public var expiration: Int64?
    /// Sent as `apns-request-id`, the broadcast API's optional request id ("returned back in
    /// the response"); nil omits it and APNs makes one. It names the request for
    /// troubleshooting; APNs does not use it to drop a repeated broadcast.
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
    /// Apple: a broadcast payload "is limited to a maximum size of 5 KB (5,120 bytes)".
    public static let maxPayloadSize = 5120
    /// What is sent when the broadcast names none.
    public static let defaultPriority = Priority.immediate
    public static let defaultExpiration: Int64 = 0

    public var path: String { BroadcastNotification.pathPrefix + bundleID }

    /// `authorization` is the complete value ("bearer <jwt>"); nil with a certificate, whose
    /// requests carry no `authorization` header.
    public func headerFields(authorization: String?) -> [HeaderField] {
        var fields = [HeaderField]()
        if let authorization { fields.append(HeaderField(name: APNsHeader.authorization, value: authorization)) }
        if let apnsID { fields.append(HeaderField(name: APNsHeader.requestID, value: apnsID.lowercasedString)) }
        fields.append(HeaderField(name: APNsHeader.pushType, value: PushType.liveactivity.rawValue))
        fields.append(HeaderField(name: APNsHeader.channelID, value: channelID.value))
        fields.append(HeaderField(name: APNsHeader.expiration, value: String(expiration ?? Self.defaultExpiration)))
        fields.append(HeaderField(name: APNsHeader.priority, value: (priority ?? Self.defaultPriority).headerValue))
        return fields
    }

    /// Every issue found: the bundle id, the priority, the expiration (against the channel's
    /// storage policy, when known), and the Live Activity payload rules a per-device
    /// `liveactivity` push is held to, less the start event a broadcast cannot carry. Either
    /// authentication is accepted (Apple's broadcast page names both).
    public func issues(authentication: AuthenticationMode, storagePolicy: MessageStoragePolicy? = nil) -> [ValidationIssue] {
        var found = [ValidationIssue]()
        BroadcastRules.checkBundleID(bundleID, into: &found)
        if let priority, !PriorityRules.liveActivity.contains(priority) {
            found.append(PriorityRules.liveActivityIssue(priority))
        }
        if let expiration, expiration < 0 {
            found.append(.init(field: "apns-expiration", rule: .expirationNegative,
                               message: "\(expiration) is negative; use epoch seconds, or 0 to deliver only once"))
        } else if let expiration, expiration != 0, storagePolicy == .noMessageStored {
            // Apple: "Providing a nonzero expiration for a channel created with the No Message
            // Stored storage policy results in message rejection."
            found.append(.init(field: "apns-expiration", rule: .broadcastExpiration,
                               message: "\(expiration) on a channel created with storage policy none; such a channel takes only 0"))
        }
        NotificationValidator.checkPayload(payload, pushType: .liveactivity, limit: Self.maxPayloadSize, what: "broadcast", into: &found)
        if Self.event(of: payload) == LiveActivityEvent.start.rawValue {
            found.append(.init(field: "aps.event", rule: .broadcastStart,
                               message: "a broadcast cannot start a Live Activity; send start to a push-to-start token with \"input-push-channel\""))
        }
        return found
    }

    public func validate(authentication: AuthenticationMode, storagePolicy: MessageStoragePolicy? = nil) throws(NotificationValidationError) {
        let found = issues(authentication: authentication, storagePolicy: storagePolicy)
        if !found.isEmpty { throw NotificationValidationError(issues: found) }
    }

    /// `aps.event` when it is a string; nil when the payload does not read.
    static func event(of payload: [UInt8]) -> String? {
        guard let top = try? NotificationValidator.scanTopLevel(payload) else { return nil }
        return top.aps?.objectValue?["event"]?.stringValue
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
