import Testing
@testable import pushd

/// A campaign worker leases chunks ahead while earlier ones wait for their answers; at a long
/// round trip its share of the window must fit in the chunks it may hold at once.
@Suite struct CampaignRunsAheadTests {
    @Test(arguments: [(2_000, 1_000), (20_000, 1_000), (50_000, 1_000), (9_000, 250), (30_000, 5_000)])
    func aWorkersChunksHoldItsWholeShareOfTheWindow(budget: Int, chunkSize: Int) {
        let runs = CampaignWorker.maxRuns(budget: budget, chunkSize: chunkSize)
        // Every run but the one being sent may still wait for all of its answers.
        #expect((runs - 1) * chunkSize >= budget, "\(runs) chunks of \(chunkSize) for a budget of \(budget)")
    }

    @Test func shortChunksStillGetSixteenAtOnce() {
        #expect(CampaignWorker.maxRuns(budget: 2_000, chunkSize: 1_000) == 16)
        #expect(CampaignWorker.maxRuns(budget: 1, chunkSize: 1_000) == 16)
    }

    /// Beyond the streams its connections carry, an engine takes one connection's worth per
    /// event loop of waiting requests, not the rest of the configured window.
    @Test func requestsBeyondTheStreamsWaitOneConnectionsWorthPerLoop() {
        #expect(CampaignWorker.engineHasRoom(outstanding: 1_999, streamCapacity: 1_000, waiting: 1_000))
        #expect(!CampaignWorker.engineHasRoom(outstanding: 2_000, streamCapacity: 1_000, waiting: 1_000))
        // A grown connection's streams let as many more in.
        #expect(CampaignWorker.engineHasRoom(outstanding: 2_000, streamCapacity: 1_500, waiting: 1_000))
    }

    @Test func beforeTheLoopsReportTheirStreamsOnlyTheWindowLimits() {
        #expect(CampaignWorker.engineHasRoom(outstanding: 10_000, streamCapacity: 0, waiting: 1_000))
    }
}
