/// What an answer that blames the app's configuration stops, and nothing more: the rest of
/// the app keeps sending.
///
/// - `topic`: TopicDisallowed. The credentials may not push to one topic of one environment
///   (`com.example.shop.voip` while `com.example.shop` works: a certificate without the VoIP
///   topic, a capability not enabled). Held per (app, environment, topic).
/// - `broadcast`: FeatureNotEnabled. Broadcast push is not enabled for the bundle id: its
///   broadcasts and channel requests are held per (app, environment).
/// - `channelCreation`: CannotCreateChannelConfig. The app has as many channels as APNs
///   allows: creations are held per (app, environment); deletions go on and make room.
public enum ConfigurationScope: String, Sendable, Hashable, CaseIterable {
    case topic
    case broadcast
    case channelCreation = "channel_creation"

    /// The reason APNs answers for this scope: a metric label from a closed set.
    public var reason: APNsReason {
        switch self {
        case .topic: return .topicDisallowed
        case .broadcast: return .featureNotEnabled
        case .channelCreation: return .cannotCreateChannelConfig
        }
    }

    /// What is held, in words: "topic com.example.shop.voip", "broadcasts and channel requests".
    public func describe(topic: String) -> String {
        switch self {
        case .topic: return "topic \(topic)"
        case .broadcast: return "broadcasts and channel requests"
        case .channelCreation: return "channel creation"
        }
    }
}
