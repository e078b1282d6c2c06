import Posix

/// Importers of both Foundation and APNs can use this name instead of `APNs.Notification`.
public typealias APNsNotification = Notification

/// One push request: where it goes, how APNs should treat it, and the payload bytes.
///
/// The payload is kept as bytes because APNs counts bytes: re-rendering stored JSON could
/// change its size and push a valid notification over the limit.
public struct Notification: Sendable, Hashable {
    public var token: DeviceToken
    public var topic: String
    public var pushType: PushType
    /// nil omits `apns-priority`; APNs then uses 10 (5 for background).
    /// `.immediate` (10) is not sent either, except for background pushes (see `headerFields`).
    public var priority: Priority?
    /// Epoch seconds after which APNs stops trying; 0 means deliver now or never; nil omits the
    /// header and leaves storage to APNs.
    public var expiration: Int64?
    public var collapseID: String?
    /// nil omits `apns-id`; APNs then makes one and returns it.
    public var apnsID: APNsID?
    public var payload: [UInt8]

    public init(
        token: DeviceToken,
        topic: String,
        pushType: PushType = .alert,
        priority: Priority? = nil,
        expiration: Int64? = nil,
        collapseID: String? = nil,
        apnsID: APNsID? = nil,
        payload: [UInt8]
    ) {
        self.token = token
        self.topic = topic
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.payload = payload
    }

    /// The `:path` pseudo-header.
    public var path: String { "/3/device/" + token.hex }

    /// `:method` is always POST.
    public static let method = "POST"

    /// The id as APNs wants it: a lowercase canonical UUID.
    public var apnsIDString: String? { apnsID.map { $0.lowercasedString } }

    /// The request headers after the pseudo-headers, in a fixed order.
    ///
    /// `authorization` is the complete header value (`ProviderToken.authorizationValue`, that
    /// is "bearer <jwt>"); pass nil with certificate authentication.
    ///
    /// `apns-priority: 10` is left out: Apple documents that APNs sets priority 10 when the
    /// header is omitted, and each header line cost the engine about 5,800 instructions per
    /// request in libcurl, libc and nghttp2 (docs/dispatcher.md). A background push keeps it,
    /// so that APNs refuses that combination exactly as it was asked for.
    public func headerFields(authorization: String?) -> [HeaderField] {
        var fields = [HeaderField]()
        fields.reserveCapacity(7)
        if let authorization { fields.append(HeaderField(name: APNsHeader.authorization, value: authorization)) }
        if let id = apnsIDString { fields.append(HeaderField(name: APNsHeader.id, value: id)) }
        fields.append(HeaderField(name: APNsHeader.pushType, value: pushType.rawValue))
        if let expiration { fields.append(HeaderField(name: APNsHeader.expiration, value: String(expiration))) }
        if let priority, priority != .immediate || pushType == .background { fields.append(HeaderField(name: APNsHeader.priority, value: priority.headerValue)) }
        fields.append(HeaderField(name: APNsHeader.topic, value: topic))
        if let collapseID { fields.append(HeaderField(name: APNsHeader.collapseID, value: collapseID)) }
        return fields
    }
}
