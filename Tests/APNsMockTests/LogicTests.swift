import APNs
import Posix
@testable import APNsMock
import Foundation
import Testing

@Suite("apns-mock decisions as plain values")
struct LogicTests {
    static let now: Int64 = 1_800_000_000

    private func request(token: String = deviceToken(1), headers: [HeaderField] = [], streamID: Int32 = 1) -> IncomingRequest {
        var request = IncomingRequest(streamID: streamID)
        request.method = "POST"
        request.path = "/3/device/" + token
        request.headers = [HeaderField(name: "apns-topic", value: "com.example.app")] + headers
        request.body = examplePayload
        return request
    }

    private func settings(verifier: ProviderTokenVerifier? = nil, startAtOne: Bool = false) -> LogicSettings {
        LogicSettings(maxConcurrentStreams: 500, validator: APNsRequestValidator(), tokenVerifier: verifier,
                      startAtOneStream: startAtOne, logsAccepted: true)
    }

    private func answer(_ verdict: Verdict) -> Answer? {
        if case .answer(let answer) = verdict { return answer }
        return nil
    }

    private func verifier(_ key: TestProviderKey) throws -> ProviderTokenVerifier {
        ProviderTokenVerifier(keys: [key.keyID: .init(teamID: key.teamID, publicKey: try ES256PublicKey(pem: key.publicKeyPEM))])
    }

    private func bearer(_ key: TestProviderKey, issuedAt: Int64) throws -> String {
        try key.signer.makeToken(issuedAt: issuedAt).authorizationValue
    }

    @Test func verifiesEachDistinctTokenOncePerConnection() throws {
        let key = try TestProviderKey()
        let verifier = try verifier(key)
        var state = ProviderTokenState()
        let token = try bearer(key, issuedAt: Self.now - 5)
        for offset in 0..<100 {
            #expect(state.authorize(token, now: Self.now + Int64(offset), verifier: verifier) == .accepted(first: offset == 0))
        }
        #expect(state.signatureChecks == 1)
        let forged = try bearer(TestProviderKey(keyID: key.keyID, teamID: key.teamID), issuedAt: Self.now)
        for _ in 0..<10 {
            #expect(state.authorize(forged, now: Self.now, verifier: verifier) == .rejected(status: 403, reason: .invalidProviderToken))
        }
        #expect(state.signatureChecks == 2)
    }

    @Test func aTokenInUseExpiresAfterAnHour() throws {
        let key = try TestProviderKey()
        let verifier = try verifier(key)
        var state = ProviderTokenState()
        let token = try bearer(key, issuedAt: Self.now)
        #expect(state.authorize(token, now: Self.now, verifier: verifier) == .accepted(first: true))
        #expect(state.authorize(token, now: Self.now + 3600, verifier: verifier) == .accepted(first: false))
        #expect(state.authorize(token, now: Self.now + 3601, verifier: verifier) == .rejected(status: 403, reason: .expiredProviderToken))
    }

    @Test func tokenUpdatesAreLimitedToOneEveryTwentyMinutes() throws {
        let key = try TestProviderKey()
        let verifier = try verifier(key)
        var state = ProviderTokenState()
        let first = try bearer(key, issuedAt: Self.now)
        let second = try bearer(key, issuedAt: Self.now + 60)
        let third = try bearer(key, issuedAt: Self.now + 1300)
        #expect(state.authorize(first, now: Self.now, verifier: verifier) == .accepted(first: true))
        #expect(state.authorize(second, now: Self.now + 60, verifier: verifier) == .rejected(status: 429, reason: .tooManyProviderTokenUpdates))
        #expect(state.authorize(first, now: Self.now + 61, verifier: verifier) == .accepted(first: false), "the old token still works")
        #expect(state.authorize(third, now: Self.now + 1300, verifier: verifier) == .accepted(first: false))
    }

