import Posix

/// Judges incoming broadcast sends and channel management requests the way APNs does, for
/// servers that stand in for it. Pure functions of the request; authentication and the
/// channel registry are the server's.
public struct BroadcastRequestJudge: Sendable {
    /// Bundle ids the credentials may use; nil accepts any.
    public var allowedBundleIDs: Set<String>?

    public init(allowedBundleIDs: Set<String>? = nil) {
        self.allowedBundleIDs = allowedBundleIDs
    }

    public enum Verdict<Accepted: Sendable & Hashable>: Sendable, Hashable {
        case accepted(Accepted)
        case rejected(status: Int, reason: APNsReason)
    }

    public struct AcceptedBroadcast: Sendable, Hashable {
        public var bundleID: String
        public var channelID: ChannelID
        /// The `apns-request-id` sent (else an `apns-id`), lowercased.
        public var apnsID: String?
        public var authorization: String?
        public var payloadSize: Int
        /// `apns-expiration`, which Apple lists as required on broadcasts.
        public var expiration: Int64 = 0
    }

    public struct AcceptedChannelRequest: Sendable, Hashable {
        public var bundleID: String
        public var operation: ChannelRequest.Operation
        public var requestID: String?
        public var authorization: String?
    }

    /// Whether `path` belongs to the broadcast API (so a server can route to this judge).
    public static func isBroadcastPath(_ path: String) -> Bool {
        path.utf8.starts(with: BroadcastNotification.pathPrefix.utf8)
    }

    public func judgeBroadcast(method: String, path: String, headers: [HeaderField], body: [UInt8]) -> Verdict<AcceptedBroadcast> {
        guard method == "POST" else { return .rejected(status: 405, reason: .methodNotAllowed) }
        guard BroadcastRequestJudge.isBroadcastPath(path) else { return .rejected(status: 404, reason: .badPath) }
        let bundleID = String(path.dropFirst(BroadcastNotification.pathPrefix.count))
        guard bundleIDIsUsable(bundleID) else { return .rejected(status: 404, reason: .badPath) }
        let slots: [String: String]
        switch collect(headers, names: [APNsHeader.authorization, APNsHeader.pushType, APNsHeader.channelID,
                                        APNsHeader.id, APNsHeader.requestID, APNsHeader.expiration, APNsHeader.priority]) {
        case .none: return .rejected(status: 400, reason: .duplicateHeaders)
        case .some(let found): slots = found
        }
        guard let pushType = slots[APNsHeader.pushType] else { return .rejected(status: 400, reason: .missingPushType) }
        guard pushType == PushType.liveactivity.rawValue else { return .rejected(status: 400, reason: .invalidPushType) }
        guard let channelText = slots[APNsHeader.channelID] else { return .rejected(status: 400, reason: .missingChannelId) }
        guard let channelID = try? ChannelID(channelText) else { return .rejected(status: 400, reason: .badChannelId) }
        if let allowedBundleIDs, !allowedBundleIDs.contains(bundleID) { return .rejected(status: 400, reason: .topicDisallowed) }
        if let id = slots[APNsHeader.id], !APNsID.isCanonical(id) { return .rejected(status: 400, reason: .badMessageId) }
        if let id = slots[APNsHeader.requestID], !APNsID.isCanonical(id) { return .rejected(status: 400, reason: .badMessageId) }
        // Apple lists apns-priority and apns-expiration as required on broadcasts, and
        // ActivityKit allows Live Activity updates priorities 10 and 5 only.
        guard let priorityText = slots[APNsHeader.priority], let priority = Priority(headerValue: priorityText),
              PriorityRules.liveActivity.contains(priority) else {
            return .rejected(status: 400, reason: .badPriority)
        }
        guard let expirationText = slots[APNsHeader.expiration], let expiration = ExpirationRules.parse(expirationText) else {
            return .rejected(status: 400, reason: .badExpirationDate)
        }
        if body.isEmpty { return .rejected(status: 400, reason: .payloadEmpty) }
        if body.count > BroadcastNotification.maxPayloadSize { return .rejected(status: 413, reason: .payloadTooLarge) }
        // Apple's broadcast error table: "The JSON Request payload is unparseable."
        if JSONParser.checkObject(body) != nil { return .rejected(status: 400, reason: .badRequestPayload) }
        let id = (slots[APNsHeader.requestID] ?? slots[APNsHeader.id])?.lowercased()
        return .accepted(AcceptedBroadcast(bundleID: bundleID, channelID: channelID, apnsID: id,
                                           authorization: slots[APNsHeader.authorization], payloadSize: body.count,
                                           expiration: expiration))
    }

