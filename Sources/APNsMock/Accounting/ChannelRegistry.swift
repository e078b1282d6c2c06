import APNs
import Posix
import Locking

/// The channels the mock's management API created, per bundle id, and the broadcasts
/// accepted on each; shared by every loop thread of both listeners.
///
/// Channels are state, not statistics: resetting the stats zeroes the counts and keeps them.
final class ChannelRegistry: Sendable {
    private struct State {
        var channels: [String: [String: MessageStoragePolicy]] = [:]
        var created = 0
        var deleted = 0
        var broadcastsAccepted: [String: Int] = [:]
        var sequence: UInt64 = 0
    }

    private let state = Lock(State())
    let maximumPerApp: Int

    init(maximumPerApp: Int) {
        self.maximumPerApp = maximumPerApp
    }

    enum CreateResult: Equatable {
        case created(String)
        case limitReached
    }

    func create(bundleID: String, policy: MessageStoragePolicy) -> CreateResult {
        state.withLock { state in
            if state.channels[bundleID, default: [:]].count >= maximumPerApp { return .limitReached }
            state.sequence += 1
            let id = ChannelRegistry.makeID(bundleID: bundleID, sequence: state.sequence)
            state.channels[bundleID, default: [:]][id] = policy
            state.created += 1
            return .created(id)
        }
    }

    /// Registers a channel under an id it already has (APNs kept it while the mock was restarted).
    func adopt(bundleID: String, channelID: String, policy: MessageStoragePolicy) {
        state.withLock { $0.channels[bundleID, default: [:]][channelID] = policy }
    }

    func policy(bundleID: String, channelID: String) -> MessageStoragePolicy? {
        state.withLock { $0.channels[bundleID]?[channelID] }
    }

    /// Whether the channel existed.
    func delete(bundleID: String, channelID: String) -> Bool {
        state.withLock { state in
            guard state.channels[bundleID]?.removeValue(forKey: channelID) != nil else { return false }
            state.deleted += 1
            return true
        }
    }

    func list(bundleID: String) -> [String] {
        state.withLock { ($0.channels[bundleID] ?? [:]).keys.sorted() }
    }

    /// Counts a broadcast when the channel exists; false answers ChannelNotRegistered.
    func recordBroadcast(bundleID: String, channelID: String) -> Bool {
        state.withLock { state in
            guard state.channels[bundleID]?[channelID] != nil else { return false }
            state.broadcastsAccepted[channelID, default: 0] += 1
            return true
        }
    }

    func fill(_ stats: inout MockStats) {
        state.withLock { state in
            stats.channelsCreated = state.created
            stats.channelsDeleted = state.deleted
            stats.channelsLive = state.channels.values.reduce(0) { $0 + $1.count }
            stats.broadcastsAccepted = state.broadcastsAccepted
        }
    }

    func resetCounts() {
        state.withLock { state in
            state.created = 0
            state.deleted = 0
            state.broadcastsAccepted = [:]
        }
    }

    /// Base64 of a readable text, so ids look like APNs's and are unique per server run.
    private static func makeID(bundleID: String, sequence: UInt64) -> String {
        let text = "\(bundleID):\(sequence):\(UInt32.random(in: 0...UInt32.max))"
        return Base64URL.encodeStandard(text.utf8)
    }
}