    /// Apple: "The key ID in the provider token isn't related to the key ID of the token used in
    /// the first push of this connection. To use this token, open a new connection."
    @Test func aTokenOfAnotherKeyThanTheFirstPushsIsUnrelatedOnTheConnection() throws {
        let first = try TestProviderKey(keyID: "KEY1234567")
        let other = try TestProviderKey(keyID: "OTHERKEY12")
        let verifier = ProviderTokenVerifier(keys: [
            first.keyID: .init(teamID: first.teamID, publicKey: try ES256PublicKey(pem: first.publicKeyPEM)),
            other.keyID: .init(teamID: other.teamID, publicKey: try ES256PublicKey(pem: other.publicKeyPEM))])
        var state = ProviderTokenState(updateWindowSeconds: 0)
        #expect(state.authorize(try bearer(first, issuedAt: Self.now), now: Self.now, verifier: verifier) == .accepted(first: true))
        let unrelated = try bearer(other, issuedAt: Self.now + 1)
        #expect(state.authorize(unrelated, now: Self.now + 1, verifier: verifier) == .rejected(status: 403, reason: .unrelatedKeyIdInToken))
        // A new token of the first key is still taken; on a new connection the other key is too.
        #expect(state.authorize(try bearer(first, issuedAt: Self.now + 2), now: Self.now + 2, verifier: verifier) == .accepted(first: false))
        var fresh = ProviderTokenState(updateWindowSeconds: 0)
        #expect(fresh.authorize(unrelated, now: Self.now + 3, verifier: verifier) == .accepted(first: true))
    }

    @Test func aForbiddenReasonLimitedToTheFirstConnectionsLeavesLaterOnesAlone() throws {
        let faults = try FaultConfiguration(forbiddenReason: "UnrelatedKeyIdInToken", forbiddenConnections: 1).validated()
        var firstConnection = ConnectionLogic(connectionID: 1, settings: settings(verifier: nil, startAtOne: false), seed: 1)
        #expect(answer(firstConnection.handle(request(), faults: faults, now: Self.now))?.reason == "UnrelatedKeyIdInToken")
        var secondConnection = ConnectionLogic(connectionID: 2, settings: settings(verifier: nil, startAtOne: false), seed: 1)
        #expect(answer(secondConnection.handle(request(), faults: faults, now: Self.now))?.status == 200)
        #expect(throws: MockServerError.self) { try FaultConfiguration(forbiddenConnections: 0).validated() }
    }

    @Test func replacingAnExpiredTokenIsNeverTooManyUpdates() throws {
        let key = try TestProviderKey()
        let verifier = try verifier(key)
        var state = ProviderTokenState()
        let old = try bearer(key, issuedAt: Self.now - 3500)
        #expect(state.authorize(old, now: Self.now, verifier: verifier) == .accepted(first: true))
        let fresh = try bearer(key, issuedAt: Self.now + 200)
        #expect(state.authorize(fresh, now: Self.now + 200, verifier: verifier) == .accepted(first: false))
    }

    @Test func missingAndMalformedAuthorization() throws {
        let verifier = try verifier(TestProviderKey())
        var state = ProviderTokenState()
        #expect(state.authorize(nil, now: Self.now, verifier: verifier) == .rejected(status: 403, reason: .missingProviderToken))
        #expect(state.authorize("", now: Self.now, verifier: verifier) == .rejected(status: 403, reason: .missingProviderToken))
        #expect(state.authorize("bearer x.y.z", now: Self.now, verifier: verifier) == .rejected(status: 403, reason: .invalidProviderToken))
    }

    @Test func startsAtOneStreamUntilAValidTokenThenRaisesOnce() throws {
        let key = try TestProviderKey()
        var logic = ConnectionLogic(connectionID: 1, settings: settings(verifier: try verifier(key), startAtOne: true), seed: 1)
        #expect(logic.initialMaxConcurrentStreams == 1)
        let rejected = answer(logic.handle(request(), faults: .none, now: Self.now))
        #expect(rejected?.reason == "MissingProviderToken")
        #expect(rejected?.newMaxConcurrentStreams == nil)
        let auth = HeaderField(name: "authorization", value: try bearer(key, issuedAt: Self.now))
        let first = answer(logic.handle(request(headers: [auth]), faults: .none, now: Self.now))
        #expect(first?.status == 200)
        #expect(first?.newMaxConcurrentStreams == 500)
        let second = answer(logic.handle(request(headers: [auth]), faults: .none, now: Self.now))
        #expect(second?.newMaxConcurrentStreams == nil)
    }

