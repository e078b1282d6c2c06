/// Checks a notification before it is sent, so that a job APNs would refuse (or silently
/// drop) is dead-lettered with a reason that says what to fix.
///
/// Runs on every send: custom payload keys are only scanned, never built, and the `aps`
/// dictionary is the only part turned into values. Never traps on any input.
public enum NotificationValidator {
    /// Every issue found; empty when the notification may be sent.
    public static func issues(in notification: Notification, authentication: AuthenticationMode = .token) -> [ValidationIssue] {
        var found = [ValidationIssue]()
        checkHeaders(notification, into: &found)
        if authentication == .certificate && !notification.pushType.supportsCertificateAuthentication {
            found.append(.init(field: "apns-push-type", rule: .tokenAuthenticationRequired,
                               message: "APNs accepts \(notification.pushType) pushes only with token (JWT) authentication"))
        }
        checkPayload(notification, into: &found)
        return found
    }

    /// Throws the issues found, if any.
    public static func validate(_ notification: Notification, authentication: AuthenticationMode = .token) throws(NotificationValidationError) {
        let found = issues(in: notification, authentication: authentication)
        if !found.isEmpty { throw NotificationValidationError(issues: found) }
    }

    // MARK: Headers

    static func checkHeaders(_ n: Notification, into found: inout [ValidationIssue]) {
        let type = n.pushType
        if n.topic.isEmpty {
            found.append(.init(field: "apns-topic", rule: .topicMissing, message: "the topic is empty; use the app's bundle id\(suffixHint(type))"))
        } else if !TopicRules.isWellFormed(n.topic) {
            found.append(.init(field: "apns-topic", rule: .topicMalformed,
                               message: "\"\(n.topic)\" must be printable ASCII without spaces, at most \(NotificationLimits.maxTopicBytes) bytes"))
        } else if !type.accepts(topic: n.topic) {
            let message: String
            if let suffix = type.topicSuffix, !suffix.isEmpty {
                message = "\(type) pushes need a topic ending in \"\(suffix)\", found \"\(n.topic)\""
            } else if let owner = PushType.typeOwningSuffix(of: n.topic) {
                message = "\(type) pushes go to the bundle id itself; \"\(n.topic)\" ends in the \(owner) suffix \"\(owner.topicSuffix ?? "")\""
            } else {
                message = "\"\(n.topic)\" does not fit push type \(type)"
            }
            found.append(.init(field: "apns-topic", rule: .topicSuffix, message: message))
        }
        if let collapseID = n.collapseID {
            if collapseID.utf8.count > NotificationLimits.maxCollapseIDBytes {
                found.append(.init(field: "apns-collapse-id", rule: .collapseIDTooLong,
                                   message: "\(collapseID.utf8.count) bytes; at most \(NotificationLimits.maxCollapseIDBytes) are allowed"))
            }
            if !HeaderRules.isSafeValue(collapseID) {
                found.append(.init(field: "apns-collapse-id", rule: .collapseIDMalformed,
                                   message: "contains a control character; header values cannot carry them"))
            }
        }
        if let expiration = n.expiration, expiration < 0 {
            found.append(.init(field: "apns-expiration", rule: .expirationNegative,
                               message: "\(expiration) is negative; use epoch seconds, or 0 to deliver only once"))
        }
        if type == .background && n.priority != .conservePower {
            let actual = n.priority.map { "\($0.rawValue)" } ?? "absent (APNs then assumes 10)"
            found.append(.init(field: "apns-priority", rule: .backgroundPriority,
                               message: "background pushes must use priority 5, found \(actual)"))
        }
        if type == .liveactivity, let priority = n.priority, !PriorityRules.liveActivity.contains(priority) {
            found.append(PriorityRules.liveActivityIssue(priority))
        }
        // PushToTalk: "Set the APNs priority to 10 to request immediate delivery, and set an
        // expiration of 0 to prevent the system from delivering older pushes."
        if type == .pushtotalk {
            if let priority = n.priority, priority != .immediate {
                found.append(.init(field: "apns-priority", rule: .pushToTalkPriority,
                                   message: "pushtotalk pushes must use priority 10, found \(priority.rawValue)"))
            }
            if n.expiration != 0 {
                let actual = n.expiration.map { "\($0)" } ?? "absent"
                found.append(.init(field: "apns-expiration", rule: .pushToTalkExpiration,
                                   message: "pushtotalk pushes must have expiration 0 (deliver now or never), found \(actual)"))
            }
        }
    }

