@testable import QueueStore
import Testing

/// Remaining and due, decided once (`CampaignProgress.due`, `LaneDepth.campaignLanes`), for
/// every status a campaign not over can have.
@Suite struct CampaignCountsTests {
    static func progress(_ id: Int64, app: String = "shop", _ status: CampaignStatus, startsLater: Bool = false,
                         targets: Int = 10, sent: Int = 3, failed: Int = 1, refusedBy: String? = nil) -> CampaignProgress {
        CampaignProgress(id: id, app: app, name: "c\(id)", status: status, targets: targets, sent: sent, failed: failed,
                         pruned: 0, refusedBy: refusedBy, startsLater: startsLater)
    }

    @Test(arguments: [
        (CampaignStatus.running, false, true),
        (.scheduled, false, true),
        (.scheduled, true, false),
        (.paused, false, false),
        (.cancelled, false, false),
        (.done, false, false),
        (.draft, false, false),
    ])
    func onlyRunningCampaignsAndScheduledOnesWhoseStartHasComeAreDue(status: CampaignStatus, startsLater: Bool, due: Bool) {
        let campaign = Self.progress(1, status, startsLater: startsLater)
        #expect(campaign.due == due)
        #expect(campaign.remaining == 6, "remaining does not depend on whether it is due")
        // Held for a refused row, nothing leases or sends it: never due, whatever its status.
        let held = Self.progress(1, status, startsLater: startsLater, refusedBy: "campaigns_payload_shape")
        #expect(!held.due, "\(status) held by a CHECK")
        #expect(held.remaining == 6)
    }

    /// Depth, age and refused from one definition of due: a due scheduled campaign is aged
    /// (from its start time, the seconds given here), a paused or refused one is not.
    @Test func theCampaignLaneCountsDueAsDepthLaterAsScheduledRefusedApartAndPausedInNone() {
        let lanes = LaneDepth.campaignLanes([
            (Self.progress(1, .running), 30),
            (Self.progress(2, .scheduled), 45),
            (Self.progress(3, .scheduled, startsLater: true, targets: 100, sent: 0, failed: 0), nil),
            (Self.progress(4, .paused, targets: 1000, sent: 0, failed: 0), nil),
            (Self.progress(5, app: "news", .paused), nil),
            (Self.progress(6, .running, targets: 5, sent: 4, failed: 2), 10),
            (Self.progress(7, .running, targets: 50, sent: 0, failed: 0, refusedBy: "campaigns_payload_shape"), 500),
            (Self.progress(8, app: "news", .scheduled, startsLater: true, targets: 20, sent: 0, failed: 0, refusedBy: "x"), nil),
        ]).sorted { $0.app < $1.app }
        #expect(lanes == [
            LaneDepth(lane: .campaign, app: "news", depth: 0, scheduled: 0, oldestAge: 0, refused: 20),
            LaneDepth(lane: .campaign, app: "shop", depth: 12, scheduled: 100, oldestAge: 45, refused: 50),
        ])
    }
}