    @Test func lowersConcurrencyAfterAnErrorOnlyWhenAsked() {
        var faults = FaultConfiguration(badDeviceTokens: [deviceToken(9)])
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 1)
        #expect(answer(logic.handle(request(token: deviceToken(9)), faults: faults, now: Self.now))?.newMaxConcurrentStreams == nil)
        faults.lowerConcurrencyAfterError = true
        #expect(answer(logic.handle(request(token: deviceToken(9)), faults: faults, now: Self.now))?.newMaxConcurrentStreams == 1)
        #expect(answer(logic.handle(request(token: deviceToken(9)), faults: faults, now: Self.now))?.newMaxConcurrentStreams == nil)
        #expect(answer(logic.handle(request(), faults: faults, now: Self.now))?.newMaxConcurrentStreams == 500)
    }

    @Test func resetAfterStreamsCountsCompletedStreams() {
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 1)
        let faults = FaultConfiguration(resetAfterStreams: 3)
        #expect(answer(logic.handle(request(), faults: faults, now: Self.now)) != nil)
        #expect(answer(logic.handle(request(), faults: faults, now: Self.now)) != nil)
        #expect(logic.handle(request(), faults: faults, now: Self.now) == .resetConnection)
    }

    @Test func refuseAfterStreamsAnswersTheFirstStreamsOfAConnectionAndRefusesEveryLaterOne() {
        let faults = FaultConfiguration(refuseAfterStreams: 2)
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 1)
        #expect(answer(logic.handle(request(), faults: faults, now: Self.now))?.status == 200)
        #expect(answer(logic.handle(request(), faults: faults, now: Self.now))?.status == 200)
        for _ in 0..<5 { #expect(logic.handle(request(), faults: faults, now: Self.now) == .resetStream(errorCode: 7)) }
        // Every connection answers its first two again.
        var next = ConnectionLogic(connectionID: 2, settings: settings(), seed: 1)
        #expect(answer(next.handle(request(), faults: faults, now: Self.now))?.status == 200)
    }

    @Test func streamResetRateResetsTheStreamWithItsCodeAndKeepsTheConnection() {
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 1)
        #expect(logic.handle(request(), faults: FaultConfiguration(streamResetRate: 1), now: Self.now) == .resetStream(errorCode: 2))
        let refused = FaultConfiguration(streamResetRate: 1, streamResetErrorCode: 7)
        #expect(logic.handle(request(), faults: refused, now: Self.now) == .resetStream(errorCode: 7))
        #expect(answer(logic.handle(request(), faults: .none, now: Self.now))?.status == 200)
    }

    @Test func errorRatesFollowTheSeededRollsAndSumToTheRequestCount() {
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 42)
        let faults = FaultConfiguration(tooManyRequestsRate: 0.2, internalServerErrorRate: 0.1, serviceUnavailableRate: 0.1)
        var statuses: [Int: Int] = [:]
        for _ in 0..<10_000 {
            statuses[answer(logic.handle(request(), faults: faults, now: Self.now))?.status ?? 0, default: 0] += 1
        }
        #expect(statuses.values.reduce(0, +) == 10_000)
        #expect((1800...2200).contains(statuses[429] ?? 0))
        #expect((800...1200).contains(statuses[500] ?? 0))
        #expect((800...1200).contains(statuses[503] ?? 0))
        #expect((5600...6400).contains(statuses[200] ?? 0))
    }

    @Test func delaysStayWithinTheFixedPlusRandomBound() {
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 7)
        let faults = FaultConfiguration(delayMilliseconds: 100, randomDelayMilliseconds: 50)
        let delays = (0..<500).compactMap { _ in answer(logic.handle(request(), faults: faults, now: Self.now))?.delayMilliseconds }
        #expect(delays.allSatisfy { (100...150).contains($0) })
        #expect(Set(delays).count > 10)
    }

    @Test func aDelayedTokenIsAnsweredLaterWhateverItIsAnswered() {
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 3)
        let faults = FaultConfiguration(serviceUnavailableRate: 1, delayMilliseconds: 20, delayedTokens: [deviceToken(2): 5000])
        let slow = answer(logic.handle(request(token: deviceToken(2)), faults: faults, now: Self.now))
        let quick = answer(logic.handle(request(token: deviceToken(1)), faults: faults, now: Self.now))
        #expect(slow?.status == 503 && slow?.delayMilliseconds == 5020)
        #expect(quick?.status == 503 && quick?.delayMilliseconds == 20)
    }

    @Test func perTokenFaultsComeAfterValidationAndBeforeRates() {
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 1)
        let faults = FaultConfiguration(unregisteredTokens: [deviceToken(3): 99], serviceUnavailableRate: 1)
        let gone = answer(logic.handle(request(token: deviceToken(3)), faults: faults, now: Self.now))
        #expect(gone?.status == 410)
        #expect(gone?.body == Array(#"{"reason":"Unregistered","timestamp":99}"#.utf8))
        var invalid = request(token: deviceToken(3))
        invalid.method = "GET"
        #expect(answer(logic.handle(invalid, faults: faults, now: Self.now))?.status == 405)
        #expect(answer(logic.handle(request(), faults: faults, now: Self.now))?.status == 503)
    }

    @Test func generatedApnsIDsAreLowercaseVersion4UUIDs() {
        var logic = ConnectionLogic(connectionID: 1, settings: settings(), seed: 3)
        let ids = (0..<200).compactMap { _ in answer(logic.handle(request(), faults: .none, now: Self.now))?.apnsID }
        #expect(Set(ids).count == 200)
        for id in ids {
            let uuid = APNsID(id)
            #expect(uuid != nil)
            #expect(id == id.lowercased())
            #expect(Array(id)[14] == "4")
            #expect("89ab".contains(Array(id)[19]))
        }
    }

    @Test func noLogEntryIsMadeWhenTheServerKeepsNoLog() {
        var quiet = settings()
        quiet.logsAccepted = false
        var logic = ConnectionLogic(connectionID: 7, settings: quiet, seed: 3)
        let accepted = answer(logic.handle(request(), faults: .none, now: Self.now))
        #expect(accepted?.status == 200)
        #expect(accepted?.logEntry == nil)
    }

    @Test func acceptedEntriesCarryConnectionStreamAndPayloadDigest() {
        var logic = ConnectionLogic(connectionID: 7, settings: settings(), seed: 3)
        let accepted = answer(logic.handle(request(streamID: 11), faults: .none, now: Self.now))?.logEntry
        #expect(accepted?.connectionID == 7)
        #expect(accepted?.streamID == 11)
        #expect(accepted?.payloadSHA256 == sha256Hex(examplePayload))
        #expect(accepted?.topic == "com.example.app")
    }

    /// A broadcast on a certificate connection: POST /4/broadcasts/apps/<bundle id>, no token.
    private func broadcast(bundleID: String, channel: String) -> IncomingRequest {
        var request = IncomingRequest(streamID: 1)
        request.method = "POST"
        request.path = "/4/broadcasts/apps/" + bundleID
        request.headers = [HeaderField(name: "apns-push-type", value: "liveactivity"), HeaderField(name: "apns-channel-id", value: channel),
                           HeaderField(name: "apns-priority", value: "10"), HeaderField(name: "apns-expiration", value: "0")]
        request.body = Array(#"{"aps":{"timestamp":1700000000,"event":"update","content-state":{}}}"#.utf8)
        return request
    }

    /// Apple: "APNs validates the request using either the provided authentication token or
    /// your server's certificate" ("Sending broadcast push notification requests to APNs").
    /// On a certificate connection a broadcast needs no token and its bundle id must be one
    /// the certificate covers (the `--topic` list), as a device push's topic must.
    @Test func aCertificateConnectionsBroadcastNeedsNoTokenButItsBundleIDMustBeCovered() throws {
        var settings = settings()
        settings.certificateMode = true
        settings.broadcastJudge = BroadcastRequestJudge(allowedBundleIDs: ["com.example.app"])
        guard case .created(let channel) = settings.channels.create(bundleID: "com.example.app", policy: .noMessageStored) else {
            Issue.record("the mock made no channel")
            return
        }
        var logic = ConnectionLogic(connectionID: 1, settings: settings, seed: 1)
        let accepted = answer(logic.handle(broadcast(bundleID: "com.example.app", channel: channel), faults: .none, now: Self.now))
        #expect(accepted?.status == 200, "\(String(describing: accepted))")
        var stats = MockStats()
        settings.channels.fill(&stats)
        #expect(stats.broadcastsAccepted == [channel: 1])
        let uncovered = answer(logic.handle(broadcast(bundleID: "com.example.other", channel: channel), faults: .none, now: Self.now))
        #expect(uncovered?.status == 400)
        #expect(uncovered?.reason == "TopicDisallowed")
    }

    /// A channel management request with no `authorization` header, as sent on a certificate
    /// connection: `method` on `/1/apps/<bundle id>/<resource>`.
    private func channelRequest(_ method: String, bundleID: String, resource: String = "channels", channel: String? = nil,
                                body: String = "") -> IncomingRequest {
        var request = IncomingRequest(streamID: 1)
        request.method = method
        request.path = "/1/apps/\(bundleID)/\(resource)"
        if let channel { request.headers = [HeaderField(name: "apns-channel-id", value: channel)] }
        request.body = Array(body.utf8)
        return request
    }

    /// Apple's "Sending channel management requests to APNs": `authorization` is "Required, if
    /// mTLS authentication is omitted" (create, read) or "Required for token-based
    /// authentication" (delete, list), and "APNs ignores this header if you use
    /// certificate-based authentication". On a certificate connection to the management host
    /// every operation goes with no token, and the path's bundle id must be one the
    /// certificate covers (the `--topic` list). Before, each was answered 403 MissingProviderToken.
    @Test func aCertificateConnectionsChannelRequestsNeedNoTokenButTheirBundleIDMustBeCovered() throws {
        var settings = settings()
        settings.certificateMode = true
        settings.broadcastJudge = BroadcastRequestJudge(allowedBundleIDs: ["com.example.app"])
        var logic = ConnectionLogic(connectionID: 1, settings: settings, seed: 1, role: .channelManagement)
        let created = answer(logic.handle(channelRequest("POST", bundleID: "com.example.app",
                                                         body: #"{"message-storage-policy":1,"push-type":"LiveActivity"}"#),
                                          faults: .none, now: Self.now))
        #expect(created?.status == 201, "\(String(describing: created))")
        let channel = try #require(created?.extraHeaders.first { $0.name == "apns-channel-id" }?.value)

        let read = answer(logic.handle(channelRequest("GET", bundleID: "com.example.app", channel: channel), faults: .none, now: Self.now))
        #expect(read?.status == 200, "\(String(describing: read))")
        #expect(read.flatMap { $0.successBody.map { ChannelAnswer.storagePolicy(fromReadBody: $0) } } == .mostRecentMessageStored)
        let list = answer(logic.handle(channelRequest("GET", bundleID: "com.example.app", resource: "all-channels"), faults: .none, now: Self.now))
        #expect(list?.status == 200, "\(String(describing: list))")
        #expect(list?.successBody.flatMap(ChannelAnswer.channels(fromListBody:)) == [channel])
        let deleted = answer(logic.handle(channelRequest("DELETE", bundleID: "com.example.app", channel: channel), faults: .none, now: Self.now))
        #expect(deleted?.status == 204, "\(String(describing: deleted))")
        #expect(settings.channels.list(bundleID: "com.example.app").isEmpty)

        let uncovered = answer(logic.handle(channelRequest("GET", bundleID: "com.example.other", resource: "all-channels"),
                                            faults: .none, now: Self.now))
        #expect(uncovered?.status == 400)
        #expect(uncovered?.reason == "TopicDisallowed")
    }
}

@Suite("apns-mock configuration and text")
struct ConfigurationTests {
    @Test func faultJSONMayNameOnlySomeFieldsAndTokensAreLowercased() throws {
        let json = #"{"badDeviceTokens":["ABCDEF"],"serviceUnavailableRate":0.5,"goawayAfterStreams":10,"refuseAfterStreams":3}"#
        let faults = try JSONDecoder().decode(FaultConfiguration.self, from: Data(json.utf8)).validated()
        #expect(faults.badDeviceTokens == ["abcdef"])
        #expect(faults.serviceUnavailableRate == 0.5)
        #expect(faults.goawayAfterStreams == 10)
        #expect(faults.refuseAfterStreams == 3)
        #expect(faults.delayMilliseconds == 0)
        let delayed = try JSONDecoder().decode(FaultConfiguration.self, from: Data(#"{"delayedTokens":{"ABCD":250}}"#.utf8)).validated()
        #expect(delayed.delayedTokens == ["abcd": 250])
    }

    @Test(arguments: [
        (FaultConfiguration(tooManyRequestsRate: -0.1), "tooManyRequestsRate"),
        (FaultConfiguration(tooManyRequestsRate: 0.6, internalServerErrorRate: 0.6), "must not exceed 1"),
        (FaultConfiguration(goawayAfterStreams: 0), "goawayAfterStreams"),
        (FaultConfiguration(goawayAfterSeconds: 0), "goawayAfterSeconds"),
        (FaultConfiguration(resetAfterStreams: -1), "resetAfterStreams"),
        (FaultConfiguration(refuseAfterStreams: 0), "refuseAfterStreams"),
        (FaultConfiguration(streamResetRate: 2), "streamResetRate"),
        (FaultConfiguration(streamResetErrorCode: 0), "streamResetErrorCode"),
        (FaultConfiguration(delayMilliseconds: -5), "delayMilliseconds"),
        (FaultConfiguration(delayedTokens: ["ab": -1]), "delayedTokens"),
    ])
    func invalidFaultsNameTheField(faults: FaultConfiguration, mention: String) {
        #expect {
            _ = try faults.validated()
        } throws: { error in
            "\(error)".contains(mention)
        }
    }

    @Test func metricsTextListsCountersInPrometheusFormat() {
        var stats = MockStats()
        stats.accepted = 12
        stats.rejected = ["410 Unregistered": 2, "400 BadDeviceToken": 1]
        stats.goaways = [GoawayRecord(connectionID: 1, lastStreamID: 7)]
        let text = StatsText.render(stats)
        #expect(text.contains("apns_mock_accepted_total 12\n"))
        #expect(text.contains("apns_mock_rejected_total{status=\"400\",reason=\"BadDeviceToken\"} 1\napns_mock_rejected_total{status=\"410\",reason=\"Unregistered\"} 2\n"))
        #expect(text.contains("apns_mock_goaways_sent_total 1\n"))
        #expect(text.contains("# TYPE apns_mock_accepted_total counter\n"))
    }

    @Test func metricsTextTellsConnectionsOpenAtOnceFromConnectionsAccepted() {
        var stats = MockStats()
        stats.connectionsAccepted = 16
        stats.connectionsClosed = 15
        stats.connectionsClosedByClient = 15
        stats.connectionsOpenPeak = 8
        let text = StatsText.render(stats)
        #expect(text.contains("apns_mock_connections_accepted_total 16\n"))
        #expect(text.contains("apns_mock_connections_closed_by_client_total 15\n"))
        #expect(text.contains("# TYPE apns_mock_connections_open gauge\napns_mock_connections_open 1\n"))
        #expect(text.contains("# TYPE apns_mock_connections_open_peak gauge\napns_mock_connections_open_peak 8\n"))
    }

    @Test func controlRequestHeadIsParsedOnceTheBlankLineArrives() {
        #expect(HTTPRequestHead.parse(Array("PUT /faults HTTP/1.1\r\nContent-Length: 2\r\n".utf8)) == nil)
        let head = HTTPRequestHead.parse(Array("PUT /faults HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}".utf8))
        #expect(head == HTTPRequestHead(method: "PUT", path: "/faults", contentLength: 2, bodyOffset: 52))
    }

    @Test func theAcceptedLogKeepsItsFirstEntriesUpToTheLimitAndCountsTheRest() {
        let accounting = Accounting(countsPerToken: false, logLimit: 3)
        for stream in 1...5 {
            accounting.recordAccepted(AcceptedNotification(apnsID: "id-\(stream)", token: "t", topic: "com.example.app",
                                                           payloadSHA256: "", connectionID: 1, streamID: Int32(stream)),
                                      token: "t")
        }
        #expect(accounting.acceptedLog.map(\.apnsID) == ["id-1", "id-2", "id-3"])
        #expect(accounting.stats.accepted == 5)
        #expect(accounting.stats.acceptedNotLogged == 2)
        #expect(StatsText.render(accounting.stats).contains("apns_mock_accepted_not_logged_total 2\n"))
    }

    @Test func timerHeapPopsInDeadlineOrder() {
        var heap = TimerHeap()
        for (index, deadline) in [50, 10, 40, 10, 30, 20].enumerated() { heap.push(deadline: UInt64(deadline), id: UInt64(index)) }
        var order: [UInt64] = []
        while let entry = heap.pop() { order.append(entry.deadline) }
        #expect(order == [10, 10, 20, 30, 40, 50])
    }

    @Test func commandLineBuildsTheServerConfiguration() throws {
        let command = try MockCommandLine.parse([
            "--cert", "s.pem", "--key", "s.key", "--port", "0", "--threads", "2", "--max-streams", "64",
            "--topic", "com.example.app", "--control-port", "0", "--log-accepted", "--count-per-token",
            "--unregistered", "ABCD:1234", "--bad-device-token", "EF01", "--rate-503", "0.25",
            "--goaway-after-streams", "100", "--refuse-after-streams", "1", "--delay-ms", "5", "--lower-concurrency-after-error", "--ignore-pings",
            "--log-limit", "500", "--token-topic", "ABCD=com.example.app",
            "--no-broadcast", "com.example.off", "--topic-mismatch", "com.example.Shop",
            "--forbidden-token", "AB03", "--forbidden-channel", "Zm9yYmlkZGVu",
        ])
        guard case .serve(let configuration, let faultsFile) = command else {
            Issue.record("expected serve, got \(command)")
            return
        }
        #expect(faultsFile == nil)
        #expect(configuration.port == 0)
        #expect(configuration.loopThreads == 2)
        #expect(configuration.maxConcurrentStreams == 64)
        #expect(configuration.allowedBundleIDs == ["com.example.app"])
        #expect(configuration.controlPort == 0)
        #expect(configuration.logsAccepted && configuration.countsPerToken)
        #expect(configuration.faults.unregisteredTokens == ["abcd": 1234])
        #expect(configuration.faults.badDeviceTokens == ["ef01"])
        #expect(configuration.faults.tokenTopics == ["abcd": "com.example.app"])
        #expect(configuration.faults.forbiddenTokens == ["ab03"])
        #expect(configuration.faults.forbiddenChannels == ["Zm9yYmlkZGVu"])
        #expect(configuration.faults.serviceUnavailableRate == 0.25)
        #expect(configuration.faults.goawayAfterStreams == 100)
        #expect(configuration.faults.refuseAfterStreams == 1)
        #expect(configuration.faults.delayMilliseconds == 5)
        #expect(configuration.faults.lowerConcurrencyAfterError)
        #expect(configuration.faults.ignorePings)
        #expect(configuration.acceptedLogLimit == 500)
        #expect(configuration.broadcastDisabledBundleIDs == ["com.example.off"])
        #expect(configuration.topicMismatchBundleIDs == ["com.example.Shop"])
        #expect(configuration.authentication == .none)
    }

    @Test func aProviderKeyMayBeBoundToOneEnvironment() throws {
        let key = try TestProviderKey()
        let directory = try TestCertificates.files().directory
        let file = directory + "/bound-\(UUID().uuidString).pub"
        try key.publicKeyPEM.write(toFile: file, atomically: true, encoding: .utf8)
        let command = try MockCommandLine.parse([
            "--cert", "a", "--key", "b", "--provider-key", "K1:T1:\(file):sandbox", "--provider-key", "K2:T1:\(file)",
            "--provider-key", "K3:T1:\(file):production",
        ])
        guard case .serve(let configuration, _) = command, case .token(let keys, _) = configuration.authentication else {
            Issue.record("expected serve with token auth, got \(command)")
            return
        }
        #expect(keys.map(\.keyID) == ["K1", "K2", "K3"])
        #expect(keys.map(\.environment) == [.sandbox, nil, .production])
        #expect(keys.allSatisfy { $0.publicKeyPEM == key.publicKeyPEM })
    }

    @Test(arguments: [
        (["--cert", "a"], "--key"),
        (["--cert", "a", "--key", "b", "--port", "http"], "--port expects an integer"),
        (["--cert", "a", "--key", "b", "--rate-429", "2"], "--rate-429 expects a share"),
        (["--cert", "a", "--key", "b", "--bogus"], "unknown option --bogus"),
        (["--cert", "a", "--key", "b", "--provider-key", "KEY"], "KEY_ID:TEAM_ID:PEM_FILE"),
        (["--cert", "a", "--key", "b", "--faults", "/nonexistent/faults.json"], "/nonexistent/faults.json"),
        (["gen-certs"], "output directory"),
        (["--cert", "a", "--key", "b", "--max-streams", "0"], "maxConcurrentStreams"),
        (["--cert", "a", "--key", "b", "--log-accepted", "--log-limit", "0"], "--log-limit must be at least 1, got 0"),
        (["--cert", "a", "--key", "b", "--refused-certificate-reset"], "--refused-certificate-reset needs --client-ca"),
        (["--cert", "a", "--key", "b", "--refused-certificate-handshake-reset"], "--refused-certificate-handshake-reset needs --client-ca"),
        (["--cert", "a", "--key", "b", "--client-ca", "ca.pem", "--refused-certificate-reset", "--refused-certificate-handshake-reset"],
         "are exclusive"),
        (["--cert", "a", "--key", "b", "--tls-max", "1.1"], "--tls-max expects 1.2 or 1.3, got 1.1"),
        (["--cert", "a", "--key", "b", "--token-topic", "ABCD"], "--token-topic expects TOKEN=TOPIC, got ABCD"),
    ])
    func commandLineErrorsSayWhatWasWrong(arguments: [String], mention: String) {
        #expect {
            _ = try MockCommandLine.parse(arguments)
        } throws: { error in
            "\(error)".contains(mention)
        }
    }

    @Test func helpAndGenCertsAreRecognised() throws {
        guard case .help = try MockCommandLine.parse(["--help"]) else {
            Issue.record("--help not recognised")
            return
        }
        guard case .generateCertificates(let directory) = try MockCommandLine.parse(["gen-certs", "/tmp/x"]) else {
            Issue.record("gen-certs not recognised")
            return
        }
        #expect(directory == "/tmp/x")
        #expect(MockCommandLine.usage.contains("--goaway-after-streams"))
    }

    @Test func aRefusedCertificateResetIsParsedWithItsClientCA() throws {
        let command = try MockCommandLine.parse(["--cert", "a", "--key", "b", "--client-ca", "ca.pem", "--refused-certificate-reset"])
        guard case .serve(let configuration, _) = command else {
            Issue.record("expected serve, got \(command)")
            return
        }
        #expect(configuration.refusedCertificateReset)
        #expect(configuration.authentication == .certificate(clientCAFile: "ca.pem"))
        #expect(MockCommandLine.usage.contains("--refused-certificate-reset"))
    }

    @Test func aRefusedCertificateHandshakeResetAndATLSCeilingAreParsed() throws {
        let command = try MockCommandLine.parse(["--cert", "a", "--key", "b", "--client-ca", "ca.pem",
                                                 "--refused-certificate-handshake-reset", "--tls-max", "1.2"])
        guard case .serve(let configuration, _) = command else {
            Issue.record("expected serve, got \(command)")
            return
        }
        #expect(configuration.refusedCertificateHandshakeReset)
        #expect(!configuration.refusedCertificateReset)
        #expect(configuration.maximumTLSVersion == .tls12)
        #expect(configuration.authentication == .certificate(clientCAFile: "ca.pem"))
        guard case .serve(let defaults, _) = try MockCommandLine.parse(["--cert", "a", "--key", "b"]) else {
            Issue.record("expected serve")
            return
        }
        #expect(defaults.maximumTLSVersion == .tls13)
        #expect(!defaults.refusedCertificateHandshakeReset)
        #expect(MockCommandLine.usage.contains("--refused-certificate-handshake-reset"))
        #expect(MockCommandLine.usage.contains("--tls-max 1.2|1.3"))
    }
}
