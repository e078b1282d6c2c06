/// What APNs answered to one request.
public struct APNsResponse: Sendable, Hashable {
    public var status: Int
    /// The `apns-id` response header, when present.
    public var apnsID: String?
    /// nil for 200, and for error bodies without a readable reason.
    public var reason: APNsReason?
    /// Milliseconds since the epoch at which APNs learned the token stopped being valid (410 only).
    public var timestamp: Int64?

    public init(status: Int, apnsID: String? = nil, reason: APNsReason? = nil, timestamp: Int64? = nil) {
        self.status = status
        self.apnsID = apnsID
        self.reason = reason
        self.timestamp = timestamp
    }

    /// Reads a response from its status, `apns-id` header and body. Never fails: an
    /// unreadable body leaves `reason` nil, which classification treats explicitly.
    public init(status: Int, apnsID: String? = nil, body: [UInt8]) {
        let parsed = APNsErrorBody.parse(body)
        self.init(status: status, apnsID: apnsID, reason: parsed?.reason, timestamp: parsed?.timestamp)
    }

    public var isSuccess: Bool { (200..<300).contains(status) }

    /// What to do about this response.
    public var action: ResponseAction {
        ResponseClassifier.classify(status: status, reason: reason, timestamp: timestamp)
    }
}

/// The JSON body of an APNs error: `{"reason":"…"}`, plus `"timestamp"` on 410.
public struct APNsErrorBody: Sendable, Hashable {
    public var reason: APNsReason?
    public var timestamp: Int64?

    public init(reason: APNsReason?, timestamp: Int64? = nil) {
        self.reason = reason
        self.timestamp = timestamp
    }

    /// Reads an error body; nil when the bytes are not a JSON object. Members of the wrong type
    /// are ignored rather than failing the whole body: a reason is worth keeping even if the
    /// timestamp is odd. A timestamp written as a float or string of digits is accepted.
    public static func parse(_ body: [UInt8]) -> APNsErrorBody? {
        guard !body.isEmpty, body.count <= 64 * 1024 else { return nil }
        guard case .object(let object)? = try? JSONValue.parse(body, maxDepth: 16) else { return nil }
        var result = APNsErrorBody(reason: nil)
        if case .string(let reason)? = object["reason"] { result.reason = APNsReason(reason) }
        switch object["timestamp"] {
        case .number(let n)?:
            if let exact = n.int64Value {
                result.timestamp = exact
            } else {
                let d = n.doubleValue
                if d.isFinite && abs(d) < 9.0e18 { result.timestamp = Int64(d) }
            }
        case .string(let s)?:
            result.timestamp = Int64(s)
        default:
            break
        }
        return result
    }

    /// Renders the body as APNs sends it, member order reason then timestamp.
    public var bytes: [UInt8] {
        var object = JSONObject()
        if let reason { object.set("reason", .string(reason.rawValue)) }
        if let timestamp { object.set("timestamp", .number(JSONNumber(timestamp))) }
        return JSONValue.object(object).compactBytes
    }
}
