import APNs
import Posix
import Foundation
import Testing

@Suite struct BroadcastTests {
    static let channel = try! ChannelID("dHN0LTEyMzQ1Njc4OTA=")
    static let update = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#.utf8)

    @Test func channelIDsAreStandardBase64() throws {
        #expect(try ChannelID("c29tZUNoYW5uZWw=").value == "c29tZUNoYW5uZWw=")
        #expect(throws: ChannelIDError.empty) { try ChannelID("") }
        #expect(throws: ChannelIDError.badLength(5)) { try ChannelID("abcde") }
        #expect(throws: ChannelIDError.badCharacter(offset: 3)) { try ChannelID("abc_") }
        #expect(throws: ChannelIDError.paddingInside(offset: 2)) { try ChannelID("ab=d") }
        #expect(throws: ChannelIDError.tooLong(132)) { try ChannelID(String(repeating: "abcd", count: 33)) }
    }

    @Test func storagePolicyNamesAndNumbers() {
        #expect(MessageStoragePolicy(name: "none") == .noMessageStored)
        #expect(MessageStoragePolicy(name: "most-recent") == .mostRecentMessageStored)
        #expect(MessageStoragePolicy(name: "1") == .mostRecentMessageStored)
        #expect(MessageStoragePolicy(name: "forever") == nil)
    }

    @Test func managementHostAndPortPerEnvironment() {
        #expect(APNsEnvironment.production.channelManagementHost == "api-manage-broadcast.push.apple.com")
        #expect(APNsEnvironment.production.channelManagementPort == 2196)
        #expect(APNsEnvironment.sandbox.channelManagementHost == "api-manage-broadcast.sandbox.push.apple.com")
        #expect(APNsEnvironment.sandbox.channelManagementPort == 2195)
    }

