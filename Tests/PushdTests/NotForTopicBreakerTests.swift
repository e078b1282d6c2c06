import APNs
import QueueStore
import Testing
@testable import pushd

/// DeviceTokenNotForTopic answers in a row on one topic: each blames its token until a run
/// of them with none accepted blames the topic, and the run's prunes are taken back.
@Suite struct NotForTopicBreakerTests {
    static let shop = NotForTopicBreaker.Key(environment: .production, topic: "com.example.shop")
    static let voip = NotForTopicBreaker.Key(environment: .production, topic: "com.example.shop.voip")
    static let sandbox = NotForTopicBreaker.Key(environment: .sandbox, topic: "com.example.shop")
    static let sale = NotForTopicBreaker.Source.campaign(7)
    static let job = NotForTopicBreaker.Source.transactional

    static func token(_ n: Int) -> String { String(repeating: String(n % 10), count: 64) }
    static func prune(_ n: Int, reason: APNsReason = .deviceTokenNotForTopic) -> TokenPrune {
        TokenPrune(app: "shop", token: token(n), reason: reason.rawValue, apnsTimestamp: nil, environment: "production")
    }

    @Test func theThresholdthAnswerInARowTripsAndEachOneBeforeItCounts() {
        var breaker = NotForTopicBreaker(threshold: 3)
        #expect(breaker.notForTopic(Self.shop, token: Self.token(1), prunes: true) == .counted(1))
        #expect(breaker.notForTopic(Self.shop, token: Self.token(2), prunes: true) == .counted(2))
        #expect(breaker.count(Self.shop) == 2)
        #expect(breaker.notForTopic(Self.shop, token: Self.token(3), prunes: true) == .tripped(count: 3, restore: []))
    }

    /// The hold a trip makes ends after a while (or on SIGHUP) with its work due: while nothing
    /// was accepted on the topic, the first answer after it holds again. A new run instead
    /// blamed the next `threshold - 1` tokens, failing their notifications and pruning them
    /// each time the hold ended.
    @Test func aTrippedRunStaysTrippedUntilANotificationIsAccepted() {
        var breaker = NotForTopicBreaker(threshold: 3)
        for n in 1...2 { _ = breaker.notForTopic(Self.shop, token: Self.token(n), prunes: true) }
        #expect(breaker.notForTopic(Self.shop, token: Self.token(3), prunes: true) == .tripped(count: 3, restore: []))
        #expect(breaker.notForTopic(Self.shop, token: Self.token(4), prunes: true) == .tripped(count: 4, restore: []))
        // Its token blamed for nothing: no prune of it is written, none restored.
        #expect(breaker.written([Self.prune(4)]).isEmpty)
        #expect(breaker.toWrite([Self.prune(4)]).write == [Self.prune(4)])
        #expect(breaker.counting)
        // The other topics and environments count on their own.
        #expect(breaker.notForTopic(Self.sandbox, token: Self.token(5), prunes: true) == .counted(1))
        breaker.accepted(Self.shop, source: Self.job, now: 0)
        #expect(breaker.notForTopic(Self.shop, token: Self.token(6), prunes: true) == .counted(1))
    }

    @Test func anAcceptedNotificationEndsTheRunOfItsTopicOnly() {
        var breaker = NotForTopicBreaker(threshold: 3)
        _ = breaker.notForTopic(Self.shop, token: Self.token(1), prunes: true)
        _ = breaker.notForTopic(Self.shop, token: Self.token(2), prunes: true)
        _ = breaker.notForTopic(Self.voip, token: Self.token(1), prunes: false)
        _ = breaker.notForTopic(Self.sandbox, token: Self.token(5), prunes: true)
        breaker.accepted(Self.shop, source: Self.job, now: 0)
        #expect(breaker.count(Self.shop) == 0)
        #expect(breaker.count(Self.voip) == 1)
        #expect(breaker.count(Self.sandbox) == 1)
        #expect(breaker.notForTopic(Self.shop, token: Self.token(3), prunes: true) == .counted(1))
        #expect(breaker.counting)
        breaker.accepted(Self.shop, source: Self.job, now: 0)
        breaker.accepted(Self.voip, source: Self.job, now: 0)
        breaker.accepted(Self.sandbox, source: Self.job, now: 0)
        #expect(!breaker.counting)
    }

