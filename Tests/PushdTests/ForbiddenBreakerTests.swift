import APNs
import Testing
@testable import pushd

/// 403 Forbidden answers in a row in one environment of an app: each fails its notification
/// until a run of them with none accepted is taken as refused credentials.
@Suite struct ForbiddenBreakerTests {
    @Test func theThresholdthAnswerInARowTripsAndEachOneBeforeItCounts() {
        var breaker = ForbiddenBreaker(threshold: 3)
        #expect(breaker.forbidden(.production) == .counted(1))
        #expect(breaker.forbidden(.production) == .counted(2))
        #expect(breaker.count(.production) == 2)
        #expect(breaker.forbidden(.production) == .tripped(count: 3))
    }

    /// After a trip the environment is held; the work kept for it meets the same answer when
    /// the hold runs out, and must be held again, not failed one notification at a time.
    @Test func aTrippedRunStaysTrippedUntilANotificationIsAccepted() {
        var breaker = ForbiddenBreaker(threshold: 2)
        _ = breaker.forbidden(.sandbox)
        #expect(breaker.forbidden(.sandbox) == .tripped(count: 2))
        #expect(breaker.forbidden(.sandbox) == .tripped(count: 3))
        breaker.accepted(.sandbox)
        #expect(breaker.forbidden(.sandbox) == .counted(1))
    }

    /// A reload that replaced the credentials: the first Forbidden answer after it counts from
    /// one, in every environment, instead of holding again at once.
    @Test func aResetStartsEveryRunAfresh() {
        var breaker = ForbiddenBreaker(threshold: 2)
        _ = breaker.forbidden(.sandbox)
        #expect(breaker.forbidden(.sandbox) == .tripped(count: 2))
        _ = breaker.forbidden(.production)
        breaker.reset()
        #expect(!breaker.counting)
        #expect(breaker.forbidden(.sandbox) == .counted(1))
        #expect(breaker.forbidden(.production) == .counted(1))
        #expect(breaker.forbidden(.sandbox) == .tripped(count: 2))
    }

    @Test func anAcceptedNotificationEndsTheRunOfItsEnvironmentOnly() {
        var breaker = ForbiddenBreaker(threshold: 3)
        _ = breaker.forbidden(.production)
        _ = breaker.forbidden(.production)
        _ = breaker.forbidden(.sandbox)
        breaker.accepted(.production)
        #expect(breaker.count(.production) == 0)
        #expect(breaker.count(.sandbox) == 1)
        #expect(breaker.counting)
        #expect(breaker.forbidden(.production) == .counted(1))
        breaker.accepted(.production)
        breaker.accepted(.sandbox)
        #expect(!breaker.counting)
    }

    /// One Forbidden answer among accepted ones never trips, however many come in a day.
    @Test func forbiddenAnswersBetweenAcceptedOnesNeverTrip() {
        var breaker = ForbiddenBreaker(threshold: 2)
        for _ in 0..<1000 {
            #expect(breaker.forbidden(.production) == .counted(1))
            breaker.accepted(.production)
        }
    }

    @Test func aThresholdBelowOneIsOne() {
        var breaker = ForbiddenBreaker(threshold: 0)
        #expect(breaker.threshold == 1)
        #expect(breaker.forbidden(.production) == .tripped(count: 1))
    }
}
