import APNs
import Testing

@Suite struct ResponseClassifierTests {
    enum Expected: Sendable {
        case prune, deadLetter, hold(ConfigurationScope), retry, refreshToken, reconnect, configuration
    }

    /// DESIGN.md section 4, one row per reason.
    static let table: [(Int, APNsReason, Expected)] = [
        (400, .badDeviceToken, .prune), (400, .deviceTokenNotForTopic, .prune),
        (400, .badCollapseId, .deadLetter), (400, .badExpirationDate, .deadLetter), (400, .badMessageId, .deadLetter),
        (400, .badPriority, .deadLetter), (400, .badTopic, .deadLetter), (400, .duplicateHeaders, .deadLetter),
        (400, .invalidPushType, .deadLetter), (400, .missingDeviceToken, .deadLetter), (400, .missingTopic, .deadLetter),
        (400, .payloadEmpty, .deadLetter),
        (400, .idleTimeout, .reconnect),
        (400, .topicDisallowed, .hold(.topic)),
        (403, .expiredProviderToken, .refreshToken),
        (403, .invalidProviderToken, .configuration), (403, .missingProviderToken, .configuration),
        (403, .badCertificate, .configuration), (403, .badCertificateEnvironment, .configuration),
        (403, .badEnvironmentKeyInToken, .hold(.environment)), (403, .badEnvironmentKeyIdInToken, .hold(.environment)),
        (403, .unrelatedKeyIdInToken, .configuration), (403, .forbidden, .deadLetter),
        (404, .badPath, .deadLetter), (405, .methodNotAllowed, .deadLetter),
        (410, .unregistered, .prune), (410, .expiredToken, .prune),
        (413, .payloadTooLarge, .deadLetter),
        (429, .tooManyRequests, .retry), (429, .tooManyProviderTokenUpdates, .reconnect),
        (500, .internalServerError, .retry),
        (503, .serviceUnavailable, .reconnect), (503, .shutdown, .reconnect),
        (400, .missingChannelId, .deadLetter), (400, .badChannelId, .deadLetter), (400, .missingPushType, .deadLetter),
        (400, .channelNotRegistered, .deadLetter),
        (400, .badRequestPayload, .deadLetter), (400, .badRequestParams, .deadLetter),
        (400, .cannotCreateChannelConfig, .hold(.channelCreation)),
        (400, .featureNotEnabled, .hold(.broadcast)),
        (403, .topicMismatch, .hold(.broadcast)),
    ]

    @Test func tableCoversEveryKnownReason() {
        #expect(Set(ResponseClassifierTests.table.map(\.1)) == Set(APNsReason.known.map(\.reason)))
        for (status, reason, _) in ResponseClassifierTests.table {
            #expect(reason.status == status, "\(reason)")
            #expect(reason.isKnown)
        }
    }

    @Test(arguments: ResponseClassifierTests.table)
    func everyReasonHasItsAction(status: Int, reason: APNsReason, expected: Expected) {
        let action = ResponseClassifier.classify(status: status, reason: reason, timestamp: 1_700_000_000_000)
        switch (expected, action) {
        case (.prune, .pruneToken(let ts)):
            #expect(ts == (status == 410 ? 1_700_000_000_000 : nil))
        case (.deadLetter, .deadLetter(let why)):
            #expect(!why.isEmpty)
        case (.hold(let scope), .holdScope(let held, let heldReason, let why)):
            #expect(held == scope)
            #expect(heldReason == reason)
            #expect(scope.reasons.contains(reason))
            #expect(!action.retries)
            #expect(why.contains(reason.rawValue))
        case (.retry, .retry), (.refreshToken, .refreshProviderTokenThenRetry), (.reconnect, .reconnectThenRetry):
            #expect(action.retries)
        case (.configuration, .configurationError(let r)):
            #expect(r == reason)
        default:
            Issue.record("\(status) \(reason): expected \(expected), got \(action)")
        }
    }

    @Test func successIsDelivered() {
        #expect(ResponseClassifier.classify(status: 200, reason: nil, timestamp: nil) == .delivered)
    }

    @Test func unregisteredWithoutTimestampStillPrunes() {
        #expect(ResponseClassifier.classify(status: 410, reason: .unregistered, timestamp: nil) == .pruneToken(timestamp: nil))
    }

    @Test(arguments: [400, 404, 410, 429, 500, 502, 503, 418])
    func unknownReasonsAreRetriedNeverDropped(status: Int) {
        let action = ResponseClassifier.classify(status: status, reason: APNsReason("SomethingNew"), timestamp: nil)
        #expect(action == .retry)
        #expect(!APNsReason("SomethingNew").isKnown)
    }

    /// A 403 reason Apple does not document is not proven to refuse the credentials (Forbidden,
    /// also a 403, refuses one request): the notification fails like a Forbidden one, the
    /// reason named verbatim. A 403 with no reason at all still stops the app.
    @Test func a403WithAnUnknownReasonFailsLikeForbiddenAndOneWithoutAReasonIsACredentialFailure() {
        let action = ResponseClassifier.classify(status: 403, reason: APNsReason("SomethingNew"), timestamp: nil)
        #expect(action == .deadLetter(why: "APNs answered 403 SomethingNew, a 403 reason pushd does not know: taken like Forbidden (the action is not allowed, the credentials not proven refused); not retried"))
        guard case .configurationError = ResponseClassifier.classify(status: 403, reason: nil, timestamp: nil) else {
            Issue.record("a 403 without a reason must pause the app"); return
        }
    }

