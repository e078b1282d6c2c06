import APNs
import Posix
import Testing

/// Apple's per push type rules that pushd checks before sending and apns-mock answers the
/// way APNs does: PushToTalk (the PushToTalk framework's "Receive audio": priority 10,
/// expiration 0), Live Activities (ActivityKit: priority 5 or 10; a broadcast cannot start
/// one), and the broadcast request ("Sending broadcast push notification requests to APNs":
/// apns-expiration and apns-priority required, payload up to 5120 bytes).
@Suite struct PushTypeRulesTests {
    static let pttTopic = "com.example.app.voip-ptt"
    static let liveTopic = "com.example.app.push-type.liveactivity"
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#

    static func rules(_ type: PushType, _ topic: String, priority: Priority?, expiration: Int64?, payload: String = "{}") -> [String] {
        let n = APNsNotification(token: TestSupport.token(), topic: topic, pushType: type, priority: priority,
                                 expiration: expiration, payload: Array(payload.utf8))
        return NotificationValidator.issues(in: n).map { "\($0.field) \($0.rule)" }
    }

    @Test func pushToTalkPushesNeedPriority10AndExpiration0() {
        #expect(Self.rules(.pushtotalk, Self.pttTopic, priority: .conservePower, expiration: 0) == ["apns-priority pushtotalk-priority"])
        #expect(Self.rules(.pushtotalk, Self.pttTopic, priority: .immediate, expiration: 1_800_000_000) == ["apns-expiration pushtotalk-expiration"])
        #expect(Self.rules(.pushtotalk, Self.pttTopic, priority: nil, expiration: nil) == ["apns-expiration pushtotalk-expiration"])
        #expect(Self.rules(.pushtotalk, Self.pttTopic, priority: nil, expiration: 0) == [])
    }

    @Test func liveActivityPushesTakePriority10Or5Only() {
        #expect(Self.rules(.liveactivity, Self.liveTopic, priority: .prioritizePower, expiration: nil, payload: Self.update)
            == ["apns-priority liveactivity-priority"])
        #expect(Self.rules(.liveactivity, Self.liveTopic, priority: .conservePower, expiration: nil, payload: Self.update) == [])
    }

    /// ActivityKit, "Construct the payload that starts a Live Activity": set event to start,
    /// "Include an alert in the JSON payload", include attributes-type and attributes.
    @Test func aLiveActivityStartNeedsAnAlert() {
        let silent = #"{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes-type":"A","attributes":{}}}"#
        #expect(Self.rules(.liveactivity, Self.liveTopic, priority: nil, expiration: nil, payload: silent)
            == ["aps.alert liveactivity-start-alert"])
        let alerting = #"{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes-type":"A","attributes":{},"alert":{"title":"t","body":"b"}}}"#
        #expect(Self.rules(.liveactivity, Self.liveTopic, priority: nil, expiration: nil, payload: alerting) == [])
    }

    static func serverVerdict(_ headers: [(String, String)]) -> APNsRequestVerdict {
        APNsRequestValidator().validate(method: "POST", path: "/3/device/" + TestSupport.token64,
                                        headers: headers.map { HeaderField(name: $0.0, value: $0.1) }, body: Array(update.utf8))
    }

    @Test func theMockAnswersPushToTalkAndLiveActivityRulesAsApnsDoes() {
        let ptt = [("apns-topic", Self.pttTopic), ("apns-push-type", "pushtotalk")]
        #expect(Self.serverVerdict(ptt + [("apns-priority", "5"), ("apns-expiration", "0")]) == .rejected(status: 400, reason: .badPriority))
        #expect(Self.serverVerdict(ptt) == .rejected(status: 400, reason: .badExpirationDate))
        #expect(Self.serverVerdict(ptt + [("apns-expiration", "1800000000")]) == .rejected(status: 400, reason: .badExpirationDate))
        guard case .accepted = Self.serverVerdict(ptt + [("apns-expiration", "0")]) else { Issue.record("ptt refused"); return }
        let live = [("apns-topic", Self.liveTopic), ("apns-push-type", "liveactivity")]
        #expect(Self.serverVerdict(live + [("apns-priority", "1")]) == .rejected(status: 400, reason: .badPriority))
        guard case .accepted = Self.serverVerdict(live + [("apns-priority", "5")]) else { Issue.record("priority 5 refused"); return }
    }

    static let channel = try! ChannelID("dHN0LTEyMzQ1Njc4OTA=")

    @Test func aBroadcastAlwaysCarriesTheExpirationAndPriorityAppleRequires() {
        let id = APNsID()
        let broadcast = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel, apnsID: id, payload: Array(Self.update.utf8))
        #expect(broadcast.headerFields(authorization: "bearer x").map(\.line) == [
            "authorization: bearer x", "apns-request-id: \(id.lowercasedString)", "apns-push-type: liveactivity",
            "apns-channel-id: \(Self.channel.value)", "apns-expiration: 0", "apns-priority: 10",
        ])
    }

    @Test func aBroadcastCannotStartALiveActivityAndTakesPriority10Or5() {
        let start = #"{"aps":{"timestamp":1,"event":"start","content-state":{},"attributes-type":"A","attributes":{},"alert":"go"}}"#
        let starting = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel, payload: Array(start.utf8))
        #expect(starting.issues(authentication: .token).map { "\($0.field) \($0.rule)" } == ["aps.event broadcast-start"])
        let lowest = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel, priority: .prioritizePower,
                                           payload: Array(Self.update.utf8))
        #expect(lowest.issues(authentication: .token).map { "\($0.field) \($0.rule)" } == ["apns-priority liveactivity-priority"])
    }

    /// Apple: a broadcast payload "is limited to a maximum size of 5 KB (5,120 bytes)".
    @Test func broadcastPayloadsMayHave5120Bytes() {
        func payload(_ size: Int) -> [UInt8] {
            let head = #"{"aps":{"timestamp":1,"event":"end"},"x":""#
            return Array((head + String(repeating: "a", count: size - head.utf8.count - 2) + #""}"#).utf8)
        }
        let fits = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel, payload: payload(5120))
        #expect(fits.issues(authentication: .token).isEmpty)
        let over = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel, payload: payload(5121))
        #expect(over.issues(authentication: .token).map(\.rule) == [.payloadTooLarge])

        let judge = BroadcastRequestJudge()
        let headers = fits.headerFields(authorization: "bearer x")
        guard case .accepted = judge.judgeBroadcast(method: "POST", path: fits.path, headers: headers, body: payload(5120)) else {
            Issue.record("5120 bytes refused"); return
        }
        #expect(judge.judgeBroadcast(method: "POST", path: fits.path, headers: headers, body: payload(5121))
            == .rejected(status: 413, reason: .payloadTooLarge))
    }

    @Test func theMockRefusesABroadcastWithoutExpirationOrPriorityOrWithPriority1() {
        let judge = BroadcastRequestJudge()
        let path = "/4/broadcasts/apps/com.example.scores"
        func verdict(_ headers: [(String, String)]) -> BroadcastRequestJudge.Verdict<BroadcastRequestJudge.AcceptedBroadcast> {
            judge.judgeBroadcast(method: "POST", path: path, headers: headers.map { HeaderField(name: $0.0, value: $0.1) },
                                 body: Array(Self.update.utf8))
        }
        let base = [("apns-push-type", "liveactivity"), ("apns-channel-id", Self.channel.value)]
        #expect(verdict(base + [("apns-expiration", "0")]) == .rejected(status: 400, reason: .badPriority))
        #expect(verdict(base + [("apns-priority", "10")]) == .rejected(status: 400, reason: .badExpirationDate))
        #expect(verdict(base + [("apns-priority", "1"), ("apns-expiration", "0")]) == .rejected(status: 400, reason: .badPriority))
        guard case .accepted = verdict(base + [("apns-priority", "5"), ("apns-expiration", "0")]) else { Issue.record("refused"); return }
    }
}