    static func suffixHint(_ type: PushType) -> String {
        guard let suffix = type.topicSuffix, !suffix.isEmpty else { return "" }
        return " followed by \"\(suffix)\""
    }

    // MARK: Payload

    /// The payload rules alone for `pushType` (size, a JSON object, the `aps` dictionary): what a
    /// send of this payload would be refused for whatever its headers, so that an import of
    /// per-target payloads refuses the line rather than a target failing at send time.
    public static func payloadIssues(_ payload: [UInt8], pushType: PushType) -> [ValidationIssue] {
        var found = [ValidationIssue]()
        checkPayload(payload, pushType: pushType, into: &found)
        return found
    }

    static func checkPayload(_ n: Notification, into found: inout [ValidationIssue]) {
        checkPayload(n.payload, pushType: n.pushType, into: &found)
    }

    /// The payload rules alone, for requests that have no device token (broadcasts).
    /// `limit`: the largest payload APNs takes there, when not the push type's own (broadcasts).
    static func checkPayload(_ payload: [UInt8], pushType: PushType, limit: Int? = nil, what: String? = nil,
                             into found: inout [ValidationIssue]) {
        if payload.isEmpty {
            found.append(.init(field: "payload", rule: .payloadEmpty, message: "the payload is empty; send at least {}"))
            return
        }
        let limit = limit ?? pushType.maxPayloadSize
        if payload.count > limit {
            found.append(.init(field: "payload", rule: .payloadTooLarge,
                               message: "\(payload.count) bytes; \(what ?? "\(pushType)") payloads may have at most \(limit)"))
            // Far beyond any limit the content no longer matters; do not spend time reading it.
            if payload.count > 16 * limit { return }
        }
        let top: TopLevel
        do {
            top = try scanTopLevel(payload)
        } catch {
            found.append(.init(field: "payload", rule: .payloadNotJSONObject, message: error.description))
            return
        }
        var checker = APSChecker(type: pushType, found: found)
        checker.check(aps: top.aps, hasMDMMagic: top.hasMDMMagic)
        found = checker.found
    }

    struct TopLevel {
        var aps: JSONValue?
        var hasMDMMagic = false
    }

    /// Reads the top-level object, building only `aps`.
    static func scanTopLevel(_ bytes: [UInt8]) throws(JSONError) -> TopLevel {
        var parser = JSONParser(bytes)
        parser.skipWhitespace()
        guard parser.peek() == UInt8(ascii: "{") else {
            throw parser.fail("the payload must be a JSON object, found \(parser.describeCurrent())")
        }
        var top = TopLevel()
        if try parser.beginObject() {
            try parser.expectEnd()
            return top
        }
        repeat {
            let keyOffset = parser.index
            let key = try parser.parseString()
            try parser.expectColon()
            switch key {
            case "aps":
                if top.aps != nil { throw JSONError(offset: keyOffset, message: "duplicate key \"aps\"") }
                top.aps = try parser.parseValue(depth: 2)
            case "mdm":
                if parser.peek() == UInt8(ascii: "\"") { top.hasMDMMagic = true }
                try parser.skipValue(depth: 2)
            default:
                try parser.skipValue(depth: 2)
            }
        } while try parser.nextObjectMember()
        try parser.expectEnd()
        return top
    }
}

/// The rules for the `aps` dictionary, one push type at a time.
struct APSChecker {
    let type: PushType
    var found: [ValidationIssue]

    init(type: PushType, found: [ValidationIssue]) {
        self.type = type
        self.found = found
    }

    mutating func issue(_ field: String, _ rule: ValidationRule, _ message: String) {
        found.append(ValidationIssue(field: field, rule: rule, message: message))
    }

