/// The `apns-push-type` header value, which also decides the topic suffix and the payload limit.
public enum PushType: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    case alert
    case background
    case voip
    case complication
    case fileprovider
    case mdm
    case location
    case liveactivity
    case pushtotalk
    case widgets
    case controls

    /// What APNs expects after the bundle id in `apns-topic`. Empty for types addressed to the
    /// bundle id itself; nil for `mdm`, whose topic comes from the MDM push certificate and so
    /// cannot be checked against a bundle id.
    public var topicSuffix: String? {
        switch self {
        case .alert, .background: return ""
        case .voip: return ".voip"
        case .complication: return ".complication"
        case .fileprovider: return ".pushkit.fileprovider"
        case .mdm: return nil
        case .location: return ".location-query"
        case .liveactivity: return ".push-type.liveactivity"
        case .pushtotalk: return ".voip-ptt"
        case .widgets: return ".push-type.widgets"
        case .controls: return ".push-type.controls"
        }
    }

    /// The case, not the raw value's text: an enum with raw values hashes its text unless told
    /// otherwise, and pushd counts every notification sent under a key holding its push type.
    public func hash(into hasher: inout Hasher) {
        let ordinal: UInt8 = switch self {
        case .alert: 0
        case .background: 1
        case .voip: 2
        case .complication: 3
        case .fileprovider: 4
        case .mdm: 5
        case .location: 6
        case .liveactivity: 7
        case .pushtotalk: 8
        case .widgets: 9
        case .controls: 10
        }
        hasher.combine(ordinal)
    }

    /// The largest payload APNs accepts for this push type, in bytes.
    public var maxPayloadSize: Int {
        self == .voip ? 5120 : 4096
    }

    /// The topic APNs expects for this push type when the app's bundle id is `bundleID`;
    /// nil for `mdm`.
    public func topic(forBundleID bundleID: String) -> String? {
        topicSuffix.map { bundleID + $0 }
    }

    /// Whether `topic` has the shape this push type requires (for `mdm`, any non-empty topic).
    public func accepts(topic: String) -> Bool {
        guard let suffix = topicSuffix else { return !topic.isEmpty }
        if suffix.isEmpty {
            // A bundle-id topic must not carry another push type's suffix: an alert sent to
            // "app.voip" reaches the VoIP token space and APNs refuses or misroutes it.
            return !topic.isEmpty && PushType.typeOwningSuffix(of: topic) == nil
        }
        return PushType.hasSuffix(topic, suffix)
    }

    /// Byte-wise and strictly longer than the suffix: topics are ASCII, and String.hasSuffix's
    /// Unicode comparison is needlessly slow on the send path.
    static func hasSuffix(_ topic: String, _ suffix: String) -> Bool {
        let t = topic.utf8
        let s = suffix.utf8
        return t.count > s.count && t.suffix(s.count).elementsEqual(s)
    }

    /// The push type whose suffix `topic` ends with, if any (the longest suffix wins, so
    /// ".voip-ptt" is not mistaken for ".voip").
    public static func typeOwningSuffix(of topic: String) -> PushType? {
        var best: (PushType, Int)?
        for type in PushType.allCases {
            guard let suffix = type.topicSuffix, !suffix.isEmpty, hasSuffix(topic, suffix) else { continue }
            if best == nil || suffix.utf8.count > best!.1 { best = (type, suffix.utf8.count) }
        }
        return best?.0
    }

    /// The bundle id a topic addresses once this push type's suffix is removed; nil when the
    /// topic does not fit the push type.
    public func bundleID(fromTopic topic: String) -> String? {
        guard accepts(topic: topic), let suffix = topicSuffix else { return nil }
        return String(decoding: topic.utf8.dropLast(suffix.utf8.count), as: UTF8.self)
    }

    /// The `apns-expiration` a push of this type must carry when the sender gave none: 0 for
    /// PushToTalk, whose pushes Apple says to send with expiration 0 so that no stale one is
    /// delivered; nil (no header) for every other type.
    public var requiredExpiration: Int64? {
        self == .pushtotalk ? 0 : nil
    }

    /// Location queries and Live Activity updates are refused on certificate connections.
    public var supportsCertificateAuthentication: Bool {
        self != .location && self != .liveactivity
    }

    /// The push types APNs takes only with token (JWT) authentication.
    public static let tokenOnly: [PushType] = allCases.filter { !$0.supportsCertificateAuthentication }

    public var description: String { rawValue }
}

/// How a connection proves who is sending.
public enum AuthenticationMode: String, Sendable, Hashable, CaseIterable {
    /// A provider token (JWT signed with the team's .p8 key) on every request.
    case token
    /// A TLS client certificate for one app.
    case certificate
}
