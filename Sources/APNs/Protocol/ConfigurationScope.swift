/// What an answer that blames the app's configuration stops, and nothing more: the rest of
/// the app keeps sending.
///
/// - `topic`: TopicDisallowed. The credentials may not push to one topic of one environment
///   (`com.example.shop.voip` while `com.example.shop` works: a certificate without the VoIP
///   topic, a capability not enabled). Held per (app, environment, topic).
/// - `broadcast`: FeatureNotEnabled (broadcast push is not enabled for the bundle id) or
///   TopicMismatch (the bundle id is not one the credentials cover): its broadcasts and
///   channel requests are held per (app, environment).
/// - `channelCreation`: CannotCreateChannelConfig. The app has as many channels as APNs
///   allows: creations are held per (app, environment); deletions go on and make room.
/// - `environment`: BadEnvironmentKeyInToken (either spelling). The app's token key is restricted to the other
///   environment (Apple recommends a key per environment): nothing of the app can go to this
///   one with it, while the other environment keeps sending. Held per (app, environment), and
///   a hold of it covers every other scope of that environment. Also InvalidProviderToken,
///   BadEnvironmentKeyInToken and MissingProviderToken to a token of a key the app uses for
///   this environment only (`<env>_token`): the other environment's key is not judged by them.
///   Also Forbidden, when a run of 403 Forbidden answers in the environment with none accepted
///   says APNs refuses the credentials there (pushd's `ForbiddenBreaker`): the run is counted
///   per environment, so it judges that environment's credentials only.
public enum ConfigurationScope: String, Sendable, Hashable, CaseIterable {
    case topic
    case broadcast
    case channelCreation = "channel_creation"
    case environment

    /// The reason APNs answers most often for this scope, used when a hold names none: a metric
    /// label from a closed set (`reasons` lists every one a hold of the scope may carry).
    public var reason: APNsReason {
        switch self {
        case .topic: return .topicDisallowed
        case .broadcast: return .featureNotEnabled
        case .channelCreation: return .cannotCreateChannelConfig
        case .environment: return .badEnvironmentKeyIdInToken
        }
    }

    /// Every reason APNs holds this scope for; the hold keeps the one APNs answered.
    public var reasons: [APNsReason] {
        switch self {
        case .broadcast: return [.featureNotEnabled, .topicMismatch]
        case .environment: return [.badEnvironmentKeyIdInToken, .invalidProviderToken, .badEnvironmentKeyInToken, .missingProviderToken, .forbidden,
                                   .badCertificate, .badCertificateEnvironment]
        case .topic, .channelCreation: return [reason]
        }
    }

    /// What is held, in words: "topic com.example.shop.voip", "broadcasts and channel requests".
    public func describe(topic: String) -> String {
        switch self {
        case .topic: return "topic \(topic)"
        case .broadcast: return "broadcasts and channel requests"
        case .channelCreation: return "channel creation"
        case .environment: return "every notification"
        }
    }
}