/// Reasons of Apple's broadcast and channel error table ("Handling error responses from Apple
/// Push Notification service") that say the request body is wrong: no retry can help.
@Suite struct BroadcastBodyReasonTests {
    @Test func unparseableOrUnrecognizedBodiesAreDeadLettered() {
        for reason in ["BadRequestPayload", "BadRequestParams"] {
            let action = ResponseClassifier.classify(status: 400, reason: APNsReason(reason), timestamp: nil)
            guard case .deadLetter = action else { Issue.record("\(reason): \(action)"); continue }
            #expect(APNsReason(reason).status == 400)
        }
    }

    @Test func theMockAnswersUnreadableBodiesAsTheTableSays() {
        let judge = BroadcastRequestJudge()
        #expect(judge.judgeChannelRequest(method: "POST", path: "/1/apps/com.example.scores/channels", headers: [], body: Array("{".utf8))
            == .rejected(status: 400, reason: APNsReason("BadRequestPayload")))
        #expect(judge.judgeChannelRequest(method: "POST", path: "/1/apps/com.example.scores/channels", headers: [],
                                          body: Array(#"{"message-storage-policy":7,"push-type":"LiveActivity"}"#.utf8))
            == .rejected(status: 400, reason: APNsReason("BadRequestParams")))
        let headers = [("apns-push-type", "liveactivity"), ("apns-channel-id", PushTypeRulesTests.channel.value),
                       ("apns-priority", "10"), ("apns-expiration", "0")].map { HeaderField(name: $0.0, value: $0.1) }
        #expect(judge.judgeBroadcast(method: "POST", path: "/4/broadcasts/apps/com.example.scores", headers: headers, body: Array("[1]".utf8))
            == .rejected(status: 400, reason: APNsReason("BadRequestPayload")))
    }
}
