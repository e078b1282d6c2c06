/// What APNs keeps of a channel's broadcasts for devices that are offline when one is sent
/// (`message-storage-policy` when the channel is created). Fixed for the channel's life.
public enum MessageStoragePolicy: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// Nothing is stored: an offline device misses the update.
    case noMessageStored = 0
    /// The most recent broadcast is stored and delivered when the device comes back.
    case mostRecentMessageStored = 1

    /// The name pushd's SQL API and command line use.
    public var name: String {
        switch self {
        case .noMessageStored: return "none"
        case .mostRecentMessageStored: return "most-recent"
        }
    }

    public var description: String { name }

    /// Accepts the names above and APNs's numbers "0" and "1".
    public init?(name: String) {
        switch name.lowercased() {
        case "none", "no-storage", "0": self = .noMessageStored
        case "most-recent", "most-recent-message", "1": self = .mostRecentMessageStored
        default: return nil
        }
    }
}