    mutating func check(aps apsValue: JSONValue?, hasMDMMagic: Bool) {
        if type == .mdm && !hasMDMMagic {
            issue("mdm", .mdmPushMagic, "MDM payloads carry the device's PushMagic string as top-level \"mdm\"")
        }
        guard let apsValue else {
            if type == .background {
                issue("aps", .backgroundContentAvailable, "background pushes need \"aps\":{\"content-available\":1}")
            } else if type == .liveactivity {
                issue("aps", .liveActivityTimestamp, "Live Activity pushes need an \"aps\" dictionary with timestamp and event")
            }
            return
        }
        guard case .object(let aps) = apsValue else {
            issue("aps", .wrongType, "must be an object, found \(apsValue.typeName)")
            return
        }
        // One pass over the members: this runs on every send, and a lookup per documented key
        // would compare every key against some twenty names.
        for member in aps.members {
            let value = member.value
            switch member.key {
            case "alert": checkAlert(value)
            case "badge": checkNonNegativeInteger(value, field: "aps.badge")
            case "sound": checkSound(value)
            case "thread-id", "category", "target-content-id", "filter-criteria", "attributes-type", "input-push-channel":
                checkString(value, field: "aps." + member.key)
            case "content-available", "mutable-content", "input-push-token":
                checkFlag(value, field: "aps." + member.key)
            case "interruption-level": checkInterruptionLevel(value)
            case "relevance-score": checkRelevanceScore(value)
            case "timestamp", "stale-date", "dismissal-date":
                checkNonNegativeInteger(value, field: "aps." + member.key)
            case "content-state", "attributes":
                if value.objectValue == nil { issue("aps." + member.key, .wrongType, "must be an object, found \(value.typeName)") }
            case "event": checkEvent(value)
            default: break
            }
        }

        switch type {
        case .background: checkBackground(aps)
        case .liveactivity: checkLiveActivity(aps)
        default: break
        }
    }

    mutating func checkInterruptionLevel(_ level: JSONValue) {
        if case .string(let s) = level {
            if InterruptionLevel(rawValue: s) == nil {
                issue("aps.interruption-level", .unknownValue, "\"\(s)\" is not one of passive, active, time-sensitive, critical")
            }
        } else {
            issue("aps.interruption-level", .wrongType, "must be a string, found \(level.typeName)")
        }
    }

    mutating func checkRelevanceScore(_ score: JSONValue) {
        guard case .number(let n) = score else {
            issue("aps.relevance-score", .wrongType, "must be a number, found \(score.typeName)")
            return
        }
        let d = n.doubleValue
        // Live Activities rank by any number; notification summaries need 0…1.
        if !d.isFinite || (type != .liveactivity && !(0...1).contains(d)) {
            issue("aps.relevance-score", .outOfRange, "\(n) must be between 0 and 1")
        }
    }

    mutating func checkEvent(_ event: JSONValue) {
        if case .string(let s) = event {
            if LiveActivityEvent(rawValue: s) == nil {
                issue("aps.event", .liveActivityEvent, "\"\(s)\" is not one of start, update, end")
            }
        } else {
            issue("aps.event", .wrongType, "must be a string, found \(event.typeName)")
        }
    }

    mutating func checkBackground(_ aps: JSONObject) {
        if aps["content-available"]?.numberValue?.text != "1" {
            issue("aps.content-available", .backgroundContentAvailable, "background pushes need \"content-available\":1")
        }
        for key in ["alert", "sound", "badge"] where aps[key] != nil {
            issue("aps." + key, .backgroundUserVisible,
                  "background pushes must not carry \"\(key)\"; send an alert push instead")
        }
    }

    mutating func checkLiveActivity(_ aps: JSONObject) {
        if aps["timestamp"] == nil {
            issue("aps.timestamp", .liveActivityTimestamp, "Live Activity pushes need \"timestamp\" (epoch seconds)")
        }
        guard let eventValue = aps["event"] else {
            issue("aps.event", .liveActivityEvent, "Live Activity pushes need \"event\" (start, update or end)")
            return
        }
        guard case .string(let eventText) = eventValue, let event = LiveActivityEvent(rawValue: eventText) else { return }
        if event != .end && aps["content-state"] == nil {
            issue("aps.content-state", .liveActivityContentState, "\(event.rawValue) events need \"content-state\"")
        }
        if event == .start {
            if aps["attributes-type"] == nil {
                issue("aps.attributes-type", .liveActivityAttributes, "start events need \"attributes-type\"")
            }
            if aps["attributes"] == nil {
                issue("aps.attributes", .liveActivityAttributes, "start events need \"attributes\"")
            }
            // ActivityKit: "Include an alert in the JSON payload" of a start, so that nobody is
            // surprised by a Live Activity they did not see begin.
            if aps["alert"] == nil {
                issue("aps.alert", .liveActivityStartAlert, "start events need an \"alert\"")
            }
        }
    }

