import Testing
@testable import Metrics

/// The bookkeeping behind the metrics port's deadlines and per-address bound, with plain
/// values and a clock given by hand.
@Suite struct ConnectionWatchTests {
    let a: [UInt8] = [127, 0, 0, 2]
    let b: [UInt8] = [127, 0, 0, 3]

    @Test func anAddressIsAdmittedUpToItsBoundAndAClosedConnectionFreesASlot() {
        let watch = ConnectionWatch(perAddressLimit: 2, requestTimeout: 5, answerTimeout: 10)
        #expect(watch.admits(a))
        watch.opened(1, descriptor: 11, address: a, now: 0)
        watch.opened(2, descriptor: 12, address: a, now: 0)
        #expect(!watch.admits(a))
        #expect(watch.admits(b), "another address is not held back by the first one's connections")
        watch.closed(1)
        #expect(watch.admits(a))
        #expect(watch.counts.open == 1)
        #expect(watch.counts.busiestAddress == 1)
        #expect(ConnectionWatch(perAddressLimit: 0, requestTimeout: 5, answerTimeout: 10).admits(a), "0 means no bound")
    }

    @Test func aRequestNotInByItsDeadlineIsEndedOnceWhateverTrickles() {
        let watch = ConnectionWatch(perAddressLimit: 0, requestTimeout: 5, answerTimeout: 10)
        watch.opened(1, descriptor: 11, address: a, now: 100)
        var ended = [Int32]()
        let early = watch.sweep(now: 104.9) { ended.append($0) }
        #expect(early.isEmpty)
        let due = watch.sweep(now: 105) { ended.append($0) }
        #expect(due == [.requestTimeout])
        #expect(ended == [11])
        let again = watch.sweep(now: 200) { ended.append($0) }
        #expect(again.isEmpty, "ended once, until the library reports the close")
        watch.closed(1)
        #expect(watch.counts.open == 0)
    }

    @Test func anAnswerHasItsOwnDeadlineAndAKeptAliveConnectionWaitsForItsNextRequestAfresh() {
        let watch = ConnectionWatch(perAddressLimit: 0, requestTimeout: 5, answerTimeout: 10)
        watch.opened(1, descriptor: 11, address: a, now: 0)
        watch.requestArrived(1, now: 4)
        let answering = watch.sweep(now: 13.9) { _ in }
        #expect(answering.isEmpty, "the answer has 10 s from the request")
        watch.answered(1, now: 13)
        let waiting = watch.sweep(now: 17.9) { _ in }
        #expect(waiting.isEmpty, "the next request has 5 s from the answer")
        let late = watch.sweep(now: 18) { _ in }
        #expect(late == [.requestTimeout])
        watch.opened(2, descriptor: 12, address: b, now: 20)
        watch.requestArrived(2, now: 20)
        let unread = watch.sweep(now: 30) { _ in }
        #expect(unread == [.answerTimeout])
    }

    @Test func callsForAConnectionTheWatchDoesNotKnowChangeNothing() {
        let watch = ConnectionWatch(perAddressLimit: 1, requestTimeout: 5, answerTimeout: 10)
        watch.requestArrived(9, now: 0)
        watch.answered(9, now: 0)
        watch.closed(9)
        #expect(watch.counts.open == 0)
        #expect(watch.counts.busiestAddress == 0)
        #expect(watch.admits(a))
    }
}