    public func judgeChannelRequest(method: String, path: String, headers: [HeaderField], body: [UInt8]) -> Verdict<AcceptedChannelRequest> {
        let prefix = "/1/apps/"
        guard path.utf8.starts(with: prefix.utf8) else { return .rejected(status: 404, reason: .badPath) }
        let rest = path.dropFirst(prefix.count)
        guard let slash = rest.lastIndex(of: "/") else { return .rejected(status: 404, reason: .badPath) }
        let bundleID = String(rest[..<slash])
        let resource = rest[rest.index(after: slash)...]
        guard bundleIDIsUsable(bundleID), resource == "channels" || resource == "all-channels" else {
            return .rejected(status: 404, reason: .badPath)
        }
        let slots: [String: String]
        switch collect(headers, names: [APNsHeader.authorization, APNsHeader.channelID, APNsHeader.requestID]) {
        case .none: return .rejected(status: 400, reason: .duplicateHeaders)
        case .some(let found): slots = found
        }
        if let allowedBundleIDs, !allowedBundleIDs.contains(bundleID) { return .rejected(status: 400, reason: .topicDisallowed) }

        let operation: ChannelRequest.Operation
        switch (method, resource == "all-channels") {
        case ("GET", true):
            operation = .listAll
        case ("POST", false):
            guard case .object(let object)? = try? JSONValue.parse(body, maxDepth: 4) else {
                // Apple's channel error table: "The JSON Request payload is unparseable."
                return .rejected(status: 400, reason: .badRequestPayload)
            }
            guard let pushType = object[ChannelBodyKey.pushType]?.stringValue else { return .rejected(status: 400, reason: .missingPushType) }
            guard pushType == ChannelRequest.channelPushType else { return .rejected(status: 400, reason: .invalidPushType) }
            guard let number = object[ChannelBodyKey.storagePolicy]?.numberValue?.int64Value,
                  let policy = MessageStoragePolicy(rawValue: Int(number)) else {
                // "The JSON Request payload contained an unrecognizable attribute."
                return .rejected(status: 400, reason: .badRequestParams)
            }
            // "The JSON Request payload contained an unrecognizable attribute": a create body
            // holds these two attributes and no other.
            guard object.keys.allSatisfy({ $0 == ChannelBodyKey.pushType || $0 == ChannelBodyKey.storagePolicy }) else {
                return .rejected(status: 400, reason: .badRequestParams)
            }
            operation = .create(policy)
        case ("GET", false), ("DELETE", false):
            guard let text = slots[APNsHeader.channelID] else { return .rejected(status: 400, reason: .missingChannelId) }
            guard let id = try? ChannelID(text) else { return .rejected(status: 400, reason: .badChannelId) }
            operation = method == "GET" ? .read(id) : .delete(id)
        default:
            return .rejected(status: 405, reason: .methodNotAllowed)
        }
        return .accepted(AcceptedChannelRequest(bundleID: bundleID, operation: operation, requestID: slots[APNsHeader.requestID],
                                                authorization: slots[APNsHeader.authorization]))
    }

    private func bundleIDIsUsable(_ bundleID: String) -> Bool {
        var found = [ValidationIssue]()
        BroadcastRules.checkBundleID(bundleID, into: &found)
        return found.isEmpty
    }

    /// The named headers' values; nil when one of them appears twice.
    private func collect(_ headers: [HeaderField], names: Set<String>) -> [String: String]? {
        var slots = [String: String]()
        for field in headers {
            let name = HeaderField.hasUppercase(field.name) ? field.name.lowercased() : field.name
            guard names.contains(name) else { continue }
            if slots[name] != nil { return nil }
            slots[name] = field.value
        }
        return slots
    }
}
