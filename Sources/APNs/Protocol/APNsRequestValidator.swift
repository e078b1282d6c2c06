import Posix

/// Judges an incoming HTTP/2 request the way APNs does, for servers that stand in for APNs.
///
/// A pure function of its inputs. It checks the request line, the `apns-*` headers and the
/// payload's size and JSON shape; the provider token's signature is checked separately
/// (`ProviderTokenVerifier`) because which keys are trusted is the server's configuration.
public struct APNsRequestValidator: Sendable {
    /// Bundle ids the credentials may push to; nil accepts any topic. A topic is allowed when
    /// the bundle id left after removing the push type's suffix is in the set (for `mdm`, the
    /// topic itself).
    public var allowedBundleIDs: Set<String>?
    /// Topics refused although their bundle id is allowed, as APNs refuses a topic the
    /// credentials do not cover (a certificate without the VoIP topic, a capability not enabled).
    public var disallowedTopics: Set<String> = []
    /// The topic a certificate connection implies when `apns-topic` is absent (a certificate
    /// for a single bundle id). nil makes `apns-topic` required, as with token authentication.
    public var defaultTopic: String?

    public init(allowedBundleIDs: Set<String>? = nil, defaultTopic: String? = nil) {
        self.allowedBundleIDs = allowedBundleIDs
        self.defaultTopic = defaultTopic
    }

    public static let devicePathPrefix = "/3/device/"

