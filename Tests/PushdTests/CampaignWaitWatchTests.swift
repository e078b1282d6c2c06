import QueueStore
import Testing
@testable import pushd

/// A campaign seen waiting for a worker at every look for 10 s is told once a minute, counted
/// while it waits, and told again when a worker takes it.
@Suite struct CampaignWaitWatchTests {
    let news = WaitingCampaign(id: 7, app: "news")
    let shop = WaitingCampaign(id: 3, app: "shop")

    @Test func aCampaignWaitingTenSecondsIsToldOnceAMinuteAndWhenItIsTaken() {
        var watch = CampaignWaitWatch()
        #expect(watch.observe([news], now: 100).isEmpty)
        #expect(watch.observe([news], now: 105).isEmpty)
        #expect(watch.longWaiting == 0)
        #expect(watch.observe([news], now: 110) == [.waiting(news, seconds: 10, unlogged: 0)])
        #expect(watch.longWaiting == 1)
        #expect(watch.observe([news], now: 115).isEmpty)
        #expect(watch.longWaiting == 1)
        #expect(watch.observe([news], now: 170) == [.waiting(news, seconds: 70, unlogged: 1)])
        #expect(watch.observe([], now: 175) == [.taken(news, seconds: 75)])
        #expect(watch.longWaiting == 0)
    }

    @Test func aCampaignTakenBeforeTenSecondsIsNeverTold() {
        var watch = CampaignWaitWatch()
        #expect(watch.observe([news, shop], now: 0).isEmpty)
        #expect(watch.observe([shop], now: 5).isEmpty)
        // Seen again: its wait starts over.
        #expect(watch.observe([news, shop], now: 10) == [.waiting(shop, seconds: 10, unlogged: 0)])
        #expect(watch.observe([news], now: 15) == [.taken(shop, seconds: 15)])
        #expect(watch.longWaiting == 0)
        #expect(watch.observe([news], now: 20) == [.waiting(news, seconds: 10, unlogged: 0)])
    }
}
