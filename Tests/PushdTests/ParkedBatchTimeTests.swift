import QueueStore
import Testing
@testable import pushd

/// A parked batch holds its claiming transaction open while it is sent and answered: it must
/// be settled inside the session's idle limit however many workers share its campaign's cap.
@Suite struct ParkedBatchTimeTests {
    /// Workers take turns on one campaign's cap, each holding a batch: every batch reserves
    /// sends only up to its own deadline, so none waits for more than its time, whatever the
    /// number of workers, and together they still send at the cap.
    @Test(arguments: [1, 2, 8, 16, 64])
    func aBatchReservesNoSendBeyondItsDeadlineHoweverManyWorkersShareTheCap(workers: Int) {
        let limiter = RateLimiter()
        let rate = 2
        let budget = 20.0
        var now = 1_000.0
        let deadlines = (0..<workers).map { _ in now + budget }
        var open = Set(0..<workers)
        var sent = 0
        var latest = 0.0
        // Round robin, as the workers' threads interleave: each reserves its next send and
        // waits for it; a reservation beyond its deadline ends its batch.
        while !open.isEmpty {
            for worker in open.sorted() {
                switch limiter.reserve(campaign: 7, rate: rate, now: now, notAfter: deadlines[worker]) {
                case .wait(let wait):
                    #expect(now + wait <= deadlines[worker])
                    latest = max(latest, now + wait)
                    sent += 1
                case .beyond(let wait):
                    #expect(now + wait > deadlines[worker])
                    open.remove(worker)
                }
            }
            now += 1 / Double(rate * max(1, workers))
        }
        #expect(latest <= 1_000 + budget)
        // The cap's sends in the budget went out, shared, not lost to the deadline.
        #expect(sent >= Int(budget) * rate - 1 && sent <= Int(budget) * rate + 2, "\(sent) sends by \(workers) workers")
    }

    @Test func aSendBeyondTheDeadlineLeavesTheSlotToTheNextWorker() {
        let limiter = RateLimiter()
        #expect(limiter.reserve(campaign: 1, rate: 1, now: 0, notAfter: 10) == .wait(0))
        #expect(limiter.reserve(campaign: 1, rate: 1, now: 0, notAfter: 0.5) == .beyond(1))
        // Nothing was reserved by the refusal: the next send is still 1 s away.
        #expect(limiter.reserve(campaign: 1, rate: 1, now: 0, notAfter: 10) == .wait(1))
        #expect(limiter.reserve(campaign: 1, rate: 1, now: 0) == 2)
    }

    /// A batch stops sending after its budget and stops waiting for answers in time for its
    /// settle, inside the session's idle limit for any answer wait.
    @Test(arguments: [5.0, 35.0, 65.0, 125.0])
    func aParkedBatchIsSettledInsideTheSessionsIdleLimit(answerWait: Double) {
        let idle = Double(QueueSession.idleInTransactionSeconds(waitingOnAnswersFor: answerWait))
        let (sendBy, answersBy) = CampaignWorker.parkedBatchDeadlines(claimedAt: 100, sendSeconds: 20, idleSeconds: idle)
        #expect(sendBy == 120)
        #expect(answersBy <= 100 + idle - CampaignWorker.parkedSettleMargin)
        // The answers of the last send get their whole wait, as the engine's deadline gives them.
        #expect(sendBy + answerWait <= answersBy, "sending until \(sendBy), answers by \(answersBy), idle \(idle) s")
    }

    @Test func aBudgetLongerThanTheIdleLimitIsCutToIt() {
        let (sendBy, answersBy) = CampaignWorker.parkedBatchDeadlines(claimedAt: 0, sendSeconds: 500, idleSeconds: 120)
        #expect(answersBy == 110)
        #expect(sendBy == 110)
    }
}
