/// Decides what a response means for the job that produced it.
///
/// The reason decides, not the status: APNs documents each reason with exactly one status, and
/// when the two disagree the reason is the more specific statement.
public enum ResponseClassifier {
    public static func classify(status: Int, reason: APNsReason?, timestamp: Int64?) -> ResponseAction {
        // 201 (channel created) and 204 (channel deleted) are the management API's successes.
        if (200..<300).contains(status) { return .delivered }
        guard let reason else { return classifyWithoutReason(status: status) }
        switch reason {
        case .badDeviceToken, .deviceTokenNotForTopic:
            return .pruneToken(timestamp: nil)
        case .unregistered, .expiredToken:
            return .pruneToken(timestamp: timestamp)

        case .badCollapseId, .badExpirationDate, .badMessageId, .badPriority, .badTopic,
             .duplicateHeaders, .invalidPushType, .missingDeviceToken, .missingTopic, .payloadEmpty:
            return .deadLetter(why: "APNs rejected the request as malformed (\(reason)); fix the sender, retrying cannot help")
        // Configuration, not the notification: every request of the same scope gets the same
        // answer until the operator fixes it, so the scope is held and its work kept.
        case .topicDisallowed:
            return .holdScope(.topic, reason: reason,
                              why: "APNs does not allow the app's credentials to push to this topic (TopicDisallowed); check the app's bundle_id, that its signing key belongs to the team that owns the bundle id (or that its certificate covers this topic), and that the capability behind the topic's suffix is enabled")
        case .badPath, .methodNotAllowed:
            return .deadLetter(why: "APNs rejected the request line (\(reason)); this is a sender bug")
        case .payloadTooLarge:
            return .deadLetter(why: "payload larger than APNs accepts for this push type (PayloadTooLarge)")

        case .missingChannelId, .badChannelId, .missingPushType, .badRequestPayload, .badRequestParams:
            return .deadLetter(why: "APNs rejected the broadcast or channel request as malformed (\(reason)); fix the sender, retrying cannot help")
        case .channelNotRegistered:
            return .deadLetter(why: "the channel does not exist in this environment (ChannelNotRegistered); it was deleted or never created there")
        case .cannotCreateChannelConfig:
            return .holdScope(.channelCreation, reason: reason,
                              why: "the app has as many channels as APNs allows (CannotCreateChannelConfig); delete channels no longer used")
        // Not a credential failure of the app as a whole: its ordinary pushes still work, so
        // only its broadcasts and channel requests are held.
        case .featureNotEnabled:
            return .holdScope(.broadcast, reason: reason,
                              why: "broadcast push is not enabled for this app's bundle id or key (FeatureNotEnabled); enable the Broadcast Push capability for the bundle id in the developer account")
        // A 403 that refuses the bundle id of a broadcast or channel request, not the
        // credentials as a whole: the same scope as FeatureNotEnabled, the reason kept. Apple
        // documents no TopicMismatch to device pushes; one there holds the same scope, so the
        // app's other device pushes keep going and its broadcasts wait for the same fix.
        case .topicMismatch:
            return .holdScope(.broadcast, reason: reason,
                              why: "APNs says the bundle id of the broadcast or channel request is not one the app's credentials cover (TopicMismatch); check that the app's bundle_id is the bundle id exactly as registered with Apple, letter case included, and that the signing key's team owns it")

        case .expiredProviderToken:
            return .refreshProviderTokenThenRetry
        // The key is restricted to the other environment: it still works there, so only this
        // environment of the app is held, not the app. Both spellings: APNs's servers answer
        // BadEnvironmentKeyInToken, Apple's table has had both; taken for a refused key, one key
        // restricted to production paused the whole app at each development-build token.
        case .badEnvironmentKeyIdInToken, .badEnvironmentKeyInToken:
            return .holdScope(.environment, reason: reason,
                              why: "APNs says the key that signs the provider token is not valid for this environment (\(reason.rawValue)): the key is restricted to the other environment; give the app a key for this environment, or a key for both environments")
        // With a key per environment, the caller narrows the token answers to the environment
        // whose own key signed the token (pushd's `PipelineContext.environmentKeyVerdict`).
        // UnrelatedKeyIdInToken reaches the caller only after the engine sent the request again on
        // a new connection and got it there too (`TransferDisposition`): the token is refused.
        case .invalidProviderToken, .missingProviderToken, .badCertificate, .badCertificateEnvironment,
             .unrelatedKeyIdInToken:
            return .configurationError(reason: reason)
        // "The specified action is not allowed": APNs refuses this request, and Apple advises
        // against sending it again unchanged. It names no credential; a sender that sees it to
        // every request tells refused credentials by a run of them (pushd's `ForbiddenBreaker`).
        case .forbidden:
            return .deadLetter(why: forbiddenWhy)

        case .idleTimeout, .serviceUnavailable, .shutdown:
            return .reconnectThenRetry
        // APNs counts token changes per connection; a fresh connection with the cached token
        // (the cache never re-mints within 20 minutes) stops the complaint.
        case .tooManyProviderTokenUpdates:
            return .reconnectThenRetry
        case .tooManyRequests, .internalServerError:
            return .retry

        default:
            // A 403 with a reason Apple has not documented: Forbidden ("the action is not
            // allowed") shows a 403 can refuse one request, not the credentials, so nothing
            // proves this one refuses them. It is taken like Forbidden: the notification fails,
            // named by the reason, and a run of 403s in an environment with none accepted is
            // what holds it as credentials refused (pushd's `ForbiddenBreaker`).
            if status == 403 { return .deadLetter(why: unknownForbiddenWhy(reason)) }
            // A reason APNs added after this code was written: retry, with the smaller attempt
            // budget `RetryPolicy` gives unknown reasons, so a permanent error still ends up in
            // dead letters instead of looping.
            return .retry
        }
    }

