import QueueStore

/// The channels APNs has for one app in one environment set beside the rows of
/// `pushd.channels` for it. A channel creation taken over after its instance stopped
/// (`channel_request_taken_over`) may have left a channel at APNs that no row records: it
/// counts against the app's channel limit until someone deletes it.
struct ChannelAudit: Sendable, Equatable {
    /// At APNs with no row that records it as existing (none, or one marked deleted), in APNs's order.
    var unknownToPushd: [String]
    /// Rows recorded `active` whose channel APNs does not have, newest first.
    var missingAtAPNs: [ChannelRow]
    /// Channels at APNs that a row records as existing.
    var agreeing: Int
    /// Creations still pending: a channel one of them is making may be at APNs before its row has its id.
    var pendingCreates: Int

    var agrees: Bool { unknownToPushd.isEmpty && missingAtAPNs.isEmpty }

    /// - Parameters:
    ///   - atAPNs: the ids APNs listed for the app in `environment`.
    ///   - rows: the app's rows, deleted ones included.
    ///   - appEnvironment: where a row that names no environment went: the app's configured one,
    ///     as the daemon sends it.
    init(atAPNs: [String], rows: [ChannelRow], environment: String, appEnvironment: String) {
        let here = rows.filter { ($0.environment ?? appEnvironment) == environment }
        // A row being deleted, or whose deletion failed, still records a channel APNs may hold.
        let recorded = Set(here.filter { $0.state != "deleted" }.compactMap(\.channelID))
        let listed = Set(atAPNs)
        var seen = Set<String>()
        unknownToPushd = atAPNs.filter { !recorded.contains($0) && seen.insert($0).inserted }
        agreeing = listed.intersection(recorded).count
        missingAtAPNs = here.filter { row in row.state == "active" && row.channelID.map { !listed.contains($0) } ?? false }
        pendingCreates = here.filter { $0.state == "pending_create" }.count
    }
}