    @Test func channelRequestsHaveApplesMethodsPathsAndBodies() {
        let create = ChannelRequest(bundleID: "com.example.scores", operation: .create(.mostRecentMessageStored))
        #expect(create.method == "POST")
        #expect(create.path == "/1/apps/com.example.scores/channels")
        #expect(String(decoding: create.body, as: UTF8.self) == #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#)
        #expect(create.headerFields(authorization: "bearer x").map(\.name) == ["authorization"])

        let requestID = APNsID()
        let delete = ChannelRequest(bundleID: "com.example.scores", operation: .delete(Self.channel), requestID: requestID)
        #expect(delete.method == "DELETE")
        #expect(delete.body.isEmpty)
        #expect(delete.headerFields(authorization: "bearer x").map(\.line) == [
            "authorization: bearer x", "apns-request-id: \(requestID.lowercasedString)", "apns-channel-id: \(Self.channel.value)",
        ])
        let list = ChannelRequest(bundleID: "com.example.scores", operation: .listAll)
        #expect(list.method == "GET")
        #expect(list.path == "/1/apps/com.example.scores/all-channels")
        #expect(ChannelRequest(bundleID: "a.b", operation: .read(Self.channel)).method == "GET")
    }

    /// Apple's channel management page: APNs "ignores this header if you use certificate-based
    /// authentication", so a request on a certificate connection carries none.
    @Test func channelRequestsTakeEitherAuthenticationButRefuseTopics() {
        let request = ChannelRequest(bundleID: "com.example.scores.push-type.liveactivity", operation: .listAll)
        #expect(request.issues(authentication: .certificate).map(\.rule) == [.topicSuffix])
        #expect(ChannelRequest(bundleID: "com.example.scores", operation: .listAll).issues(authentication: .token).isEmpty)
        #expect(ChannelRequest(bundleID: "com.example.scores", operation: .listAll).issues(authentication: .certificate).isEmpty)
        let read = ChannelRequest(bundleID: "com.example.scores", operation: .read(Self.channel))
        #expect(read.headerFields(authorization: nil).map(\.line) == ["apns-channel-id: \(Self.channel.value)"])
    }

    @Test func broadcastHeadersCarryChannelAndLiveActivityType() {
        let id = APNsID()
        let broadcast = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel, priority: .conservePower,
                                              expiration: 1_800_000_000, apnsID: id, payload: Self.update)
        #expect(broadcast.path == "/4/broadcasts/apps/com.example.scores")
        #expect(broadcast.headerFields(authorization: "bearer x").map(\.line) == [
            "authorization: bearer x", "apns-request-id: \(id.lowercasedString)", "apns-push-type: liveactivity",
            "apns-channel-id: \(Self.channel.value)", "apns-expiration: 1800000000", "apns-priority: 5",
        ])
        #expect(broadcast.issues(authentication: .token).isEmpty)
    }

    /// Apple's broadcast page: "APNs validates the request using either the provided
    /// authentication token or your server's certificate".
    @Test func broadcastsAreHeldToLiveActivityPayloadRulesWithEitherAuthentication() {
        let alert = Array(#"{"aps":{"alert":"hi"}}"#.utf8)
        let broadcast = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel, payload: alert)
        let rules = Set(broadcast.issues(authentication: .certificate).map(\.rule))
        #expect(!rules.contains(.tokenAuthenticationRequired))
        #expect(rules.contains(.liveActivityTimestamp))
        #expect(rules.contains(.liveActivityEvent))
        let big = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel,
                                        payload: Array(("{\"aps\":{},\"x\":\"" + String(repeating: "a", count: 5200) + "\"}").utf8))
        #expect(big.issues(authentication: .token).map(\.rule).contains(.payloadTooLarge))
        let update = BroadcastNotification(bundleID: "com.example.scores", channelID: Self.channel, payload: Self.update)
        #expect(update.issues(authentication: .certificate).isEmpty)
        // A certificate connection's request carries no authorization header.
        #expect(update.headerFields(authorization: nil).map(\.name) == ["apns-push-type", "apns-channel-id", "apns-expiration", "apns-priority"])
    }

    @Test func listAndReadAnswersAreParsed() {
        #expect(ChannelAnswer.channels(fromListBody: ChannelAnswer.listBody(["a", "b"])) == ["a", "b"])
        #expect(ChannelAnswer.channels(fromListBody: Array(#"{"channels":[1]}"#.utf8)) == nil)
        #expect(ChannelAnswer.storagePolicy(fromReadBody: ChannelAnswer.readBody(.noMessageStored)) == .noMessageStored)
    }

    @Test func managementSuccessesAreDeliveries() {
        #expect(ResponseClassifier.classify(status: 201, reason: nil, timestamp: nil) == .delivered)
        #expect(ResponseClassifier.classify(status: 204, reason: nil, timestamp: nil) == .delivered)
        #expect(APNsResponse(status: 204).isSuccess)
    }

    @Test func judgeRefusesBroadcastsAsApnsDoes() {
        let judge = BroadcastRequestJudge(allowedBundleIDs: ["com.example.scores"])
        let path = "/4/broadcasts/apps/com.example.scores"
        func verdict(_ headers: [(String, String)], path: String = path, body: [UInt8] = Self.update) -> APNsReason? {
            let fields = headers.map { HeaderField(name: $0.0, value: $0.1) }
            if case .rejected(_, let reason) = judge.judgeBroadcast(method: "POST", path: path, headers: fields, body: body) { return reason }
            return nil
        }
        let good = [("apns-push-type", "liveactivity"), ("apns-channel-id", Self.channel.value), ("apns-priority", "10"), ("apns-expiration", "0")]
        #expect(verdict(good) == nil)
        #expect(verdict([("apns-channel-id", Self.channel.value)]) == .missingPushType)
        #expect(verdict([("apns-push-type", "alert"), ("apns-channel-id", Self.channel.value)]) == .invalidPushType)
        #expect(verdict([("apns-push-type", "liveactivity")]) == .missingChannelId)
        #expect(verdict([("apns-push-type", "liveactivity"), ("apns-channel-id", "not base64!")]) == .badChannelId)
        #expect(verdict(good, path: "/4/broadcasts/apps/com.other") == .topicDisallowed)
        #expect(verdict(good + [("apns-priority", "7")]) == .duplicateHeaders)
        #expect(verdict([("apns-push-type", "liveactivity"), ("apns-channel-id", Self.channel.value), ("apns-priority", "7"), ("apns-expiration", "0")]) == .badPriority)
        #expect(verdict(good, body: []) == .payloadEmpty)
    }

    @Test func judgeReadsChannelManagementRequests() {
        let judge = BroadcastRequestJudge()
        let create = judge.judgeChannelRequest(method: "POST", path: "/1/apps/com.example.scores/channels", headers: [],
                                               body: ChannelRequest(bundleID: "x", operation: .create(.noMessageStored)).body)
        guard case .accepted(let accepted) = create else { Issue.record("create refused: \(create)"); return }
        #expect(accepted.operation == .create(.noMessageStored))
        #expect(judge.judgeChannelRequest(method: "DELETE", path: "/1/apps/com.example.scores/channels", headers: [], body: [])
            == .rejected(status: 400, reason: .missingChannelId))
        #expect(judge.judgeChannelRequest(method: "PUT", path: "/1/apps/com.example.scores/channels", headers: [], body: [])
            == .rejected(status: 405, reason: .methodNotAllowed))
        #expect(judge.judgeChannelRequest(method: "GET", path: "/1/apps/com.example.scores/nothing", headers: [], body: [])
            == .rejected(status: 404, reason: .badPath))
        let wrongType = Array(#"{"message-storage-policy":0,"push-type":"Alert"}"#.utf8)
        #expect(judge.judgeChannelRequest(method: "POST", path: "/1/apps/a.b/channels", headers: [], body: wrongType)
            == .rejected(status: 400, reason: .invalidPushType))
        // Apple: BadRequestParams, "the JSON Request payload contained an unrecognizable attribute".
        let extra = Array(#"{"message-storage-policy":0,"push-type":"LiveActivity","name":"scores"}"#.utf8)
        #expect(judge.judgeChannelRequest(method: "POST", path: "/1/apps/a.b/channels", headers: [], body: extra)
            == .rejected(status: 400, reason: .badRequestParams))
    }
}
