import APNs
import Posix
import Foundation
import Testing

@Suite struct RetryPolicyTests {
    let policy = RetryPolicy(baseDelay: 1, maxDelay: 60, throttledBaseDelay: 10, maxAttempts: 5, maxAttemptsForUnknownReasons: 2)
    let now = Timestamp(timeIntervalSince1970: 1_700_000_000)

    /// Always the top of the range: shows the exponential ceiling.
    struct MaxGenerator: RandomNumberGenerator {
        mutating func next() -> UInt64 { .max }
    }

    struct ZeroGenerator: RandomNumberGenerator {
        mutating func next() -> UInt64 { 0 }
    }

    @Test(arguments: [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0)])
    func ceilingDoublesPerAttempt(attempt: Int, ceiling: Double) {
        var top = MaxGenerator()
        let delay = policy.delayBeforeRetry(attempt: attempt, reason: .internalServerError, random: &top)
        #expect(abs(delay - ceiling) < 1e-9)
        var bottom = ZeroGenerator()
        #expect(policy.delayBeforeRetry(attempt: attempt, reason: .internalServerError, random: &bottom) == 0)
    }

    @Test func delayIsCapped() {
        var top = MaxGenerator()
        let generous = RetryPolicy(maxDelay: 60, maxAttempts: 100)
        #expect(abs(generous.delayBeforeRetry(attempt: 40, reason: nil, random: &top) - 60) < 1e-9)
        #expect(abs(generous.delayBeforeRetry(attempt: Int.max, reason: nil, random: &top) - 60) < 1e-9)
    }

    @Test func fullJitterSpreadsOverTheWholeWindowDeterministically() {
        var a = SeededGenerator(seed: 42)
        var b = SeededGenerator(seed: 42)
        let first = (0..<200).map { _ in policy.delayBeforeRetry(attempt: 4, reason: nil, random: &a) }
        let second = (0..<200).map { _ in policy.delayBeforeRetry(attempt: 4, reason: nil, random: &b) }
        #expect(first == second)
        #expect(first.allSatisfy { $0 >= 0 && $0 <= 8 })
        #expect(first.min()! < 1 && first.max()! > 7)
    }

    @Test func throttlingReasonsStartFromALongerBase() {
        var top = MaxGenerator()
        #expect(abs(policy.delayBeforeRetry(attempt: 1, reason: .tooManyRequests, random: &top) - 10) < 1e-9)
        #expect(abs(policy.delayBeforeRetry(attempt: 2, reason: .tooManyProviderTokenUpdates, random: &top) - 20) < 1e-9)
    }

    @Test func givesUpAfterMaxAttempts() {
        var rng = SeededGenerator(seed: 1)
        guard case .retry = policy.decide(attempt: 4, reason: .internalServerError, now: now, expiration: nil, random: &rng) else {
            Issue.record("attempt 4 of 5 should retry"); return
        }
        guard case .giveUp(let why) = policy.decide(attempt: 5, reason: .internalServerError, now: now, expiration: nil, random: &rng) else {
            Issue.record("attempt 5 of 5 should give up"); return
        }
        #expect(why.contains("5 attempts") && why.contains("InternalServerError"))
    }

    @Test func unknownReasonsGetTheSmallerBudget() {
        var rng = SeededGenerator(seed: 1)
        #expect(policy.decide(attempt: 2, reason: "NewReason", now: now, expiration: nil, random: &rng) != policy.decide(attempt: 2, reason: .internalServerError, now: now, expiration: nil, random: &rng))
        guard case .giveUp = policy.decide(attempt: 2, reason: "NewReason", now: now, expiration: nil, random: &rng) else {
            Issue.record("unknown reason retried past its budget"); return
        }
    }

    /// An answer whose reason cannot be read (a 400 with an empty or garbled body) tells no
    /// more than an unknown reason: it gets the same small budget, not the eight attempts of
    /// a documented one.
    @Test func anAnswerWithoutAReadableReasonGetsTheBudgetOfAnUnknownOne() {
        var rng = ZeroGenerator()
        guard case .retry = policy.decide(attempt: 1, reason: nil, now: now, expiration: nil, random: &rng) else {
            Issue.record("an answer without a reason was not retried within its budget"); return
        }
        guard case .giveUp(let why) = policy.decide(attempt: policy.maxAttemptsForUnknownReasons, reason: nil, now: now,
                                                    expiration: nil, random: &rng) else {
            Issue.record("an answer without a reason was retried past the budget of an unknown reason"); return
        }
        #expect(why.contains("no readable reason"))
    }

    @Test func expirationInThePastMeansNoRetry() {
        var rng = SeededGenerator(seed: 1)
        guard case .giveUp(let why) = policy.decide(attempt: 1, reason: nil, now: now, expiration: 1_699_999_999, random: &rng) else {
            Issue.record("retried an expired notification"); return
        }
        #expect(why.contains("expires"))
    }

    @Test func retryLandingAfterExpirationIsNotScheduled() {
        var top = MaxGenerator()
        guard case .giveUp = policy.decide(attempt: 4, reason: .internalServerError, now: now, expiration: 1_700_000_005, random: &top) else {
            Issue.record("8 s delay scheduled past an expiration 5 s away"); return
        }
        var bottom = ZeroGenerator()
        guard case .retry(let after, let at) = policy.decide(attempt: 4, reason: .internalServerError, now: now, expiration: 1_700_000_005, random: &bottom) else {
            Issue.record("an immediate retry before expiration should be allowed"); return
        }
        #expect(after == 0 && at == now)
    }

    @Test func expirationZeroRetriesOnlyShortlyAfterTheFirstAttempt() {
        var top = MaxGenerator()
        guard case .retry = policy.decide(attempt: 1, reason: nil, now: now, expiration: 0, firstAttemptAt: now, random: &top) else {
            Issue.record("expiration 0 should allow a prompt retry"); return
        }
        guard case .giveUp = policy.decide(attempt: 1, reason: nil, now: now.addingTimeInterval(29.5), expiration: 0, firstAttemptAt: now, random: &top) else {
            Issue.record("expiration 0 retried outside its window"); return
        }
    }
}
