import APNs
import Posix
import Foundation
import Testing
@testable import pushd

/// A generator that always draws the same value, so backoffs are predictable.
struct FixedRandom: RandomNumberGenerator {
    var value: UInt64
    mutating func next() -> UInt64 { value }
}

@Suite struct OutcomePolicyTests {
    let policy = OutcomePolicy(retry: RetryPolicy(baseDelay: 1, maxDelay: 60, throttledBaseDelay: 10, maxAttempts: 4,
                                                  maxAttemptsForUnknownReasons: 2, outageLimit: 3600))
    let now = Timestamp(timeIntervalSince1970: 1_800_000_000)

    func verdict(_ outcome: SendOutcome, attempt: Int = 1, expiration: Int64? = nil, waited: Double = 0, apnsDown: Bool = false) -> Verdict {
        var random = FixedRandom(value: UInt64.max)
        return policy.verdict(for: outcome, attempt: attempt, expiration: expiration,
                              firstAttemptAt: now.addingTimeInterval(-waited), now: now, apnsDown: apnsDown, random: &random)
    }

    /// While the lane is down, what APNs did not answer or answered with a 5xx waits for the
    /// probe (up to the longest delay), keeping its reason, so that `apns_back` finds it; a
    /// throttled token or an answer about the request is decided as on a lane that is up.
    @Test func aDownLaneHoldsWhatWaitsForAPNsUntilTheProbeSeesItBack() {
        func delay(_ verdict: Verdict) -> Double? {
            guard case .retry(let at, _, _, false) = verdict else { return nil }
            return at.timeIntervalSince(now)
        }
        let unavailable: [SendOutcome] = [.response(status: 503, body: Self.body(#"{"reason":"ServiceUnavailable"}"#)),
                                          .response(status: 500, body: Self.body(#"{"reason":"InternalServerError"}"#)),
                                          .transportFailure("Recv failure: Connection reset by peer"),
                                          .notSent("not sent: 5 connections to APNs failed in a row (last: refused)")]
        for outcome in unavailable {
            let up = delay(verdict(outcome, waited: 4))
            let down = delay(verdict(outcome, waited: 4, apnsDown: true))
            #expect(up != nil && up! <= 2, "\(outcome): \(up ?? -1)")
            #expect(down == 60, "\(outcome): \(down ?? -1)")
            guard case .retry(_, let reason, _, _) = verdict(outcome, waited: 4, apnsDown: true) else { continue }
            #expect(OutcomePolicy.unavailableReasonPrefixes.contains { reason.hasPrefix($0) }, "\(reason)")
        }
        let throttled = SendOutcome.response(status: 429, body: Self.body(#"{"reason":"TooManyRequests"}"#))
        #expect(verdict(throttled, waited: 40, apnsDown: true) == verdict(throttled, waited: 40))
        let bad = SendOutcome.response(status: 400, body: Self.body(#"{"reason":"BadDeviceToken"}"#))
        #expect(verdict(bad, apnsDown: true) == verdict(bad))

        // Half of what is left of the budget at most: the outage limit, the expiration, the
        // window of apns-expiration 0; what is left too short is decided as before.
        let busy = unavailable[0]
        #expect(delay(verdict(busy, waited: 3540, apnsDown: true)) == 30)
        let expiration = Int64(now.timeIntervalSince1970) + 20
        #expect(delay(verdict(busy, expiration: expiration, waited: 4, apnsDown: true)) == 10)
        #expect(delay(verdict(busy, expiration: 0, waited: 10, apnsDown: true)) == 10)
        guard case .dead(_, let why) = verdict(busy, expiration: 0, waited: 29.5, apnsDown: true) else {
            Issue.record("apns-expiration 0 held past its window"); return
        }
        #expect(why.contains("apns-expiration 0"), "\(why)")
    }

    static func body(_ json: String) -> [UInt8] { Array(json.utf8) }

    @Test func successIsDelivered() {
        #expect(verdict(.response(status: 200, body: [])) == .delivered)
    }

    @Test func unregisteredPrunesWithTheTimestamp() {
        let result = verdict(.response(status: 410, body: Self.body(#"{"reason":"Unregistered","timestamp":1700000000123}"#)))
        #expect(result == .prune(status: 410, reason: "Unregistered", apnsTimestamp: Timestamp(timeIntervalSince1970: 1_700_000_000.123)))
    }

    @Test func badDeviceTokenPrunesAsOfNow() {
        #expect(verdict(.response(status: 400, body: Self.body(#"{"reason":"BadDeviceToken"}"#)))
                == .prune(status: 400, reason: "BadDeviceToken", apnsTimestamp: nil))
    }

    @Test func malformedRequestsAreDeadLettersWithTheirReason() {
        guard case .dead(let status, let reason) = verdict(.response(status: 400, body: Self.body(#"{"reason":"BadCollapseId"}"#))) else {
            Issue.record("not dead")
            return
        }
        #expect(status == 400)
        #expect(reason.hasPrefix("BadCollapseId: "))
    }

    @Test func rejectedCredentialsPauseTheApp() {
        #expect(verdict(.response(status: 403, body: Self.body(#"{"reason":"InvalidProviderToken"}"#))) == .pauseApp(reason: "InvalidProviderToken"))
        // A key restricted to the other environment holds only this environment, not the app.
        guard case .hold(.environment, "BadEnvironmentKeyIdInToken", _) = verdict(.response(status: 403, body: Self.body(#"{"reason":"BadEnvironmentKeyIdInToken"}"#))) else {
            Issue.record("BadEnvironmentKeyIdInToken must hold the environment"); return
        }
    }

    /// Forbidden ("the specified action is not allowed") used to pause the app, keep the job
    /// unspent and send it again after the pause, forever. It fails the notification now,
    /// whatever the attempt: Apple advises against sending such a request again unchanged.
    @Test(arguments: [1, 40])
    func forbiddenFailsTheNotificationAndIsNotSentAgain(attempt: Int) {
        #expect(verdict(.response(status: 403, body: Self.body(#"{"reason":"Forbidden"}"#)), attempt: attempt)
            == .dead(status: 403, reason: "Forbidden: APNs answered 403 Forbidden: the action is not allowed; not retried"))
    }

    /// TopicDisallowed used to be a dead letter: every job of a misconfigured topic failed one by
    /// one. It holds the topic now, whatever the attempt or the time already waited.
    @Test(arguments: [("TopicDisallowed", ConfigurationScope.topic), ("FeatureNotEnabled", .broadcast),
                      ("CannotCreateChannelConfig", .channelCreation)])
    func configurationAnswersHoldTheirScopeAndKeepTheJob(reason: String, scope: ConfigurationScope) {
        for (attempt, waited) in [(1, 0.0), (40, 100_000.0)] {
            guard case .hold(let held, let heldReason, let why) = verdict(.response(status: 400, body: Self.body(#"{"reason":"\#(reason)"}"#)),
                                                                          attempt: attempt, waited: waited) else {
                Issue.record("\(reason) at attempt \(attempt): not a hold")
                continue
            }
            #expect(held == scope)
            #expect(heldReason == reason)
            #expect(why.contains(reason))
        }
    }

    /// The answer is about the provider token, not the notification: a retry with a refresh
    /// that spends no attempt, however many were made (a wrong host clock gets every token
    /// called expired; the app is paused for that, its work is not dead-lettered).
    @Test func expiredProviderTokenRetriesWithARefreshWithoutUsingAnAttempt() {
        let expired = SendOutcome.response(status: 403, body: Self.body(#"{"reason":"ExpiredProviderToken"}"#))
        for attempt in [1, 4, 40] {
            guard case .retry(let at, let reason, let refresh, false) = verdict(expired, attempt: attempt) else {
                Issue.record("attempt \(attempt): not a retry without an attempt spent")
                continue
            }
            #expect(refresh)
            #expect(reason == "ExpiredProviderToken")
            #expect(at >= now && at <= now.addingTimeInterval(1))
        }
    }

    @Test(arguments: [
        (503, #"{"reason":"ServiceUnavailable"}"#), (500, #"{"reason":"InternalServerError"}"#),
        (429, #"{"reason":"TooManyRequests"}"#), (503, ""), (502, "<html>bad gateway</html>"),
    ])
    func serverTroubleUsesUpTimeNotAttempts(status: Int, body: String) {
        // Far past the budget of 4 attempts, a 5xx or 429 is still retried and does not count.
        let answer = SendOutcome.response(status: status, body: Self.body(body))
        guard case .retry(let at, _, false, false) = verdict(answer, attempt: 40, waited: 100) else {
            Issue.record("\(status) is not a retry that keeps the attempt budget")
            return
        }
        // A hundred seconds into the storm the next try waits up to half that.
        #expect(at.timeIntervalSince(now) > 49 && at.timeIntervalSince(now) <= 50)
        guard case .dead(status, let why) = verdict(answer, attempt: 1, waited: 3601) else {
            Issue.record("\(status) is not dead after the outage limit")
            return
        }
        #expect(why.contains("for 3601 s (the limit is 3600 s)"), "\(why)")
    }

    @Test func serverTroubleBacksOffExponentiallyFromTheFirstSend() {
        let busy = SendOutcome.response(status: 503, body: Self.body(#"{"reason":"ServiceUnavailable"}"#))
        var ceilings = [Double]()
        var waited = 0.0
        for _ in 0..<8 {
            guard case .retry(let at, _, _, _) = verdict(busy, waited: waited) else { Issue.record("not a retry"); return }
            let delay = at.timeIntervalSince(now)
            ceilings.append(delay)
            waited += delay
        }
        // Each wait is at least as long as the one before, and they grow well past the base.
        #expect(zip(ceilings, ceilings.dropFirst()).allSatisfy { $0 <= $1 })
        #expect(ceilings.last! > 4 * ceilings.first!)
    }

    /// The retries that waited for APNs are found again by their reason when the lane is back;
    /// a throttled token, a connection-level 400 or an answer blaming the request are not.
    @Test func retriesThatWaitedForAPNsBeginWithAnUnavailablePrefix() {
        func reason(_ outcome: SendOutcome) -> String? {
            guard case .retry(_, let reason, _, _) = verdict(outcome) else { return nil }
            return reason
        }
        func unavailable(_ text: String?) -> Bool {
            OutcomePolicy.unavailableReasonPrefixes.contains { text?.hasPrefix($0) == true }
        }
        let waitedForAPNs: [(SendOutcome, String)] = [
            (.response(status: 503, body: Self.body(#"{"reason":"ServiceUnavailable"}"#)), "HTTP 503 ServiceUnavailable"),
            (.response(status: 500, body: Self.body(#"{"reason":"InternalServerError"}"#)), "HTTP 500 InternalServerError"),
            (.response(status: 503, body: Self.body(#"{"reason":"Shutdown"}"#)), "HTTP 503 Shutdown"),
            (.response(status: 502, body: []), "HTTP 502"),
            (.transportFailure("Recv failure: Connection reset by peer"), "transport: Recv failure: Connection reset by peer"),
            (.notSent("not sent: 5 connections to APNs failed in a row (last: refused)"), "not sent: 5 connections to APNs failed in a row (last: refused)"),
        ]
        for (outcome, expected) in waitedForAPNs {
            #expect(reason(outcome) == expected)
            #expect(unavailable(reason(outcome)), "\(outcome)")
        }
        for outcome: SendOutcome in [.response(status: 429, body: Self.body(#"{"reason":"TooManyRequests"}"#)),
                                     .response(status: 400, body: Self.body(#"{"reason":"IdleTimeout"}"#)),
                                     .response(status: 403, body: Self.body(#"{"reason":"ExpiredProviderToken"}"#))] {
            #expect(reason(outcome) != nil && !unavailable(reason(outcome)), "\(outcome): \(reason(outcome) ?? "no retry")")
        }
        // The throttle is found by the bare reason.
        #expect(reason(.response(status: 429, body: Self.body(#"{"reason":"TooManyRequests"}"#))) == "TooManyRequests")
    }

    @Test func tooManyRequestsStartsFromTheThrottledBase() {
        guard case .retry(let throttled, _, _, false) = verdict(.response(status: 429, body: Self.body(#"{"reason":"TooManyRequests"}"#))),
              case .retry(let failed, _, _, false) = verdict(.response(status: 500, body: Self.body(#"{"reason":"InternalServerError"}"#))) else {
            Issue.record("not retries")
            return
        }
        #expect(throttled.timeIntervalSince(now) > 9 && throttled.timeIntervalSince(now) <= 10)
        #expect(failed.timeIntervalSince(now) <= 1)
    }

    @Test func serverTroubleStopsAtTheNotificationsExpiration() {
        let busy = SendOutcome.response(status: 503, body: Self.body(#"{"reason":"ServiceUnavailable"}"#))
        guard case .dead(503, let why) = verdict(busy, expiration: Int64(now.timeIntervalSince1970) + 5, waited: 20) else {
            Issue.record("not dead before expiring")
            return
        }
        #expect(why.contains("expires"))
        // apns-expiration 0 allows retries for 30 s after the first send, however late it was queued.
        guard case .retry = verdict(busy, expiration: 0, waited: 10) else { Issue.record("not a retry"); return }
        guard case .dead(503, _) = verdict(busy, expiration: 0, waited: 31) else { Issue.record("not dead"); return }
    }

    @Test func answersThatBlameTheRequestStillUseUpAttempts() {
        let odd = SendOutcome.response(status: 400, body: Self.body(#"{"reason":"SomethingNew"}"#))
        guard case .retry(_, _, false, true) = verdict(odd, attempt: 1) else { Issue.record("not a counted retry"); return }
        let badTopic = SendOutcome.response(status: 400, body: Self.body(#"{"reason":"SomethingNew"}"#))
        guard case .dead(400, let why) = verdict(badTopic, attempt: 4) else { Issue.record("attempt 4 of 4 should give up"); return }
        #expect(why.contains("gave up after 4 attempts"))
    }

    @Test func aNotificationHandedBackUnsentIsRetriedWithoutUsingAnAttempt() {
        let notSent = SendOutcome.notSent("not sent: 3 connections to APNs failed in a row (last: HTTP 503 Shutdown)")
        #expect(notSent.label == "not_sent")
        guard case .retry(let at, let reason, false, false) = verdict(notSent, attempt: 40) else {
            Issue.record("not a retry that keeps the budget")
            return
        }
        #expect(reason.hasPrefix("not sent: 3 connections"))
        #expect(at.timeIntervalSince(now) <= 1)
        // Its expiration still ends it.
        guard case .dead(nil, _) = verdict(notSent, expiration: Int64(now.timeIntervalSince1970) - 1) else {
            Issue.record("an expired notification was kept")
            return
        }
    }

    @Test func noAnswerWaitsOutAnOutageWithoutUsingTheAttemptBudget() {
        // Far past the budget of 4 attempts, a send that got no answer is still retried, and
        // the retry does not count as an attempt.
        guard case .retry(let soon, let reason, false, false) = verdict(.transportFailure("connection refused"), attempt: 40) else {
            Issue.record("not a retry that keeps the budget")
            return
        }
        #expect(reason == "transport: connection refused")
        #expect(soon.timeIntervalSince(now) <= 1)                       // just failed: at most baseDelay
        // Ten minutes into an outage the next probe waits up to half that, capped at maxDelay (60 s).
        guard case .retry(let later, _, false, false) = verdict(.transportFailure("connection refused"), attempt: 40, waited: 100) else {
            Issue.record("not a retry")
            return
        }
        #expect(later.timeIntervalSince(now) > 49 && later.timeIntervalSince(now) <= 50)
        guard case .retry(let capped, _, false, false) = verdict(.transportFailure("connection refused"), waited: 600) else {
            Issue.record("not a retry")
            return
        }
        #expect(capped.timeIntervalSince(now) > 59 && capped.timeIntervalSince(now) <= 60)
    }

    @Test func aRefusedTLSCertificatePausesTheAppInsteadOfWaitingOutAnOutage() {
        let reason = "the APNs server's TLS certificate failed verification (libcurl error 60: SSL certificate problem)"
        #expect(verdict(.tlsRefused(reason), attempt: 1) == .pauseApp(reason: reason))
        // Even long into what would be an outage, and with no attempts left, the job is kept.
        #expect(verdict(.tlsRefused(reason), attempt: 40, waited: 100_000) == .pauseApp(reason: reason))
    }

    @Test func noAnswerGivesUpAfterTheOutageLimitOrTheExpiration() {
        guard case .dead(nil, let why) = verdict(.transportFailure("connection reset"), waited: 3601) else {
            Issue.record("not dead after the outage limit")
            return
        }
        #expect(why.hasPrefix("transport: connection reset: no answer from APNs for 3601 s"))
        guard case .dead(nil, let expired) = verdict(.transportFailure("timeout"), expiration: Int64(now.timeIntervalSince1970)) else {
            Issue.record("not dead when expiring")
            return
        }
        #expect(expired.contains("expires"))
    }

    @Test func unknownReasonsGetTheSmallerBudget() {
        let odd = SendOutcome.response(status: 400, body: Self.body(#"{"reason":"SomethingNew"}"#))
        guard case .retry = verdict(odd, attempt: 1) else { Issue.record("first should retry"); return }
        guard case .dead(400, _) = verdict(odd, attempt: 2) else { Issue.record("second should give up"); return }
    }

    @Test func expiredNotificationsAreNotRetried() {
        guard case .dead(_, let why) = verdict(.response(status: 500, body: []), attempt: 1,
                                               expiration: Int64(now.timeIntervalSince1970)) else {
            Issue.record("not dead")
            return
        }
        #expect(why.contains("expires"))
    }

    @Test func garbageBodiesNeverCrash() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            let body = (0..<Int.random(in: 0...64, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator) }
            _ = verdict(.response(status: [400, 403, 410, 429, 500, 503, 999].randomElement()!, body: body))
        }
    }
}

@Suite struct NotificationFactoryTests {
    let factory = NotificationFactory(bundleID: "com.example.shop")
    let token = String(repeating: "ab", count: 32)

    func fields(token: String? = nil, pushType: String = "alert", priority: Int = 10,
                payload: String = #"{"aps":{"alert":"hi"}}"#) -> NotificationFactory.Fields {
        .init(token: token ?? self.token, pushType: pushType, priority: priority, expiration: nil,
              collapseID: nil, apnsID: nil, payload: payload)
    }

    @Test func buildsTheTopicFromThePushType() throws {
        #expect(try factory.notification(fields()).topic == "com.example.shop")
        #expect(try factory.notification(fields(pushType: "voip", payload: "{}")).topic == "com.example.shop.voip")
        #expect(try factory.notification(fields(pushType: "liveactivity",
                                                payload: #"{"aps":{"timestamp":1,"event":"update","content-state":{}}}"#)).topic
                == "com.example.shop.push-type.liveactivity")
    }

    @Test(arguments: [
        ("zz", "alert", 10, #"{"aps":{}}"#, "BadDeviceToken"),
        (nil, "banner", 10, #"{"aps":{}}"#, "InvalidPushType: 'banner'"),
        (nil, "alert", 7, #"{"aps":{}}"#, "BadPriority: 7"),
        (nil, "alert", 10, "[1,2]", "Invalid: payload"),
        (nil, "background", 5, #"{"aps":{"alert":"x","content-available":1}}"#, "Invalid:"),
    ] as [(String?, String, Int, String, String)])
    func rejectsWhatAPNsWouldRefuseWithAReason(token: String?, pushType: String, priority: Int, payload: String, expected: String) {
        do {
            _ = try factory.notification(fields(token: token, pushType: pushType, priority: priority, payload: payload))
            Issue.record("accepted")
        } catch {
            #expect(error.reason.hasPrefix(expected), "\(error.reason)")
        }
    }

    /// PushToTalk: "set an expiration of 0 to prevent the system from delivering older
    /// pushes". A job that names none is sent with apns-expiration 0; one that names another
    /// expiration, or a priority other than 10, is refused saying which rule.
    @Test func pushToTalkJobsGoWithExpiration0AndPriority10() throws {
        let ptt = NotificationFactory.Fields(token: token, pushType: "pushtotalk", priority: 10, expiration: nil,
                                             collapseID: nil, apnsID: nil, payload: #"{"speaker":"Anne"}"#)
        let built = try factory.notification(ptt)
        #expect(built.topic == "com.example.shop.voip-ptt")
        #expect(built.expiration == 0)
        #expect(built.headerFields(authorization: nil).map(\.line).contains("apns-expiration: 0"))
        var later = ptt
        later.expiration = Timestamp(timeIntervalSince1970: 1_800_000_000)
        #expect { try factory.notification(later) } throws: { error in
            (error as? NotificationFactory.Rejection)?.reason.contains("[pushtotalk-expiration]") == true
        }
        var quiet = ptt
        quiet.priority = 5
        #expect { try factory.notification(quiet) } throws: { error in
            (error as? NotificationFactory.Rejection)?.reason.contains("[pushtotalk-priority]") == true
        }
    }
}

@Suite struct TokenOnlyPushTypeTests {
    static let token = String(repeating: "ab", count: 32)
    static let liveActivity = #"{"aps":{"timestamp":1,"event":"update","content-state":{}}}"#

    static func fields(_ pushType: String, payload: String) -> NotificationFactory.Fields {
        .init(token: token, pushType: pushType, priority: 10, expiration: nil, collapseID: nil, apnsID: nil, payload: payload)
    }

    @Test(arguments: [("location", #"{"aps":{}}"#), ("liveactivity", liveActivity)])
    func aCertificateAppRefusesTokenOnlyPushTypesWithAReason(pushType: String, payload: String) throws {
        let certificateApp = NotificationFactory(bundleID: "com.example.shop", authentication: .certificate)
        #expect {
            try certificateApp.notification(Self.fields(pushType, payload: payload))
        } throws: { error in
            (error as? NotificationFactory.Rejection)?.reason.hasPrefix("TokenAuthenticationRequired: APNs accepts \(pushType) pushes only with token") == true
        }
        // The same job for a token app is built.
        let tokenApp = NotificationFactory(bundleID: "com.example.shop", authentication: .token)
        #expect(try tokenApp.notification(Self.fields(pushType, payload: payload)).pushType.rawValue == pushType)
    }

    @Test func theAuthenticationComesFromTheAppsCredentials() {
        let app = PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .sandbox,
                                  credentials: .certificate(certificateFile: "/c.pem", keyFile: nil, pkcs12File: nil, password: nil),
                                  campaignRate: nil)
        #expect(NotificationFactory(app: app).authentication == .certificate)
    }
}

@Suite struct TokenThrottleTests {
    let now = Timestamp(timeIntervalSince1970: 1_800_000_000)

    @Test func aThrottledTokenIsHeldUntilItsRetryAndOtherTokensAreNot() {
        let throttle = TokenThrottle()
        throttle.throttle("aa", until: now.addingTimeInterval(10), now: now)
        #expect(throttle.heldUntil("aa", now: now) == now.addingTimeInterval(10))
        #expect(throttle.heldUntil("bb", now: now) == nil)
        // A later 429 for the same token extends the hold; an earlier one does not shorten it.
        throttle.throttle("aa", until: now.addingTimeInterval(5), now: now)
        #expect(throttle.heldUntil("aa", now: now) == now.addingTimeInterval(10))
        #expect(throttle.heldUntil("aa", now: now.addingTimeInterval(10)) == nil)
    }

    @Test func expiredHoldsAreSweptOnceTheTableIsFull() {
        let throttle = TokenThrottle(sweepAbove: 3)
        for token in ["a", "b", "c"] { throttle.throttle(token, until: now.addingTimeInterval(1), now: now) }
        throttle.throttle("d", until: now.addingTimeInterval(20), now: now.addingTimeInterval(2))
        #expect(throttle.heldUntil("a", now: now) == nil)
        #expect(throttle.heldUntil("d", now: now) == now.addingTimeInterval(20))
    }

    @Test func aFourTenTimestampThatIsNoTimeIsTakenAsNone() {
        #expect(OutcomePolicy.unregisteredSince(nil, now: now) == nil)
        #expect(OutcomePolicy.unregisteredSince(1_799_999_000_000, now: now) == Timestamp(timeIntervalSince1970: 1_799_999_000))
        // A garbled answer: PostgreSQL refuses a year beyond 294276, and with it every answer of the batch.
        #expect(OutcomePolicy.unregisteredSince(9_000_000_000_000_000_000, now: now) == nil)
        #expect(OutcomePolicy.unregisteredSince(1_800_000_000_000 + 2 * 86_400_000, now: now) == nil)
        #expect(OutcomePolicy.unregisteredSince(-1, now: now) == nil)
    }
}
