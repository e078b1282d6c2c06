import Posix
@testable import QueueStore
import Testing
@testable import pushd

/// How `pushd channels audit` sorts APNs's channel list against the rows of `pushd.channels`.
@Suite struct ChannelAuditTests {
    static func row(_ id: Int64, _ channel: String?, _ state: String, environment: String? = "sandbox") -> ChannelRow {
        ChannelRow(id: id, app: "shop", channelID: channel, environment: environment, storagePolicy: "none", state: state,
                   outcome: nil, requestedAt: Timestamp(), createdAt: nil, deletedAt: nil)
    }

    @Test func channelsAtAPNsWithoutALiveRowAreUnknownAndActiveRowsAPNsLacksAreMissing() {
        let rows = [
            Self.row(1, "QUFBQQ==", "active"),
            Self.row(2, "QkJCQg==", "deleted"),          // pushd deleted it, APNs still has it
            Self.row(3, "Q0NDQw==", "pending_delete"),   // known, on its way out
            Self.row(4, "RERERA==", "failed"),           // a failed deletion: known
            Self.row(5, "RUVFRQ==", "active"),           // APNs lacks it
            Self.row(6, nil, "pending_create"),
            Self.row(7, "RkZGRg==", "active", environment: nil),          // the app's environment
            Self.row(8, "R0dHRw==", "active", environment: "production"), // not this environment's
        ]
        let audit = ChannelAudit(atAPNs: ["QUFBQQ==", "QkJCQg==", "Q0NDQw==", "RERERA==", "RkZGRg==", "SEhISA==", "SEhISA=="],
                                 rows: rows, environment: "sandbox", appEnvironment: "sandbox")
        #expect(audit.unknownToPushd == ["QkJCQg==", "SEhISA=="])
        #expect(audit.missingAtAPNs.map(\.id) == [5])
        #expect(audit.agreeing == 4)
        #expect(audit.pendingCreates == 1)
        #expect(!audit.agrees)
    }

    @Test func aRowWithoutEnvironmentBelongsToTheAppsEnvironmentOnly() {
        let rows = [Self.row(1, "QUFBQQ==", "active", environment: nil)]
        let production = ChannelAudit(atAPNs: ["QUFBQQ=="], rows: rows, environment: "production", appEnvironment: "sandbox")
        #expect(production.unknownToPushd == ["QUFBQQ=="])
        let sandbox = ChannelAudit(atAPNs: ["QUFBQQ=="], rows: rows, environment: "sandbox", appEnvironment: "sandbox")
        #expect(sandbox.agrees && sandbox.agreeing == 1)
    }
}