    static let alertStringKeys: Set<String> = [
        "title", "subtitle", "body", "launch-image", "title-loc-key", "subtitle-loc-key", "loc-key", "action-loc-key", "action",
    ]
    static let alertArrayKeys: Set<String> = ["title-loc-args", "subtitle-loc-args", "loc-args"]

    mutating func checkAlert(_ value: JSONValue?) {
        guard let value else { return }
        switch value {
        case .string:
            return
        case .object(let alert):
            for member in alert.members {
                let field = "aps.alert." + member.key
                if type == .liveactivity && (member.key == "title" || member.key == "body") {
                    checkLiveActivityText(member.value, field: field)
                } else if APSChecker.alertStringKeys.contains(member.key) {
                    checkString(member.value, field: field)
                } else if APSChecker.alertArrayKeys.contains(member.key) {
                    guard case .array(let args) = member.value else {
                        issue(field, .wrongType, "must be an array of strings, found \(member.value.typeName)")
                        continue
                    }
                    for (i, arg) in args.enumerated() where arg.stringValue == nil {
                        issue("\(field)[\(i)]", .wrongType, "must be a string, found \(arg.typeName)")
                    }
                }
            }
        default:
            issue("aps.alert", .wrongType, "must be a string or an object, found \(value.typeName)")
        }
    }

    /// ActivityKit's alert `title` and `body` are a string or a localized string:
    /// `{"loc-key": "…", "loc-args": ["…"]}` (loc-args optional).
    mutating func checkLiveActivityText(_ value: JSONValue, field: String) {
        switch value {
        case .string:
            return
        case .object(let localized):
            if let key = localized["loc-key"] {
                checkString(key, field: field + ".loc-key")
            } else {
                issue(field + ".loc-key", .missingKey, "a localized \(field) needs \"loc-key\"")
            }
            if let args = localized["loc-args"] { checkStringArray(args, field: field + ".loc-args") }
        default:
            issue(field, .wrongType, "must be a string or an object with \"loc-key\" and \"loc-args\", found \(value.typeName)")
        }
    }

    mutating func checkStringArray(_ value: JSONValue, field: String) {
        guard case .array(let args) = value else {
            issue(field, .wrongType, "must be an array of strings, found \(value.typeName)")
            return
        }
        for (i, arg) in args.enumerated() where arg.stringValue == nil {
            issue("\(field)[\(i)]", .wrongType, "must be a string, found \(arg.typeName)")
        }
    }

    mutating func checkSound(_ value: JSONValue?) {
        guard let value else { return }
        switch value {
        case .string:
            return
        case .object(let sound):
            if let critical = sound["critical"] { checkFlag(critical, field: "aps.sound.critical") }
            if let name = sound["name"] {
                checkString(name, field: "aps.sound.name")
            } else {
                issue("aps.sound.name", .missingKey, "the sound dictionary needs \"name\" (\"default\" for the system sound)")
            }
            if let volume = sound["volume"] {
                if case .number(let n) = volume {
                    let d = n.doubleValue
                    if !(d >= 0 && d <= 1) {
                        issue("aps.sound.volume", .criticalSoundVolume, "\(n) must be between 0 and 1")
                    }
                } else {
                    issue("aps.sound.volume", .wrongType, "must be a number, found \(volume.typeName)")
                }
            }
        default:
            issue("aps.sound", .wrongType, "must be a string or a critical-alert object, found \(value.typeName)")
        }
    }

    mutating func checkString(_ value: JSONValue, field: String) {
        if value.stringValue == nil { issue(field, .wrongType, "must be a string, found \(value.typeName)") }
    }

    mutating func checkFlag(_ value: JSONValue, field: String) {
        guard case .number(let n) = value else {
            issue(field, .wrongType, "must be the number 0 or 1, found \(value.typeName)")
            return
        }
        if n.text != "0" && n.text != "1" { issue(field, .outOfRange, "\(n) must be 0 or 1") }
    }

    mutating func checkNonNegativeInteger(_ value: JSONValue, field: String) {
        guard case .number(let n) = value else {
            issue(field, .wrongType, "must be an integer, found \(value.typeName)")
            return
        }
        guard let i = n.int64Value else { issue(field, .wrongType, "\(n) must be an integer"); return }
        if i < 0 { issue(field, .outOfRange, "\(n) must not be negative") }
    }
}