    /// Why a notification answered 403 Forbidden fails: its dead-letter reason follows "Forbidden: ".
    public static let forbiddenWhy = "APNs answered 403 Forbidden: the action is not allowed; not retried"

    /// How every `unknownForbiddenWhy` ends, so that a caller tells such a failure apart.
    public static let unknownForbiddenSuffix = ", a 403 reason pushd does not know: taken like Forbidden (the action is not allowed, the credentials not proven refused); not retried"

    /// Why a notification answered 403 with a reason Apple does not document fails, the reason
    /// named verbatim: its dead-letter reason follows "<reason>: ".
    public static func unknownForbiddenWhy(_ reason: APNsReason) -> String {
        "APNs answered 403 \(reason.rawValue)\(unknownForbiddenSuffix)"
    }

    /// A response that failed before any status arrived (connection reset, GOAWAY before the
    /// stream was processed, timeout): the notification may not have reached APNs.
    public static let transportFailure: ResponseAction = .reconnectThenRetry

    private static func classifyWithoutReason(status: Int) -> ResponseAction {
        switch status {
        case 413:
            return .deadLetter(why: "payload larger than APNs accepts (HTTP 413)")
        case 405:
            return .deadLetter(why: "APNs rejected the method (HTTP 405); this is a sender bug")
        case 503:
            return .reconnectThenRetry
        case 403:
            // The credentials are refused whatever the body says: stop the app, keep its jobs.
            return .configurationError(reason: APNsReason("HTTP 403"))
        case 404:
            // APNs answers 404 only to a request line it does not serve (BadPath): the same
            // request gets the same answer however often it is sent.
            return .deadLetter(why: "APNs rejected the request path (HTTP 404); this is a sender bug or apns.host is not APNs, retrying cannot help")
        case 410:
            // APNs answers 410 only for a token no longer active. Without a readable reason and
            // timestamp the token is kept (a prune cannot be undone), but sending again to it
            // would earn the same answer: the notification fails now.
            return .deadLetter(why: "APNs says the device token is no longer active for the topic (HTTP 410); the answer had no readable reason, so the token is kept")
        default:
            // Unreadable bodies are treated like unknown reasons: a limited number of retries.
            return .retry
        }
    }
}
