import Posix

/// A notification payload: the `aps` dictionary plus the app's own top-level keys.
///
/// `bytes` renders compact JSON with `aps` first and custom keys in the order they were set.
public struct Payload: Sendable, Hashable {
    public var aps: APS
    /// Top-level keys beside `aps`, in order. A custom key named "aps" is ignored in favour of `aps`.
    public var custom: JSONObject

    public init(aps: APS = APS(), custom: JSONObject = JSONObject()) {
        self.aps = aps
        self.custom = custom
    }

    /// Sets a top-level custom key (replacing an earlier value for the same key).
    public mutating func set(_ key: String, _ value: JSONValue) {
        custom.set(key, value)
    }

    /// Builder form of `set`.
    public func with(_ key: String, _ value: JSONValue) -> Payload {
        var copy = self
        copy.set(key, value)
        return copy
    }

    /// The payload as a JSON object; `aps` is left out when it has no keys (VoIP, MDM and
    /// data-only payloads need none).
    public var jsonObject: JSONObject {
        var members = [JSONMember]()
        members.reserveCapacity(custom.count + 1)
        let apsObject = aps.jsonObject
        if !apsObject.isEmpty { members.append(JSONMember(key: "aps", value: .object(apsObject))) }
        for member in custom.members where member.key != "aps" { members.append(member) }
        return JSONObject(members)
    }

    /// Compact JSON bytes, ready to send.
    public var bytes: [UInt8] {
        var writer = JSONWriter(capacity: 256)
        writer.writeObject(jsonObject.members)
        return writer.bytes
    }

    /// Convenience for the most common payload: an alert with a title and body.
    public static func alert(title: String? = nil, body: String) -> Payload {
        Payload(aps: APS(alert: .fields(Alert(title: title, body: body))))
    }

    /// A background (silent) update: `content-available: 1` and nothing the user sees.
    public static func background() -> Payload {
        Payload(aps: APS(contentAvailable: true))
    }
}

/// The `aps` dictionary. Every key Apple documents is a property; `extra` carries keys added
/// after this code was written, rendered after the documented ones.
public struct APS: Sendable, Hashable {
    public var alert: AlertContent?
    public var badge: Int?
    public var sound: Sound?
    public var threadID: String?
    public var category: String?
    /// Renders `"content-available":1`; wakes the app in the background.
    public var contentAvailable: Bool
    /// Renders `"mutable-content":1`; routes the notification through the service extension.
    public var mutableContent: Bool
    public var targetContentID: String?
    public var interruptionLevel: InterruptionLevel?
    /// 0…1 for notifications; any number for Live Activities.
    public var relevanceScore: Double?
    public var filterCriteria: String?
    // Live Activities
    /// Seconds since the epoch; orders updates.
    public var timestamp: Int64?
    public var event: LiveActivityEvent?
    public var contentState: JSONObject?
    public var staleDate: Int64?
    public var dismissalDate: Int64?
    public var attributesType: String?
    public var attributes: JSONObject?
    /// Asks a Live Activity started by push to send back its own update token.
    public var inputPushToken: Bool
    public var extra: JSONObject

    public init(
        alert: AlertContent? = nil,
        badge: Int? = nil,
        sound: Sound? = nil,
        threadID: String? = nil,
        category: String? = nil,
        contentAvailable: Bool = false,
        mutableContent: Bool = false,
        targetContentID: String? = nil,
        interruptionLevel: InterruptionLevel? = nil,
        relevanceScore: Double? = nil,
        filterCriteria: String? = nil,
        timestamp: Int64? = nil,
        event: LiveActivityEvent? = nil,
        contentState: JSONObject? = nil,
        staleDate: Int64? = nil,
        dismissalDate: Int64? = nil,
        attributesType: String? = nil,
        attributes: JSONObject? = nil,
        inputPushToken: Bool = false,
        extra: JSONObject = JSONObject()
    ) {
        self.alert = alert
        self.badge = badge
        self.sound = sound
        self.threadID = threadID
        self.category = category
        self.contentAvailable = contentAvailable
        self.mutableContent = mutableContent
        self.targetContentID = targetContentID
        self.interruptionLevel = interruptionLevel
        self.relevanceScore = relevanceScore
        self.filterCriteria = filterCriteria
        self.timestamp = timestamp
        self.event = event
        self.contentState = contentState
        self.staleDate = staleDate
        self.dismissalDate = dismissalDate
        self.attributesType = attributesType
        self.attributes = attributes
        self.inputPushToken = inputPushToken
        self.extra = extra
    }

