/// The two ways a notification reaches APNs, each with its own workers and connection pools;
/// the raw value is the metric label.
enum Lane: String, CaseIterable, Sendable {
    /// Jobs inserted one by one, sent as soon as they are claimed.
    case transactional
    /// Targets of a campaign, sent in rate-capped chunks.
    case campaign

    /// One byte, not the raw value's text (`PushdConfig.Environment.hash(into:)`).
    func hash(into hasher: inout Hasher) { hasher.combine(self == .campaign) }
}
