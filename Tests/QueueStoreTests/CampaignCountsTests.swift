@testable import QueueStore
import Testing

/// Remaining and due, decided once (`CampaignProgress.due`, `LaneDepth.campaignLanes`), for
/// every status a campaign not over can have.
@Suite struct CampaignCountsTests {
    static func progress(_ id: Int64, app: String = "shop", _ status: CampaignStatus, startsLater: Bool = false,
                         targets: Int = 10, sent: Int = 3, failed: Int = 1) -> CampaignProgress {
        CampaignProgress(id: id, app: app, name: "c\(id)", status: status, targets: targets, sent: sent, failed: failed,
                         pruned: 0, startsLater: startsLater)
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
    }

    @Test func theCampaignLaneCountsDueAsDepthLaterAsScheduledAndPausedInNeither() {
        let lanes = LaneDepth.campaignLanes([
            (Self.progress(1, .running), 30),
            (Self.progress(2, .scheduled), nil),
            (Self.progress(3, .scheduled, startsLater: true, targets: 100, sent: 0, failed: 0), nil),
            (Self.progress(4, .paused, targets: 1000, sent: 0, failed: 0), 90),
            (Self.progress(5, app: "news", .paused), 5),
            (Self.progress(6, .running, targets: 5, sent: 4, failed: 2), 10),
        ]).sorted { $0.app < $1.app }
        #expect(lanes == [
            LaneDepth(lane: .campaign, app: "news", depth: 0, scheduled: 0, oldestAge: 0),
            LaneDepth(lane: .campaign, app: "shop", depth: 12, scheduled: 100, oldestAge: 30),
        ])
    }
}