    public var jsonObject: JSONObject {
        var m = [JSONMember]()
        func add(_ key: String, _ value: JSONValue?) {
            if let value { m.append(JSONMember(key: key, value: value)) }
        }
        add("alert", alert?.jsonValue)
        add("badge", badge.map { .int($0) })
        add("sound", sound?.jsonValue)
        add("thread-id", threadID.map { .string($0) })
        add("category", category.map { .string($0) })
        add("content-available", contentAvailable ? 1 : nil)
        add("mutable-content", mutableContent ? 1 : nil)
        add("target-content-id", targetContentID.map { .string($0) })
        add("interruption-level", interruptionLevel.map { .string($0.rawValue) })
        add("relevance-score", relevanceScore.map { .double($0) })
        add("filter-criteria", filterCriteria.map { .string($0) })
        add("timestamp", timestamp.map { .number(JSONNumber($0)) })
        add("event", event.map { .string($0.rawValue) })
        add("content-state", contentState.map { .object($0) })
        add("stale-date", staleDate.map { .number(JSONNumber($0)) })
        add("dismissal-date", dismissalDate.map { .number(JSONNumber($0)) })
        add("attributes-type", attributesType.map { .string($0) })
        add("attributes", attributes.map { .object($0) })
        add("input-push-token", inputPushToken ? 1 : nil)
        let documented = Set(m.map(\.key))
        for member in extra.members where !documented.contains(member.key) { m.append(member) }
        return JSONObject(m)
    }
}

/// `aps.alert`: a plain string (the body) or a dictionary.
public enum AlertContent: Sendable, Hashable, ExpressibleByStringLiteral {
    case text(String)
    case fields(Alert)

    public init(stringLiteral value: String) { self = .text(value) }

    public var jsonValue: JSONValue {
        switch self {
        case .text(let s): return .string(s)
        case .fields(let alert): return .object(alert.jsonObject)
        }
    }
}

/// The dictionary form of `aps.alert`.
public struct Alert: Sendable, Hashable {
    public var title: String?
    public var subtitle: String?
    public var body: String?
    public var launchImage: String?
    public var titleLocKey: String?
    public var titleLocArgs: [String]?
    public var subtitleLocKey: String?
    public var subtitleLocArgs: [String]?
    public var locKey: String?
    public var locArgs: [String]?

    public init(
        title: String? = nil, subtitle: String? = nil, body: String? = nil, launchImage: String? = nil,
        titleLocKey: String? = nil, titleLocArgs: [String]? = nil,
        subtitleLocKey: String? = nil, subtitleLocArgs: [String]? = nil,
        locKey: String? = nil, locArgs: [String]? = nil
    ) {
        self.title = title
        self.subtitle = subtitle
        self.body = body
        self.launchImage = launchImage
        self.titleLocKey = titleLocKey
        self.titleLocArgs = titleLocArgs
        self.subtitleLocKey = subtitleLocKey
        self.subtitleLocArgs = subtitleLocArgs
        self.locKey = locKey
        self.locArgs = locArgs
    }

    public var jsonObject: JSONObject {
        var m = [JSONMember]()
        func add(_ key: String, _ value: String?) { if let value { m.append(JSONMember(key: key, value: .string(value))) } }
        func add(_ key: String, _ values: [String]?) { if let values { m.append(JSONMember(key: key, value: .array(values.map { .string($0) }))) } }
        add("title", title)
        add("subtitle", subtitle)
        add("body", body)
        add("launch-image", launchImage)
        add("title-loc-key", titleLocKey)
        add("title-loc-args", titleLocArgs)
        add("subtitle-loc-key", subtitleLocKey)
        add("subtitle-loc-args", subtitleLocArgs)
        add("loc-key", locKey)
        add("loc-args", locArgs)
        return JSONObject(m)
    }
}

/// `aps.sound`: a sound file name ("default" for the system sound), or the critical-alert dictionary.
public enum Sound: Sendable, Hashable, ExpressibleByStringLiteral {
    case named(String)
    case critical(CriticalSound)

    public init(stringLiteral value: String) { self = .named(value) }

    public static let `default`: Sound = .named("default")

    public var jsonValue: JSONValue {
        switch self {
        case .named(let name): return .string(name)
        case .critical(let sound): return .object(sound.jsonObject)
        }
    }
}

/// The sound dictionary of a critical alert (needs Apple's critical-alert entitlement).
public struct CriticalSound: Sendable, Hashable {
    /// Renders `"critical":1`; false renders 0 (a normal sound using the dictionary form).
    public var critical: Bool
    public var name: String
    /// 0 (silent) … 1 (full volume).
    public var volume: Double?

    public init(critical: Bool = true, name: String = "default", volume: Double? = nil) {
        self.critical = critical
        self.name = name
        self.volume = volume
    }

    public var jsonObject: JSONObject {
        var m = [JSONMember(key: "critical", value: .int(critical ? 1 : 0)), JSONMember(key: "name", value: .string(name))]
        if let volume { m.append(JSONMember(key: "volume", value: .double(volume))) }
        return JSONObject(m)
    }
}

/// `aps.interruption-level`.
public enum InterruptionLevel: String, Sendable, Hashable, CaseIterable {
    case passive
    case active
    case timeSensitive = "time-sensitive"
    case critical
}

/// `aps.event` of a Live Activity push.
public enum LiveActivityEvent: String, Sendable, Hashable, CaseIterable {
    case start
    case update
    case end
}

extension Notification {
    /// A notification whose payload is rendered from `payload`.
    public init(
        token: DeviceToken, topic: String, pushType: PushType = .alert, priority: Priority? = nil,
        expiration: Int64? = nil, collapseID: String? = nil, apnsID: APNsID? = nil, payload: Payload
    ) {
        self.init(token: token, topic: topic, pushType: pushType, priority: priority, expiration: expiration,
                  collapseID: collapseID, apnsID: apnsID, payload: payload.bytes)
    }
}