    @Test func aTripReturnsTheRunsWrittenPrunesAndWithdrawsTheOthers() {
        var breaker = NotForTopicBreaker(threshold: 4)
        for n in 1...3 { _ = breaker.notForTopic(Self.shop, token: Self.token(n), prunes: true) }
        // 1 and 2 were written (a batch committed); 3 was not yet.
        #expect(breaker.toWrite([Self.prune(1), Self.prune(2)]).write == [Self.prune(1), Self.prune(2)])
        #expect(breaker.written([Self.prune(1), Self.prune(2)]).isEmpty)
        #expect(breaker.notForTopic(Self.shop, token: Self.token(4), prunes: true)
                == .tripped(count: 4, restore: [Self.prune(1), Self.prune(2)]))
        #expect(breaker.withdrawing)
        // 3 is left out when its batch comes to write it; other prunes are written as ever.
        let split = breaker.toWrite([Self.prune(3), Self.prune(3, reason: .badDeviceToken), Self.prune(5)])
        #expect(split.write == [Self.prune(3, reason: .badDeviceToken), Self.prune(5)])
        #expect(split.withheld == [Self.prune(3)])
        // Forgotten once the transaction that left it out is committed.
        #expect(breaker.withdrawing)
        breaker.withheldCommitted(split.withheld)
        #expect(!breaker.withdrawing)
        #expect(breaker.toWrite([Self.prune(3)]).write == [Self.prune(3)])
    }

    /// The transaction that left a withdrawn prune out may be rolled back (its session ended
    /// before the COMMIT) and the batch written again on a new session: the prune is left out
    /// again, not written because the first attempt had used up its withdrawal.
    @Test func aPruneLeftOutByARolledBackAttemptIsLeftOutByTheNext() {
        var breaker = NotForTopicBreaker(threshold: 2)
        _ = breaker.notForTopic(Self.shop, token: Self.token(1), prunes: true)
        #expect(breaker.notForTopic(Self.shop, token: Self.token(2), prunes: true) == .tripped(count: 2, restore: []))
        // The first attempt leaves it out, and is rolled back.
        #expect(breaker.toWrite([Self.prune(1)]).write.isEmpty)
        // The batch taken back on a new session is written again.
        #expect(breaker.toWrite([Self.prune(1)]).write.isEmpty, "a token of a tripped run pruned by the second attempt")
        #expect(breaker.withdrawing)
    }

    @Test func aPruneWrittenWhileItsRunTrippedIsReturnedToRestore() {
        var breaker = NotForTopicBreaker(threshold: 2)
        _ = breaker.notForTopic(Self.shop, token: Self.token(1), prunes: true)
        // Its batch passed the filter before the trip, and wrote it after.
        #expect(breaker.toWrite([Self.prune(1)]).write == [Self.prune(1)])
        #expect(breaker.notForTopic(Self.shop, token: Self.token(2), prunes: true) == .tripped(count: 2, restore: []))
        #expect(breaker.written([Self.prune(1)]) == [Self.prune(1)])
        #expect(!breaker.withdrawing)
    }

    @Test func thePrunesOfARunAnAcceptedNotificationEndedStand() {
        var breaker = NotForTopicBreaker(threshold: 3)
        _ = breaker.notForTopic(Self.shop, token: Self.token(1), prunes: true)
        _ = breaker.notForTopic(Self.shop, token: Self.token(2), prunes: true)
        #expect(breaker.written([Self.prune(1)]).isEmpty)
        breaker.accepted(Self.shop, source: Self.job, now: 0)
        #expect(breaker.written([Self.prune(2)]).isEmpty)
        #expect(breaker.toWrite([Self.prune(2)]).write == [Self.prune(2)])
        for n in 3...4 { _ = breaker.notForTopic(Self.shop, token: Self.token(n), prunes: true) }
        // A new run: what the ended one wrote is not restored by this one's trip.
        #expect(breaker.notForTopic(Self.shop, token: Self.token(5), prunes: true) == .tripped(count: 3, restore: []))
    }

    @Test func answersOnATopicThatPrunesNothingCountButWithdrawNothing() {
        var breaker = NotForTopicBreaker(threshold: 2)
        _ = breaker.notForTopic(Self.voip, token: Self.token(1), prunes: false)
        #expect(breaker.notForTopic(Self.voip, token: Self.token(2), prunes: false) == .tripped(count: 2, restore: []))
        #expect(!breaker.withdrawing)
        // A new run: such answers blame their notifications alone (a push type sent to tokens of
        // another), and work of them at the head of the queue drains instead of holding for good.
        #expect(!breaker.counting)
        #expect(breaker.notForTopic(Self.voip, token: Self.token(3), prunes: false) == .counted(1))
    }

    /// A wrong bundle_id answers every topic of the app DeviceTokenNotForTopic. While the main
    /// topic's run is tripped, an answer on another topic of the same environment holds that
    /// topic at once; a new run there failed `threshold - 1` notifications each time its hold
    /// ended. The other environment, and the topic once the main topic is accepted, count again.
    @Test func whileTheMainTopicIsTrippedAnotherTopicOfItsEnvironmentIsHeldAtOnce() {
        var breaker = NotForTopicBreaker(threshold: 3)
        for n in 1...3 { _ = breaker.notForTopic(Self.shop, token: Self.token(n), prunes: true) }
        #expect(breaker.notForTopic(Self.voip, token: Self.token(4), prunes: false) == .heldWithMainTopic(count: 3))
        #expect(breaker.notForTopic(Self.voip, token: Self.token(5), prunes: false) == .heldWithMainTopic(count: 3))
        #expect(breaker.count(Self.voip) == 0)
        // Not the other environment's topics.
        let sandboxVoip = NotForTopicBreaker.Key(environment: .sandbox, topic: "com.example.shop.voip")
        #expect(breaker.notForTopic(sandboxVoip, token: Self.token(6), prunes: false) == .counted(1))
        // A main-topic answer after the trip holds as before, with the run's count.
        #expect(breaker.notForTopic(Self.shop, token: Self.token(7), prunes: true) == .tripped(count: 4, restore: []))
        #expect(breaker.notForTopic(Self.voip, token: Self.token(8), prunes: false) == .heldWithMainTopic(count: 4))
        breaker.accepted(Self.shop, source: Self.job, now: 0)
        #expect(breaker.notForTopic(Self.voip, token: Self.token(9), prunes: false) == .counted(1))
    }

    /// A notification to another topic of the environment accepted since the main topic
    /// tripped shows the bundle id is right: an answer on that topic blames its notification
    /// again (a VoIP push sent to an alert token), rather than holding the topic for as long
    /// as the main topic stays tripped. The main topic itself stays tripped.
    @Test func anotherTopicAcceptedSinceTheTripIsNoLongerHeldWithTheMainTopic() {
        var breaker = NotForTopicBreaker(threshold: 3)
        for n in 1...3 { _ = breaker.notForTopic(Self.shop, token: Self.token(n), prunes: true) }
        #expect(breaker.notForTopic(Self.voip, token: Self.token(4), prunes: false) == .heldWithMainTopic(count: 3))
        // Accepted in the other environment: no change here.
        breaker.accepted(NotForTopicBreaker.Key(environment: .sandbox, topic: "com.example.shop.voip"), source: Self.job, now: 0)
        #expect(breaker.notForTopic(Self.voip, token: Self.token(5), prunes: false) == .heldWithMainTopic(count: 3))
        breaker.accepted(Self.voip, source: Self.job, now: 0)
        #expect(breaker.notForTopic(Self.voip, token: Self.token(6), prunes: false) == .counted(1))
        #expect(breaker.notForTopic(Self.shop, token: Self.token(7), prunes: true) == .tripped(count: 4, restore: []))
    }

    /// BadDeviceToken answers count per environment and source, whatever the topic: the run's
    /// written prunes come back at the trip, its unwritten ones are withdrawn, and it stays
    /// tripped (every answer after it `.tripped`, its token not pruned) until a notification of
    /// the source in the environment is accepted, on any topic. The other environment counts on
    /// its own, and a DeviceTokenNotForTopic run is not one of it.
    @Test func aRunOfBadDeviceTokenAnswersInAnEnvironmentTripsAndStaysTrippedUntilOneIsAccepted() {
        var breaker = NotForTopicBreaker(threshold: 25, badDeviceTokenThreshold: 3)
        let bad = { (n: Int) in Self.prune(n, reason: .badDeviceToken) }
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(1), now: 0) == .counted(1))
        #expect(breaker.badDeviceToken(.sandbox, source: Self.sale, token: Self.token(9), now: 0) == .counted(1))
        #expect(breaker.notForTopic(Self.shop, token: Self.token(8), prunes: true) == .counted(1))
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(2), now: 0) == .counted(2))
        #expect(breaker.written([bad(1)]).isEmpty)
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(3), now: 0) == .tripped(count: 3, restore: [bad(1)]))
        // Token 2's prune was not written yet: it is left out, and restored if written after all.
        #expect(breaker.toWrite([bad(2), Self.prune(8), Self.prune(7, reason: .unregistered)]).withheld == [bad(2)])
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(4), now: 0) == .tripped(count: 4, restore: []))
        #expect(breaker.written([bad(2)]) == [bad(2)])
        // The sandbox run and the topic's run are still counting where they were.
        #expect(breaker.badDeviceToken(.sandbox, source: Self.sale, token: Self.token(6), now: 0) == .counted(2))
        #expect(breaker.notForTopic(Self.shop, token: Self.token(5), prunes: true) == .counted(2))
        // A tripped BadDeviceToken run holds no other topic with it.
        #expect(breaker.notForTopic(Self.voip, token: Self.token(5), prunes: false) == .counted(1))
        // Accepted in production for another source: the campaign's run goes on.
        breaker.accepted(Self.voip, source: Self.job, now: 0)
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(5), now: 0) == .tripped(count: 5, restore: []))
        // Accepted for the campaign, on another topic: its run ends, the next answer counts from one.
        breaker.accepted(Self.voip, source: Self.sale, now: 0)
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(5), now: 0) == .counted(1))
        #expect(breaker.badDeviceToken(.sandbox, source: Self.sale, token: Self.token(7), now: 0) == .tripped(count: 3, restore: []))
    }

    /// Each source counts on its own: a campaign of the other environment's tokens trips while
    /// the transactional lane's notifications are accepted between its answers.
    @Test func anotherSourcesAcceptedNotificationsDoNotEndARun() {
        var breaker = NotForTopicBreaker(threshold: 25, badDeviceTokenThreshold: 3)
        for n in 1...2 {
            #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(n), now: 0) == .counted(n))
            breaker.accepted(Self.shop, source: Self.job, now: 0)
            #expect(breaker.badDeviceToken(.production, source: Self.job, token: Self.token(n + 4), now: 0) == .counted(1))
            breaker.accepted(Self.shop, source: Self.job, now: 0)
        }
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(3), now: 0) == .tripped(count: 3, restore: []))
    }

    /// A 410 answer says the environment knows the token: the source's run ends.
    @Test func aTokenTheEnvironmentKnowsEndsTheRun() {
        var breaker = NotForTopicBreaker(threshold: 25, badDeviceTokenThreshold: 3)
        for n in 1...2 { _ = breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(n), now: 0) }
        breaker.tokenKnown(.sandbox, source: Self.sale, now: 0)
        breaker.tokenKnown(.production, source: Self.job, now: 0)
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(3), now: 0) == .tripped(count: 3, restore: []))
        breaker.tokenKnown(.production, source: Self.sale, now: 0)
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(4), now: 0) == .counted(1))
    }

    /// A tripped run of a campaign that finished is forgotten after a while without answers,
    /// so that it neither keeps the breaker counting nor blames the source's tokens for good.
    @Test func aRunWithoutAnswersForTenMinutesIsForgotten() {
        var breaker = NotForTopicBreaker(threshold: 25, badDeviceTokenThreshold: 2)
        for n in 1...2 { _ = breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(n), now: 100) }
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(3), now: 600) == .tripped(count: 3, restore: []))
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(4), now: 1_201) == .counted(1))
        _ = breaker.badDeviceToken(.sandbox, source: Self.sale, token: Self.token(5), now: 1_201)
        breaker.accepted(Self.shop, source: Self.job, now: 1_500)
        #expect(breaker.counting)
        breaker.accepted(Self.shop, source: Self.job, now: 1_802)
        #expect(!breaker.counting)
    }

    /// A BadDeviceToken prune written joins the run of its own environment only.
    @Test func aWrittenPruneJoinsTheRunOfItsEnvironment() {
        var breaker = NotForTopicBreaker(threshold: 25, badDeviceTokenThreshold: 2)
        _ = breaker.badDeviceToken(.sandbox, source: Self.sale, token: Self.token(1), now: 0)
        _ = breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(1), now: 0)
        // The production host's prune (Self.prune is production's) is written.
        #expect(breaker.written([Self.prune(1, reason: .badDeviceToken)]).isEmpty)
        #expect(breaker.badDeviceToken(.production, source: Self.sale, token: Self.token(2), now: 0)
                == .tripped(count: 2, restore: [Self.prune(1, reason: .badDeviceToken)]))
    }

    @Test func tokensAreComparedWithoutCase() {
        var breaker = NotForTopicBreaker(threshold: 2)
        let token = "abcdef" + String(repeating: "0", count: 58)
        _ = breaker.notForTopic(Self.shop, token: token.uppercased(), prunes: true)
        var written = Self.prune(0)
        written.token = token
        #expect(breaker.written([written]).isEmpty)
        #expect(breaker.notForTopic(Self.shop, token: Self.token(2), prunes: true) == .tripped(count: 2, restore: [written]))
    }
}
