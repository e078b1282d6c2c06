import QueueStore

/// Which campaigns have waited for a campaign worker long enough to say so. A campaign is
/// leased oldest first, so one whose chunks nobody takes while the workers are busy with
/// other campaigns' chunks used to wait in silence; one worker per instance looks every few
/// seconds (`CampaignStore.campaignsWaitingForWorker`) and reports a campaign seen waiting at
/// every look for `reportAfter` seconds: a warning line (once a minute per campaign), the
/// gauge `pushd_campaigns_waiting_for_worker`, and a line when a worker takes it at last.
///
/// Thread rule: touched only on the thread of the worker that looks.
struct CampaignWaitWatch {
    /// Seconds a campaign may wait for a worker before it is reported: a worker that comes free
    /// takes a due chunk within milliseconds, so a campaign seen waiting for this long at every
    /// look is held back by the other campaigns.
    static let reportAfter = 10.0
    /// Seconds between looks.
    static let interval = 5.0

    enum Event: Equatable {
        /// `campaign` has waited `seconds` so far; `unlogged`: looks since its last line.
        case waiting(WaitingCampaign, seconds: Double, unlogged: Int)
        /// `campaign`, reported waiting, has a chunk being sent (or is over) after `seconds`.
        case taken(WaitingCampaign, seconds: Double)
    }

    private var since: [Int64: (campaign: WaitingCampaign, at: Double)] = [:]
    private var reported: Set<Int64> = []
    private var lines = LogGate<Int64>(quietSeconds: 60)

    /// Campaigns waiting longer than `reportAfter` at the last look.
    private(set) var longWaiting = 0

    /// Takes the campaigns seen waiting at `now` (monotonic seconds) and returns what to tell.
    mutating func observe(_ waiting: [WaitingCampaign], now: Double) -> [Event] {
        var events = [Event]()
        let seen = Set(waiting.map(\.id))
        for (id, entry) in since where !seen.contains(id) {
            since[id] = nil
            if reported.remove(id) != nil { events.append(.taken(entry.campaign, seconds: now - entry.at)) }
        }
        longWaiting = 0
        for campaign in waiting {
            let at = since[campaign.id]?.at ?? now
            since[campaign.id] = (campaign, at)
            guard now - at >= Self.reportAfter else { continue }
            longWaiting += 1
            reported.insert(campaign.id)
            if let unlogged = lines.admit(campaign.id, now: now) {
                events.append(.waiting(campaign, seconds: now - at, unlogged: unlogged))
            }
        }
        return events
    }
}