    @Test func missingReasonFallsBackOnStatus() {
        #expect(ResponseClassifier.classify(status: 503, reason: nil, timestamp: nil) == .reconnectThenRetry)
        #expect(ResponseClassifier.classify(status: 500, reason: nil, timestamp: nil) == .retry)
        #expect(!ResponseClassifier.classify(status: 413, reason: nil, timestamp: nil).retries)
    }

    /// APNs answers 404 and 410 with one meaning each (a path it does not serve, a token no
    /// longer active): the same request earns the same answer, so one without a readable reason
    /// fails at once instead of being sent up to eight times. The token is not pruned on a
    /// status alone.
    @Test func a404OrA410WithoutAReadableReasonIsNotRetried() {
        for status in [404, 410] {
            guard case .deadLetter(let why) = ResponseClassifier.classify(status: status, reason: nil, timestamp: nil) else {
                Issue.record("HTTP \(status) without a reason: expected a dead letter, got \(ResponseClassifier.classify(status: status, reason: nil, timestamp: nil))")
                continue
            }
            #expect(why.contains("HTTP \(status)"))
        }
    }

    @Test func transportFailuresReconnect() {
        #expect(ResponseClassifier.transportFailure == .reconnectThenRetry)
    }

    /// An answer that blames the app's configuration holds its scope and says what to fix:
    /// never a dead letter, which would fail every notification of that scope one by one.
    @Test func configurationAnswersHoldTheirScopeAndNameTheFix() {
        guard case .holdScope(.topic, _, let topic) = ResponseClassifier.classify(status: 400, reason: .topicDisallowed, timestamp: nil) else {
            Issue.record("TopicDisallowed must hold the topic"); return
        }
        #expect(topic.contains("bundle_id") && topic.contains("team"))
        guard case .holdScope(.broadcast, _, let broadcast) = ResponseClassifier.classify(status: 400, reason: .featureNotEnabled, timestamp: nil) else {
            Issue.record("FeatureNotEnabled must hold the app's broadcasts"); return
        }
        #expect(broadcast.contains("Broadcast Push capability"))
        // A 403, but it refuses the bundle id of broadcasts, not the credentials: the app's
        // device pushes keep going.
        guard case .holdScope(.broadcast, .topicMismatch, let mismatch) = ResponseClassifier.classify(status: 403, reason: .topicMismatch, timestamp: nil) else {
            Issue.record("TopicMismatch must hold the app's broadcasts, not pause the app"); return
        }
        #expect(mismatch.contains("bundle_id") && mismatch.contains("letter case") && mismatch.contains("team"))
        guard case .holdScope(.channelCreation, _, let channels) = ResponseClassifier.classify(status: 400, reason: .cannotCreateChannelConfig, timestamp: nil) else {
            Issue.record("CannotCreateChannelConfig must hold channel creation"); return
        }
        #expect(channels.contains("delete channels"))
        // A key restricted to the other environment: only this environment of the app waits.
        guard case .holdScope(.environment, .badEnvironmentKeyIdInToken, let environment)
                = ResponseClassifier.classify(status: 403, reason: .badEnvironmentKeyIdInToken, timestamp: nil) else {
            Issue.record("BadEnvironmentKeyIdInToken must hold the environment, not pause the app"); return
        }
        #expect(environment.contains("a key for this environment") && environment.contains("both environments"))
        // The spelling APNs's servers answer: the same, with the reason it came with. Taken for a
        // refused key, it paused the whole app at every development-build token.
        guard case .holdScope(.environment, .badEnvironmentKeyInToken, let spelled)
                = ResponseClassifier.classify(status: 403, reason: .badEnvironmentKeyInToken, timestamp: nil) else {
            Issue.record("BadEnvironmentKeyInToken must hold the environment, not pause the app"); return
        }
        #expect(spelled.contains("(BadEnvironmentKeyInToken)"), "\(spelled)")
        #expect(Set(ConfigurationScope.allCases.map(\.reason))
                == [.topicDisallowed, .featureNotEnabled, .cannotCreateChannelConfig, .badEnvironmentKeyIdInToken])
        #expect(Set(ConfigurationScope.allCases.flatMap(\.reasons))
                == [.topicDisallowed, .featureNotEnabled, .topicMismatch, .cannotCreateChannelConfig, .badEnvironmentKeyIdInToken,
                    // The other spelling; and with a key per environment, pushd holds the
                    // environment of the key they refuse.
                    .invalidProviderToken, .badEnvironmentKeyInToken, .missingProviderToken,
                    // A run of them with none accepted: pushd holds the environment they came from.
                    .forbidden,
                    // To a certificate app with a certificate per environment: the refused one's.
                    .badCertificate, .badCertificateEnvironment])
        #expect(ConfigurationScope.topic.describe(topic: "com.example.shop.voip") == "topic com.example.shop.voip")
    }
}
