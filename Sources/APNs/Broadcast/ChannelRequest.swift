import Posix

/// One request to the channel management API (create, read, delete a channel, or list all
/// channels of a bundle id). Sent to `APNsEnvironment.channelManagementHost` with a provider
/// token or on a connection that presents the app's certificate: Apple's "Sending channel
/// management requests to APNs" has the `authorization` header "Required, if mTLS
/// authentication is omitted" (create, read) or "Required for token-based authentication"
/// (delete, list), and "APNs ignores this header if you use certificate-based authentication".
public struct ChannelRequest: Sendable, Hashable {
    public enum Operation: Sendable, Hashable {
        case create(MessageStoragePolicy)
        case read(ChannelID)
        case delete(ChannelID)
        case listAll
    }

    public var bundleID: String
    public var operation: Operation
    /// `apns-request-id`; APNs makes one and returns it when absent.
    public var requestID: APNsID?

    public init(bundleID: String, operation: Operation, requestID: APNsID? = nil) {
        self.bundleID = bundleID
        self.operation = operation
        self.requestID = requestID
    }

    /// The only push type channels carry, as the create body spells it.
    public static let channelPushType = "LiveActivity"

    public var method: String {
        switch operation {
        case .create: return "POST"
        case .read, .listAll: return "GET"
        case .delete: return "DELETE"
        }
    }

    public var path: String {
        switch operation {
        case .create, .read, .delete: return "/1/apps/\(bundleID)/channels"
        case .listAll: return "/1/apps/\(bundleID)/all-channels"
        }
    }

    public var channelID: ChannelID? {
        switch operation {
        case .read(let id), .delete(let id): return id
        case .create, .listAll: return nil
        }
    }

    /// `authorization` is the complete value ("bearer <jwt>"); nil on a certificate connection,
    /// where APNs ignores the header.
    public func headerFields(authorization: String?) -> [HeaderField] {
        var fields = [HeaderField]()
        if let authorization { fields.append(HeaderField(name: APNsHeader.authorization, value: authorization)) }
        if let requestID { fields.append(HeaderField(name: APNsHeader.requestID, value: requestID.lowercasedString)) }
        if let channelID { fields.append(HeaderField(name: APNsHeader.channelID, value: channelID.value)) }
        return fields
    }

    /// `{"message-storage-policy":N,"push-type":"LiveActivity"}` for create, empty otherwise.
    public var body: [UInt8] {
        guard case .create(let policy) = operation else { return [] }
        var object = JSONObject()
        object.set(ChannelBodyKey.storagePolicy, .int(policy.rawValue))
        object.set(ChannelBodyKey.pushType, .string(ChannelRequest.channelPushType))
        return JSONValue.object(object).compactBytes
    }

    /// Everything wrong with the request before it is sent; either authentication will do.
    public func issues(authentication: AuthenticationMode) -> [ValidationIssue] {
        var found = [ValidationIssue]()
        BroadcastRules.checkBundleID(bundleID, into: &found)
        return found
    }
}

/// Member names of channel management bodies.
public enum ChannelBodyKey {
    public static let storagePolicy = "message-storage-policy"
    public static let pushType = "push-type"
    public static let channels = "channels"
}

/// What a successful read or list answered.
public enum ChannelAnswer {
    /// A read's body: `{"message-storage-policy":N,"push-type":"LiveActivity"}`.
    public static func storagePolicy(fromReadBody body: [UInt8]) -> MessageStoragePolicy? {
        guard case .object(let object)? = try? JSONValue.parse(body, maxDepth: 4),
              let number = object[ChannelBodyKey.storagePolicy]?.numberValue?.int64Value else { return nil }
        return MessageStoragePolicy(rawValue: Int(number))
    }

    /// A list's body: `{"channels":["id", …]}`; nil when the body is not of that shape.
    public static func channels(fromListBody body: [UInt8]) -> [String]? {
        guard case .object(let object)? = try? JSONValue.parse(body, maxDepth: 4),
              let array = object[ChannelBodyKey.channels]?.arrayValue else { return nil }
        var ids = [String]()
        ids.reserveCapacity(array.count)
        for element in array {
            guard let id = element.stringValue else { return nil }
            ids.append(id)
        }
        return ids
    }

    public static func listBody(_ ids: [String]) -> [UInt8] {
        var object = JSONObject()
        object.set(ChannelBodyKey.channels, .array(ids.map { .string($0) }))
        return JSONValue.object(object).compactBytes
    }

    public static func readBody(_ policy: MessageStoragePolicy) -> [UInt8] {
        var object = JSONObject()
        object.set(ChannelBodyKey.storagePolicy, .int(policy.rawValue))
        object.set(ChannelBodyKey.pushType, .string(ChannelRequest.channelPushType))
        return JSONValue.object(object).compactBytes
    }
}
