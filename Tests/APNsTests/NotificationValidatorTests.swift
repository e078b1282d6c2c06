import APNs
import Testing

@Suite struct NotificationValidatorTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var pushType: PushType = .alert
        var topic: String = "com.example.app"
        var priority: Priority? = .immediate
        var expiration: Int64? = nil
        var collapseID: String? = nil
        var payload: String
        var field: String
        var rule: ValidationRule

        var testDescription: String { name }
    }

    static let bg = (type: PushType.background, priority: Priority.conservePower)

    static let cases: [Case] = [
        Case(name: "empty topic", topic: "", payload: "{}", field: "apns-topic", rule: .topicMissing),
        Case(name: "topic with space", topic: "com.example app", payload: "{}", field: "apns-topic", rule: .topicMalformed),
        Case(name: "voip without suffix", pushType: .voip, payload: "{}", field: "apns-topic", rule: .topicSuffix),
        Case(name: "alert to voip topic", topic: "com.example.app.voip", payload: "{}", field: "apns-topic", rule: .topicSuffix),
        Case(name: "collapse id 65 bytes", collapseID: String(repeating: "é", count: 33), payload: "{}", field: "apns-collapse-id", rule: .collapseIDTooLong),
        Case(name: "collapse id with newline", collapseID: "a\r\napns-priority: 10", payload: "{}", field: "apns-collapse-id", rule: .collapseIDMalformed),
        Case(name: "negative expiration", expiration: -5, payload: "{}", field: "apns-expiration", rule: .expirationNegative),
        Case(name: "empty payload", payload: "", field: "payload", rule: .payloadEmpty),
        Case(name: "payload over 4096", payload: #"{"x":""# + String(repeating: "a", count: 4090) + #""}"#, field: "payload", rule: .payloadTooLarge),
        Case(name: "voip payload over 5120", pushType: .voip, topic: "com.example.app.voip",
             payload: #"{"x":""# + String(repeating: "a", count: 5114) + #""}"#, field: "payload", rule: .payloadTooLarge),
        Case(name: "array payload", payload: "[1]", field: "payload", rule: .payloadNotJSONObject),
        Case(name: "truncated JSON", payload: #"{"aps":{"alert":"x"}"#, field: "payload", rule: .payloadNotJSONObject),
        Case(name: "trailing garbage", payload: "{} x", field: "payload", rule: .payloadNotJSONObject),
        Case(name: "duplicate aps", payload: #"{"aps":{},"aps":{}}"#, field: "payload", rule: .payloadNotJSONObject),
        Case(name: "invalid UTF-8 in custom key", payload: "{\"k\":\"\u{FFFD}\"}".replacingOccurrences(of: "\u{FFFD}", with: "\\ud800"),
             field: "payload", rule: .payloadNotJSONObject),
        Case(name: "aps not an object", payload: #"{"aps":"hi"}"#, field: "aps", rule: .wrongType),
        Case(name: "alert a number", payload: #"{"aps":{"alert":5}}"#, field: "aps.alert", rule: .wrongType),
        Case(name: "alert title a number", payload: #"{"aps":{"alert":{"title":5}}}"#, field: "aps.alert.title", rule: .wrongType),
        Case(name: "loc-args not array", payload: #"{"aps":{"alert":{"loc-args":"a"}}}"#, field: "aps.alert.loc-args", rule: .wrongType),
        Case(name: "loc-args element a number", payload: #"{"aps":{"alert":{"loc-key":"K","loc-args":["a",2]}}}"#, field: "aps.alert.loc-args[1]", rule: .wrongType),
        Case(name: "badge a string", payload: #"{"aps":{"badge":"1"}}"#, field: "aps.badge", rule: .wrongType),
        Case(name: "badge negative", payload: #"{"aps":{"badge":-1}}"#, field: "aps.badge", rule: .outOfRange),
        Case(name: "badge fractional", payload: #"{"aps":{"badge":1.5}}"#, field: "aps.badge", rule: .wrongType),
        Case(name: "sound a number", payload: #"{"aps":{"sound":1}}"#, field: "aps.sound", rule: .wrongType),
        Case(name: "critical volume above 1", payload: #"{"aps":{"sound":{"critical":1,"name":"default","volume":1.5}}}"#, field: "aps.sound.volume", rule: .criticalSoundVolume),
        Case(name: "critical volume negative", payload: #"{"aps":{"sound":{"critical":1,"name":"default","volume":-0.1}}}"#, field: "aps.sound.volume", rule: .criticalSoundVolume),
        Case(name: "critical volume a string", payload: #"{"aps":{"sound":{"critical":1,"name":"default","volume":"loud"}}}"#, field: "aps.sound.volume", rule: .wrongType),
        Case(name: "critical flag 2", payload: #"{"aps":{"sound":{"critical":2,"name":"default"}}}"#, field: "aps.sound.critical", rule: .outOfRange),
        Case(name: "critical sound without name", payload: #"{"aps":{"sound":{"critical":1}}}"#, field: "aps.sound.name", rule: .missingKey),
        Case(name: "thread-id a number", payload: #"{"aps":{"alert":"a","thread-id":1}}"#, field: "aps.thread-id", rule: .wrongType),
        Case(name: "category a number", payload: #"{"aps":{"alert":"a","category":1}}"#, field: "aps.category", rule: .wrongType),
        Case(name: "target-content-id a bool", payload: #"{"aps":{"alert":"a","target-content-id":true}}"#, field: "aps.target-content-id", rule: .wrongType),
        Case(name: "filter-criteria a number", payload: #"{"aps":{"alert":"a","filter-criteria":1}}"#, field: "aps.filter-criteria", rule: .wrongType),
        Case(name: "mutable-content true", payload: #"{"aps":{"alert":"a","mutable-content":true}}"#, field: "aps.mutable-content", rule: .wrongType),
        Case(name: "content-available 2", payload: #"{"aps":{"alert":"a","content-available":2}}"#, field: "aps.content-available", rule: .outOfRange),
        Case(name: "interruption level unknown", payload: #"{"aps":{"alert":"a","interruption-level":"urgent"}}"#, field: "aps.interruption-level", rule: .unknownValue),
        Case(name: "interruption level a number", payload: #"{"aps":{"alert":"a","interruption-level":1}}"#, field: "aps.interruption-level", rule: .wrongType),
        Case(name: "relevance above 1", payload: #"{"aps":{"alert":"a","relevance-score":1.01}}"#, field: "aps.relevance-score", rule: .outOfRange),
        Case(name: "relevance a string", payload: #"{"aps":{"alert":"a","relevance-score":"high"}}"#, field: "aps.relevance-score", rule: .wrongType),
        Case(name: "background priority 10", pushType: bg.type, priority: .immediate, payload: #"{"aps":{"content-available":1}}"#, field: "apns-priority", rule: .backgroundPriority),
        Case(name: "background priority absent", pushType: bg.type, priority: nil, payload: #"{"aps":{"content-available":1}}"#, field: "apns-priority", rule: .backgroundPriority),
        Case(name: "background without content-available", pushType: bg.type, priority: bg.priority, payload: #"{"aps":{}}"#, field: "aps.content-available", rule: .backgroundContentAvailable),
        Case(name: "background without aps", pushType: bg.type, priority: bg.priority, payload: #"{"data":1}"#, field: "aps", rule: .backgroundContentAvailable),
        Case(name: "background content-available 0", pushType: bg.type, priority: bg.priority, payload: #"{"aps":{"content-available":0}}"#, field: "aps.content-available", rule: .backgroundContentAvailable),
        Case(name: "background with alert", pushType: bg.type, priority: bg.priority, payload: #"{"aps":{"content-available":1,"alert":"x"}}"#, field: "aps.alert", rule: .backgroundUserVisible),
        Case(name: "background with sound", pushType: bg.type, priority: bg.priority, payload: #"{"aps":{"content-available":1,"sound":"default"}}"#, field: "aps.sound", rule: .backgroundUserVisible),
        Case(name: "background with badge", pushType: bg.type, priority: bg.priority, payload: #"{"aps":{"content-available":1,"badge":0}}"#, field: "aps.badge", rule: .backgroundUserVisible),
        Case(name: "live activity without timestamp", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"event":"update","content-state":{}}}"#, field: "aps.timestamp", rule: .liveActivityTimestamp),
        Case(name: "live activity without event", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"content-state":{}}}"#, field: "aps.event", rule: .liveActivityEvent),
        Case(name: "live activity unknown event", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"pause"}}"#, field: "aps.event", rule: .liveActivityEvent),
        Case(name: "live activity update without content-state", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"update"}}"#, field: "aps.content-state", rule: .liveActivityContentState),
        Case(name: "live activity content-state not object", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"update","content-state":[1]}}"#, field: "aps.content-state", rule: .wrongType),
        Case(name: "live activity start without attributes", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes-type":"A"}}"#, field: "aps.attributes", rule: .liveActivityAttributes),
        Case(name: "live activity start without attributes-type", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes":{}}}"#, field: "aps.attributes-type", rule: .liveActivityAttributes),
        Case(name: "live activity timestamp a string", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":"now","event":"end"}}"#, field: "aps.timestamp", rule: .wrongType),
        Case(name: "stale-date negative", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"end","stale-date":-1}}"#, field: "aps.stale-date", rule: .outOfRange),
        Case(name: "live activity without aps", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: "{}", field: "aps", rule: .liveActivityTimestamp),
        Case(name: "live activity input-push-channel a number", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes-type":"A","attributes":{},"input-push-channel":1}}"#,
             field: "aps.input-push-channel", rule: .wrongType),
        Case(name: "live activity localized title without loc-key", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"update","content-state":{},"alert":{"title":{"loc-args":["x"]}}}}"#,
             field: "aps.alert.title.loc-key", rule: .missingKey),
        Case(name: "live activity localized body with numeric loc-args", pushType: .liveactivity, topic: "com.example.app.push-type.liveactivity",
             payload: #"{"aps":{"timestamp":1,"event":"update","content-state":{},"alert":{"body":{"loc-key":"K","loc-args":[1]}}}}"#,
             field: "aps.alert.body.loc-args[0]", rule: .wrongType),
        Case(name: "alert push title an object", payload: #"{"aps":{"alert":{"title":{"loc-key":"K"}}}}"#,
             field: "aps.alert.title", rule: .wrongType),
        Case(name: "mdm without push magic", pushType: .mdm, topic: "com.apple.mgmt.External.abc", payload: "{}", field: "mdm", rule: .mdmPushMagic),
    ]

    @Test(arguments: NotificationValidatorTests.cases)
    func eachRuleNamesItsFieldAndRule(c: Case) {
        let n = APNsNotification(token: TestSupport.token(), topic: c.topic, pushType: c.pushType, priority: c.priority,
                                 expiration: c.expiration, collapseID: c.collapseID, payload: Array(c.payload.utf8))
        let issues = NotificationValidator.issues(in: n)
        #expect(issues.contains { $0.field == c.field && $0.rule == c.rule }, "\(c.name): got \(issues)")
        #expect(issues.allSatisfy { !$0.message.isEmpty })
        #expect(throws: NotificationValidationError.self) { try NotificationValidator.validate(n) }
    }

    /// A well-formed example of every push type passes.
    static let valid: [(PushType, String, Priority?, String)] = [
        (.alert, "com.example.app", .immediate, #"{"aps":{"alert":{"title":"Hi","body":"There"},"sound":"default","badge":2}}"#),
        (.background, "com.example.app", .conservePower, #"{"aps":{"content-available":1},"sync":"inbox"}"#),
        (.voip, "com.example.app.voip", .immediate, #"{"caller":"Bob","x":""# + String(repeating: "a", count: 5000) + #""}"#),
        (.complication, "com.example.app.complication", .immediate, #"{"aps":{},"score":"2-1"}"#),
        (.fileprovider, "com.example.app.pushkit.fileprovider", .conservePower, #"{"container-identifier":"NSFileProviderRootContainerItemIdentifier"}"#),
        (.mdm, "com.apple.mgmt.External.6a3e", .immediate, #"{"mdm":"PushMagic-7b1d"}"#),
        (.location, "com.example.app.location-query", .immediate, "{}"),
        (.liveactivity, "com.example.app.push-type.liveactivity", .immediate, #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"eta":5},"relevance-score":100,"stale-date":1700000600}}"#),
        (.liveactivity, "com.example.app.push-type.liveactivity", .immediate, #"{"aps":{"timestamp":1700000000,"event":"end","dismissal-date":1700003600}}"#),
        (.liveactivity, "com.example.app.push-type.liveactivity", .immediate, #"{"aps":{"timestamp":1700000000,"event":"start","content-state":{},"attributes-type":"A","attributes":{"id":1},"alert":{"title":"t","body":"b"}}}"#),
        // ActivityKit's localized alert and a broadcast channel to start on (Apple's example payloads).
        (.liveactivity, "com.example.app.push-type.liveactivity", .immediate, #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"eta":5},"alert":{"title":{"loc-key":"%@ is on an adventure!","loc-args":["Power Panda"]},"body":{"loc-key":"%@ found a sword!","loc-args":["Power Panda"]},"sound":"chime.aiff"}}}"#),
        (.liveactivity, "com.example.app.push-type.liveactivity", .immediate, #"{"aps":{"timestamp":1700000000,"event":"start","content-state":{},"attributes-type":"A","attributes":{"id":1},"input-push-channel":"dHJ5IHRoaXM=","alert":{"title":"t","body":"b"}}}"#),
        (.pushtotalk, "com.example.app.voip-ptt", .immediate, #"{"activeSpeaker":"Anne"}"#),
        (.widgets, "com.example.app.push-type.widgets", .immediate, #"{"aps":{"content-changed":true}}"#),
        (.controls, "com.example.app.push-type.controls", .immediate, #"{"aps":{"content-changed":true}}"#),
    ]

    @Test(arguments: 0..<NotificationValidatorTests.valid.count)
    func everyPushTypeHasAValidExample(row: Int) throws {
        let (type, topic, priority, payload) = Self.valid[row]
        let n = APNsNotification(token: TestSupport.token(), topic: topic, pushType: type, priority: priority,
                                 expiration: 0, collapseID: String(repeating: "c", count: 64), payload: Array(payload.utf8))
        #expect(NotificationValidator.issues(in: n) == [])
        try NotificationValidator.validate(n)
    }

    /// What passes here must pass the server-side check too: the two validators agree.
    @Test(arguments: 0..<NotificationValidatorTests.valid.count)
    func validExamplesAreAcceptedServerSide(row: Int) {
        let (type, topic, priority, payload) = Self.valid[row]
        let n = APNsNotification(token: TestSupport.token(), topic: topic, pushType: type, priority: priority,
                                 expiration: 0, collapseID: String(repeating: "c", count: 64), apnsID: .init(), payload: Array(payload.utf8))
        let verdict = APNsRequestValidator().validate(method: "POST", path: n.path, headers: n.headerFields(authorization: "bearer t"), body: n.payload)
        guard case .accepted(let request) = verdict else { Issue.record("\(type): \(verdict)"); return }
        #expect(request.pushType == type)
        #expect(request.apnsID == n.apnsIDString)
    }

    @Test func pushTypeTableCoversAllTypes() {
        #expect(Set(Self.valid.map(\.0)) == Set(PushType.allCases))
    }

    @Test(arguments: PushType.allCases)
    func certificateConnectionsCannotSendLocationOrLiveActivityPushes(type: PushType) {
        let n = APNsNotification(token: TestSupport.token(), topic: type.topic(forBundleID: "com.example.app") ?? "com.apple.mgmt.x",
                                 pushType: type, priority: .conservePower, payload: Array("{}".utf8))
        let refused = NotificationValidator.issues(in: n, authentication: .certificate).contains { $0.rule == .tokenAuthenticationRequired }
        #expect(refused == (type == .location || type == .liveactivity))
        #expect(!NotificationValidator.issues(in: n, authentication: .token).contains { $0.rule == .tokenAuthenticationRequired })
    }

    @Test func allIssuesAreReportedTogether() {
        let n = APNsNotification(token: TestSupport.token(), topic: "", pushType: .background, priority: .immediate,
                                 payload: Array(#"{"aps":{"alert":"x","badge":-1}}"#.utf8))
        let rules = Set(NotificationValidator.issues(in: n).map(\.rule))
        #expect(rules.isSuperset(of: [.topicMissing, .backgroundPriority, .backgroundContentAvailable, .backgroundUserVisible, .outOfRange]))
    }

    @Test func errorDescriptionNamesFieldRuleAndValue() {
        let n = APNsNotification(token: TestSupport.token(), topic: "com.example.app", payload: Array(#"{"aps":{"sound":{"critical":1,"name":"a","volume":3}}}"#.utf8))
        do {
            try NotificationValidator.validate(n)
            Issue.record("accepted")
        } catch {
            #expect(error.description.contains("aps.sound.volume"))
            #expect(error.description.contains("critical-sound-volume"))
            #expect(error.description.contains("3"))
        }
    }

    @Test func jsonErrorsCarryTheOffset() {
        let n = APNsNotification(token: TestSupport.token(), topic: "com.example.app", payload: Array(#"{"aps":{"alert":"x",}}"#.utf8))
        let issue = NotificationValidator.issues(in: n).first
        #expect(issue?.rule == .payloadNotJSONObject)
        #expect(issue?.message.contains("byte 20") == true)
    }
}