    public func validate(method: String, path: String, headers: [HeaderField], body: [UInt8]) -> APNsRequestVerdict {
        guard method == "POST" else { return .rejected(status: 405, reason: .methodNotAllowed) }
        let prefix = APNsRequestValidator.devicePathPrefix.utf8
        guard path.utf8.starts(with: prefix) else { return .rejected(status: 404, reason: .badPath) }
        let tokenBytes = path.utf8.dropFirst(prefix.count)
        if tokenBytes.isEmpty { return .rejected(status: 400, reason: .missingDeviceToken) }
        if tokenBytes.contains(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") }) {
            return .rejected(status: 404, reason: .badPath)
        }
        guard let token = try? DeviceToken(String(decoding: tokenBytes, as: UTF8.self)) else {
            return .rejected(status: 400, reason: .badDeviceToken)
        }

        var slots = Slots()
        for field in headers {
            let slot: WritableKeyPath<Slots, String?>
            switch HeaderField.hasUppercase(field.name) ? field.name.lowercased() : field.name {
            case APNsHeader.authorization: slot = \.authorization
            case APNsHeader.topic: slot = \.topic
            case APNsHeader.pushType: slot = \.pushType
            case APNsHeader.id: slot = \.apnsID
            case APNsHeader.expiration: slot = \.expiration
            case APNsHeader.priority: slot = \.priority
            case APNsHeader.collapseID: slot = \.collapseID
            default: continue
            }
            if slots[keyPath: slot] != nil { return .rejected(status: 400, reason: .duplicateHeaders) }
            slots[keyPath: slot] = field.value
        }
        let authorization = slots.authorization
        let topic = slots.topic
        let pushTypeText = slots.pushType
        let apnsID = slots.apnsID
        let expirationText = slots.expiration
        let priorityText = slots.priority
        let collapseID = slots.collapseID

        guard let resolvedTopic = topic ?? defaultTopic else { return .rejected(status: 400, reason: .missingTopic) }
        if resolvedTopic.isEmpty { return .rejected(status: 400, reason: .missingTopic) }

        let pushType: PushType
        if let pushTypeText {
            guard let parsed = PushType(rawValue: pushTypeText) else { return .rejected(status: 400, reason: .invalidPushType) }
            pushType = parsed
        } else {
            pushType = .alert
        }

        guard TopicRules.isWellFormed(resolvedTopic), pushType.accepts(topic: resolvedTopic) else {
            return .rejected(status: 400, reason: .badTopic)
        }
        if let allowedBundleIDs {
            let bundleID = pushType == .mdm ? resolvedTopic : (pushType.bundleID(fromTopic: resolvedTopic) ?? resolvedTopic)
            if !allowedBundleIDs.contains(bundleID) { return .rejected(status: 400, reason: .topicDisallowed) }
        }
        if disallowedTopics.contains(resolvedTopic) { return .rejected(status: 400, reason: .topicDisallowed) }

        if let apnsID, !APNsID.isCanonical(apnsID) { return .rejected(status: 400, reason: .badMessageId) }

        // Apple: without the header APNs sets the priority to 10, and background pushes must
        // have 5, so a background push without it, or with 1 or 10, is refused.
        var priority: Priority = .immediate
        if let priorityText {
            guard let parsed = Priority(headerValue: priorityText) else { return .rejected(status: 400, reason: .badPriority) }
            priority = parsed
        }
        if pushType == .background && priority != .conservePower { return .rejected(status: 400, reason: .badPriority) }
        // ActivityKit: Live Activity pushes take 5 or 10. PushToTalk: "Set the APNs priority
        // to 10 ... and set an expiration of 0".
        if pushType == .liveactivity && !PriorityRules.liveActivity.contains(priority) { return .rejected(status: 400, reason: .badPriority) }
        if pushType == .pushtotalk && priority != .immediate { return .rejected(status: 400, reason: .badPriority) }

        var expiration: Int64?
        if let expirationText {
            guard let parsed = ExpirationRules.parse(expirationText) else { return .rejected(status: 400, reason: .badExpirationDate) }
            expiration = parsed
        }
        if pushType == .pushtotalk && expiration != 0 { return .rejected(status: 400, reason: .badExpirationDate) }

        if let collapseID, collapseID.utf8.count > NotificationLimits.maxCollapseIDBytes || !HeaderRules.isSafeValue(collapseID) {
            return .rejected(status: 400, reason: .badCollapseId)
        }

        if body.isEmpty { return .rejected(status: 400, reason: .payloadEmpty) }
        if body.count > pushType.maxPayloadSize { return .rejected(status: 413, reason: .payloadTooLarge) }
        // APNs documents no reason for a body that is not a JSON object; PayloadEmpty is the
        // nearest documented one, and it classifies the same way (a sender bug, dead-lettered).
        if JSONParser.checkObject(body) != nil { return .rejected(status: 400, reason: .payloadEmpty) }

        return .accepted(AcceptedRequest(
            token: token, topic: resolvedTopic, pushType: pushType, apnsID: apnsID?.lowercased(),
            priority: priority, expiration: expiration, collapseID: collapseID,
            authorization: authorization, payloadSize: body.count))
    }

    private struct Slots {
        var authorization: String?
        var topic: String?
        var pushType: String?
        var apnsID: String?
        var expiration: String?
        var priority: String?
        var collapseID: String?
    }
}

public enum APNsRequestVerdict: Sendable, Hashable {
    case accepted(AcceptedRequest)
    case rejected(status: Int, reason: APNsReason)
}

/// A request that passed validation, with defaults applied the way APNs applies them.
public struct AcceptedRequest: Sendable, Hashable {
    public var token: DeviceToken
    public var topic: String
    public var pushType: PushType
    /// Lowercased; nil when the request had none (the server then makes one).
    public var apnsID: String?
    public var priority: Priority
    public var expiration: Int64?
    public var collapseID: String?
    /// The raw `authorization` header value, for the server's provider-token check.
    public var authorization: String?
    public var payloadSize: Int

    public init(token: DeviceToken, topic: String, pushType: PushType, apnsID: String?, priority: Priority,
                expiration: Int64?, collapseID: String?, authorization: String?, payloadSize: Int) {
        self.token = token
        self.topic = topic
        self.pushType = pushType
        self.apnsID = apnsID
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.authorization = authorization
        self.payloadSize = payloadSize
    }
}
