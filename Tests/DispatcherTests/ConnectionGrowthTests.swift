@testable import Dispatcher
import Testing

/// `ConnectionPolicy`'s growth: more connections while requests wait for a stream, never above
/// the ceiling, and back down as libcurl lets idle ones go. Plain values, no sockets.
@Suite struct ConnectionGrowthTests {
    private static let ms: UInt64 = 1_000_000
    /// One connection kept, up to three, 100 streams each, after 250 ms of waiting.
    private let growth = ConnectionGrowth(base: 1, ceiling: 3, streamsPerConnection: 100, delayNanoseconds: 250 * ms)

    /// A policy whose one connection is open and has answered.
    private func warm() -> ConnectionPolicy {
        var policy = ConnectionPolicy(backoff: ReconnectBackoff(initialMilliseconds: 100, maxMilliseconds: 1000, jitter: 0),
                                      growth: growth)
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        return policy
    }

    /// Opens the connection libcurl makes after a raised limit (its id one above the newest
    /// that answered) and lets it answer.
    private func openAndAnswer(_ policy: inout ConnectionPolicy) {
        #expect(policy.handle(.connectionOpened) == .none)
        #expect(policy.handle(.answered(connection: policy.newestAnswered + 1)) == .none)
    }

    @Test func requestsWaitingForAStreamLongerThanTheDelayRaiseTheLimitByOne() {
        var policy = warm()
        #expect(policy.handle(.beforeWait(now: 0, waiting: true, idle: 0)) == .none)
        #expect(policy.handle(.beforeWait(now: 249 * Self.ms, waiting: true, idle: 249 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 250 * Self.ms, waiting: true, idle: 250 * Self.ms)) == .setConnectionLimit(2))
        #expect(policy.admissionLimit(configured: 100, now: 250 * Self.ms) == 200 - 100 + 1)
        openAndAnswer(&policy)
        #expect(policy.admissionLimit(configured: 100, now: 250 * Self.ms) == 200)
    }

    @Test func untilTheNewConnectionAnswersOnlyOneRequestMoreThanTheOthersCarryIsLetIn() {
        var policy = warm()
        _ = policy.handle(.beforeWait(now: 0, waiting: true, idle: 0))
        #expect(policy.handle(.beforeWait(now: 300 * Self.ms, waiting: true, idle: 300 * Self.ms)) == .setConnectionLimit(2))
        // The requests let in at once would all wait in libcurl for the new connection and go
        // on it before the server's SETTINGS (one stream for a token connection) are read.
        #expect(policy.admissionLimit(configured: 100, now: 300 * Self.ms) == 101)
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        // Answers on the old connection say nothing of the new one's streams.
        #expect(policy.admissionLimit(configured: 100, now: 300 * Self.ms) == 101)
        _ = policy.handle(.answered(connection: 1))
        #expect(policy.admissionLimit(configured: 100, now: 300 * Self.ms) == 200)
    }

    @Test func theConnectionReplacingARetiredOneAlsoStartsWithOneRequest() {
        var policy = warm()
        #expect(policy.handle(.retireRequested(connection: 0, socket: 7)) == .holdAdmissions)
        #expect(policy.handle(.drained(connection: 0)) == .closeRetired(socket: 7))
        #expect(policy.admissionLimit(configured: 100, now: 0) == 1)
        _ = policy.handle(.answered(connection: 1))
        #expect(policy.admissionLimit(configured: 100, now: 0) == 100)
    }

    @Test func aLoopBusyAllAlongDoesNotGrowForItIsLimitedByCPUNotStreams() {
        var policy = warm()
        // Requests wait for a stream, but the loop never sleeps: it idled 40 ms of 250 (16 %).
        #expect(policy.handle(.beforeWait(now: 0, waiting: true, idle: 0)) == .none)
        #expect(policy.handle(.beforeWait(now: 250 * Self.ms, waiting: true, idle: 40 * Self.ms)) == .none)
        #expect(policy.connectionLimit == 1)
        // The next 250 ms it waits for answers half the time: streams are the limit now.
        #expect(policy.handle(.beforeWait(now: 500 * Self.ms, waiting: true, idle: 165 * Self.ms)) == .setConnectionLimit(2))
    }

    @Test func aBreakInTheWaitingStartsTheDelayAgain() {
        var policy = warm()
        _ = policy.handle(.beforeWait(now: 0, waiting: true, idle: 0))
        #expect(policy.handle(.beforeWait(now: 200 * Self.ms, waiting: false, idle: 200 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 300 * Self.ms, waiting: true, idle: 300 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 500 * Self.ms, waiting: true, idle: 500 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 550 * Self.ms, waiting: true, idle: 550 * Self.ms)) == .setConnectionLimit(2))
    }

    @Test func noLoopEverHasMoreThanTheCeiling() {
        var policy = warm()
        var now: UInt64 = 0
        var limits: [Int] = []
        for _ in 0..<20 {
            if case .setConnectionLimit(let limit) = policy.handle(.beforeWait(now: now, waiting: true, idle: now)) {
                limits.append(limit)
                openAndAnswer(&policy)
            }
            now += 300 * Self.ms
        }
        #expect(limits == [2, 3])
        #expect(policy.connectionLimit == 3)
        #expect(policy.admissionLimit(configured: 100, now: now) == 300)
    }

    @Test func theNextConnectionWaitsUntilTheNewOneIsOpenAndHasAnswered() {
        var policy = warm()
        _ = policy.handle(.beforeWait(now: 0, waiting: true, idle: 0))
        #expect(policy.handle(.beforeWait(now: 300 * Self.ms, waiting: true, idle: 300 * Self.ms)) == .setConnectionLimit(2))
        // libcurl has not opened the second connection yet.
        #expect(policy.handle(.beforeWait(now: 600 * Self.ms, waiting: true, idle: 600 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 900 * Self.ms, waiting: true, idle: 900 * Self.ms)) == .none)
        _ = policy.handle(.connectionOpened)
        // Open, but its SETTINGS are not known yet: one request at a time, no growth.
        #expect(policy.admissionLimit(configured: 100, now: 900 * Self.ms) == 1)
        #expect(policy.handle(.beforeWait(now: 1200 * Self.ms, waiting: true, idle: 1200 * Self.ms)) == .none)
        _ = policy.handle(.answered(connection: 1))
        #expect(policy.handle(.beforeWait(now: 1300 * Self.ms, waiting: true, idle: 1300 * Self.ms)) == .none)
        #expect(policy.handle(.beforeWait(now: 1550 * Self.ms, waiting: true, idle: 1550 * Self.ms)) == .setConnectionLimit(3))
    }

    @Test func noGrowthWhileAConnectionIsRetiredOrConnectsFail() {
        var policy = warm()
        _ = policy.handle(.retireRequested(connection: 4, socket: 7))
        _ = policy.handle(.beforeWait(now: 0, waiting: true, idle: 0))
        #expect(policy.handle(.beforeWait(now: 500 * Self.ms, waiting: true, idle: 500 * Self.ms)) == .none)
        _ = policy.handle(.drained(connection: 4))
        _ = policy.handle(.connectFailed(now: 500 * Self.ms, unitRandom: 0))
        _ = policy.handle(.beforeWait(now: 700 * Self.ms, waiting: true, idle: 700 * Self.ms))
        #expect(policy.handle(.beforeWait(now: 1500 * Self.ms, waiting: true, idle: 1500 * Self.ms)) == .none)
        #expect(policy.connectionLimit == 1)
    }

    @Test func closedConnectionsLowerTheLimitToWhatIsOpenButNeverBelowTheBase() {
        var policy = warm()
        for step in 0..<2 {
            let start = UInt64(step) * 1000 * Self.ms
            _ = policy.handle(.beforeWait(now: start, waiting: true, idle: start))
            _ = policy.handle(.beforeWait(now: start + 300 * Self.ms, waiting: true, idle: start + 300 * Self.ms))
            openAndAnswer(&policy)
        }
        #expect(policy.connectionLimit == 3)
        // libcurl closes the grown connections once they idle past idleCloseSeconds.
        #expect(policy.handle(.connectionClosed(socket: 10)) == .setConnectionLimit(2))
        #expect(policy.admissionLimit(configured: 100, now: 0) == 200)
        #expect(policy.handle(.connectionClosed(socket: 11)) == .setConnectionLimit(1))
        #expect(policy.handle(.connectionClosed(socket: 12)) == .none)
        #expect(policy.connectionLimit == 1)
    }

    @Test func withoutGrowthConfiguredTheLimitNeverMoves() {
        var policy = ConnectionPolicy(backoff: ReconnectBackoff())
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        for second in 0..<10 {
            #expect(policy.handle(.beforeWait(now: UInt64(second) * 1000 * Self.ms, waiting: true, idle: UInt64(second) * 1000 * Self.ms)) == .none)
        }
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
    }

    // MARK: - Judged growth: a connection is kept only when the answer rate rose

    /// As `growth`, with each added connection judged over a second of answers, first with a
    /// quarter of its streams.
    private let judged = ConnectionGrowth(base: 1, ceiling: 3, streamsPerConnection: 100, delayNanoseconds: 250 * ms,
                                          judgedOverNanoseconds: 1000 * ms, trialFirstStep: 25)

    private func warmJudged() -> ConnectionPolicy {
        var policy = ConnectionPolicy(backoff: ReconnectBackoff(initialMilliseconds: 100, maxMilliseconds: 1000, jitter: 0),
                                      growth: judged)
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        return policy
    }

    /// `count` answers on `connection` spread over [from, to), each with a loop pass before it
    /// that finds requests waiting; returns what those passes asked for besides `.none`.
    @discardableResult
    private func answer(_ policy: inout ConnectionPolicy, _ count: Int, on connection: Int64 = 0,
                        from: UInt64, to: UInt64) -> [ConnectionPolicy.Action] {
        var actions: [ConnectionPolicy.Action] = []
        for index in 0..<count {
            let now = from + (to - from) * UInt64(index) / UInt64(count)
            let action = policy.handle(.beforeWait(now: now, waiting: true, idle: now))
            if action != .none { actions.append(action) }
            _ = policy.handle(.answered(connection: connection, now: now))
        }
        return actions
    }

    /// Answers `rate` a second on `connection`, a loop pass finding requests waiting before each,
    /// until the policy raises the limit (within 5 s); the time it did.
    private func grow(_ policy: inout ConnectionPolicy, rate: Int, on connection: Int64 = 0, from start: UInt64) -> UInt64? {
        var now = start
        for _ in 0..<(rate * 5) {
            if case .growthStarted = policy.handle(.beforeWait(now: now, waiting: true, idle: now)) { return now }
            _ = policy.handle(.answered(connection: connection, now: now))
            now += 1000 * Self.ms / UInt64(rate)
        }
        return nil
    }

    @Test func judgedGrowthWaitsForAWholeWindowOfRateWhileRequestsWait() {
        var policy = warmJudged()
        // 250 ms of waiting would grow an unjudged loop; a judged one has no rate to compare yet.
        #expect(answer(&policy, 50, from: 0, to: 500 * Self.ms).isEmpty)
        #expect(policy.connectionLimit == 1)
        // A break in the waiting spoils the window it falls in.
        #expect(policy.handle(.beforeWait(now: 600 * Self.ms, waiting: false, idle: 600 * Self.ms)) == .none)
        #expect(answer(&policy, 50, from: 600 * Self.ms, to: 1100 * Self.ms).isEmpty)
        #expect(policy.waitingRate == nil)
        #expect(answer(&policy, 100, from: 1100 * Self.ms, to: 2100 * Self.ms).isEmpty)
        #expect(policy.waitingRate == 100)
        #expect(policy.handle(.beforeWait(now: 2350 * Self.ms, waiting: true, idle: 2350 * Self.ms)) == .growthStarted(connectionLimit: 2))
        #expect(policy.trial == ConnectionPolicy.GrowthTrial(baseline: 100, streamsBefore: 100))
    }

    /// After a growth at `grewAt`: the new connection opens and answers, then `rate` answers a
    /// second on it for the 250 ms the streams settle and the 1 s measured, with a quarter of its
    /// streams and, when that raised the rate enough, again with all of them (from 1,250 ms on);
    /// what the loop pass at the end of the last measurement asked for.
    private func judge(_ policy: inout ConnectionPolicy, rate: Int, grewAt: UInt64) -> ConnectionPolicy.Action {
        openAndAnswer(&policy)
        let first = measureTrialStep(&policy, rate: rate, from: grewAt)
        guard first == .none, policy.trial?.carriesAll == true else { return first }
        return measureTrialStep(&policy, rate: rate, from: grewAt + 1250 * Self.ms)
    }

    /// One step of a trial from `from`: 250 ms for the streams to settle, then `rate` answers a
    /// second for 1 s; what the loop pass at the end asked for.
    private func measureTrialStep(_ policy: inout ConnectionPolicy, rate: Int, from: UInt64) -> ConnectionPolicy.Action {
        let connection = policy.newestAnswered
        #expect(answer(&policy, rate / 4, on: connection, from: from, to: from + 250 * Self.ms).isEmpty)
        #expect(answer(&policy, rate, on: connection, from: from + 250 * Self.ms, to: from + 1250 * Self.ms).isEmpty)
        #expect(policy.trial?.measuringSince == from + 250 * Self.ms)
        return policy.handle(.beforeWait(now: from + 1250 * Self.ms, waiting: true, idle: from + 1250 * Self.ms))
    }

    @Test func aConnectionThatRaisesTheRateIsKeptAndTheNextOneMayFollow() throws {
        var policy = warmJudged()
        let grewAt = try #require(grow(&policy, rate: 100, from: 0))
        #expect(policy.connectionLimit == 2)
        // Answers before the new connection answered are not the new rate.
        #expect(answer(&policy, 40, from: grewAt, to: grewAt + 400 * Self.ms).isEmpty)
        #expect(policy.trial?.settlesAt == nil)
        #expect(policy.trial?.measuringSince == nil)
        // 200 answers a second against 100, with a quarter of its streams and with all of them: the
        // second connection's streams doubled the rate.
        let measured = grewAt + 400 * Self.ms
        #expect(judge(&policy, rate: 200, grewAt: measured) == .growthKept(connections: 2))
        #expect(policy.lastVerdict == ConnectionPolicy.GrowthVerdict(kept: true, connections: 2, rateBefore: 100, rateAfter: 200,
                                                                      rateRequired: 150, holdOffNanoseconds: 0))
        #expect(policy.trial == nil)
        #expect(policy.connectionLimit == 2)
        #expect(policy.waitingRate == 200)
        #expect(policy.admissionLimit(configured: 100, now: measured + 2500 * Self.ms) == 200)
        // The next one is judged against the rate of two.
        let next = measured + 2750 * Self.ms
        #expect(policy.handle(.beforeWait(now: next, waiting: true, idle: next)) == .growthStarted(connectionLimit: 3))
        #expect(policy.trial == ConnectionPolicy.GrowthTrial(baseline: 200, streamsBefore: 200, carriesAll: true))
    }

    /// Right after a kept connection, while requests have waited for a stream ever since, the
    /// streams were the limit one connection ago: the next one carries all its streams at once
    /// and is judged in one step. The quarter step cost each growth of a far drain 1.25 s at the
    /// lower rate (docs/dispatcher-measurements.md, "The last connection"). After a break in the
    /// waiting, the next growth starts with a quarter again.
    @Test func aConnectionAddedRightAfterAKeptOneCarriesAllItsStreamsAndIsJudgedInOneStep() throws {
        var policy = warmJudged()
        var grewAt = try #require(grow(&policy, rate: 100, from: 0))
        #expect(judge(&policy, rate: 200, grewAt: grewAt) == .growthKept(connections: 2))
        grewAt = try #require(grow(&policy, rate: 200, on: 1, from: grewAt + 2500 * Self.ms))
        #expect(policy.connectionLimit == 3)
        #expect(policy.lastStart?.streamsOnTrial == 100)
        openAndAnswer(&policy)
        #expect(policy.trial?.carriesAll == true)
        #expect(policy.admissionLimit(configured: 100, now: grewAt) == 300)
        #expect(policy.streamCapacity(configured: 100) == 300)
        // One step: 300 answers a second against 200, +25 % needed for a third connection.
        #expect(measureTrialStep(&policy, rate: 300, from: grewAt) == .growthKept(connections: 3))
        #expect(policy.lastVerdict?.rateRequired == 250)

        // Kept, then a pass that finds no request waiting: the growth after it is a first one
        // again, a quarter of its streams.
        var other = warmJudged()
        var at = try #require(grow(&other, rate: 100, from: 0))
        #expect(judge(&other, rate: 200, grewAt: at) == .growthKept(connections: 2))
        at += 2500 * Self.ms
        #expect(other.handle(.beforeWait(now: at, waiting: false, idle: at)) == .none)
        at = try #require(grow(&other, rate: 200, on: 1, from: at + 10 * Self.ms))
        #expect(other.connectionLimit == 3)
        #expect(other.lastStart?.streamsOnTrial == 25)
        openAndAnswer(&other)
        #expect(other.trial?.carriesAll == false)
        #expect(other.admissionLimit(configured: 100, now: at) == 225)
    }

    @Test func aConnectionThatDoesNotRaiseTheRateIsUndoneAndGrowthHoldsOffLongerEachTime() throws {
        var policy = warmJudged()
        var start: UInt64 = 0
        for holdOff: UInt64 in [30_000, 60_000, 120_000] {
            let grewAt = try #require(grow(&policy, rate: 100, from: start))
            // The CPU (or the server) sets the pace: the same 100 answers a second with two connections.
            #expect(judge(&policy, rate: 100, grewAt: grewAt) == .undoGrowth(connectionLimit: 1))
            #expect(policy.lastVerdict == ConnectionPolicy.GrowthVerdict(kept: false, connections: 1, rateBefore: 100, rateAfter: 100,
                                                                          rateRequired: 112.5, holdOffNanoseconds: holdOff * Self.ms))
            let verdictAt = grewAt + 1250 * Self.ms
            #expect(policy.connectionLimit == 1)
            #expect(policy.admissionLimit(configured: 100, now: verdictAt) == 100)
            #expect(policy.growthHeldUntil == verdictAt + holdOff * Self.ms)
            // Requests waiting all through the hold-off do not grow the loop.
            var now = verdictAt
            while now < verdictAt + holdOff * Self.ms {
                #expect(answer(&policy, 100, from: now, to: now + 1000 * Self.ms).isEmpty)
                now += 1000 * Self.ms
            }
            start = now
        }
    }

    /// A connection on trial carries a quarter of its streams at first: a trial that does not
    /// raise the rate (on loopback, where the CPU sets the pace) costs the memory of 25 streams
    /// here, of 125 at pushd's 500 (about 1.5 MB instead of 6.3 MB at a drain's peak). Only when
    /// the quarter raised the rate does it carry all its streams, judged again on them.
    @Test func aConnectionOnTrialCarriesAQuarterOfItsStreamsUntilTheyRaisedTheRate() throws {
        // Answers a second with a quarter of the streams, with all of them, and what was left.
        for (first, second, kept) in [(100, 0, false), (120, 120, false), (200, 200, true)] {
            var policy = warmJudged()
            let grewAt = try #require(grow(&policy, rate: 100, from: 0))
            // Until the new connection answers: one request beyond the first connection's streams.
            #expect(policy.admissionLimit(configured: 100, now: grewAt) == 101)
            openAndAnswer(&policy)
            #expect(policy.admissionLimit(configured: 100, now: grewAt) == 125)
            #expect(policy.streamCapacity(configured: 100) == 125)
            let firstStep = measureTrialStep(&policy, rate: first, from: grewAt)
            var end = grewAt + 1250 * Self.ms
            if second > 0 {
                // +12.5 % was needed of the quarter (half of the +25 % its streams add).
                #expect(firstStep == .none)
                #expect(policy.trial?.carriesAll == true)
                #expect(policy.admissionLimit(configured: 100, now: end) == 200)
                #expect(policy.streamCapacity(configured: 100) == 200)
                let secondStep = measureTrialStep(&policy, rate: second, from: end)
                end += 1250 * Self.ms
                #expect(secondStep == (kept ? .growthKept(connections: 2) : .undoGrowth(connectionLimit: 1)))
                #expect(policy.lastVerdict?.rateRequired == 150)
            } else {
                #expect(firstStep == .undoGrowth(connectionLimit: 1))
                #expect(policy.lastVerdict?.rateRequired == 112.5)
            }
            #expect(policy.trial == nil)
            #expect(policy.admissionLimit(configured: 100, now: end) == (kept ? 200 : 100))
            #expect(policy.streamCapacity(configured: 100) == (kept ? 200 : 100))
        }
    }

    @Test func theGainRequiredShrinksWithTheStreamsAlreadyOpen() throws {
        // The third connection adds half the streams of two: kept from +25 % (half of +50 %).
        for (after, kept) in [(249, false), (251, true)] {
            var policy = warmJudged()
            var grewAt = try #require(grow(&policy, rate: 100, from: 0))
            #expect(judge(&policy, rate: 200, grewAt: grewAt) == .growthKept(connections: 2))
            #expect(policy.connectionLimit == 2)
            grewAt = try #require(grow(&policy, rate: 200, on: 1, from: grewAt + 2500 * Self.ms))
            #expect(policy.connectionLimit == 3)
            #expect(judge(&policy, rate: after, grewAt: grewAt) == (kept ? .growthKept(connections: 3) : .undoGrowth(connectionLimit: 2)))
            #expect(policy.lastVerdict?.rateRequired == 250)
            #expect(policy.connectionLimit == (kept ? 3 : 2))
        }
    }

    @Test func theNextGrowthAfterAnUndoneOneUsesTheConnectionStillOpen() throws {
        var policy = warmJudged()
        let grewAt = try #require(grow(&policy, rate: 100, from: 0))
        #expect(judge(&policy, rate: 100, grewAt: grewAt) == .undoGrowth(connectionLimit: 1))
        #expect(policy.openConnections == 2)
        var now = grewAt + 1250 * Self.ms
        while now < policy.growthHeldUntil {
            #expect(answer(&policy, 100, from: now, to: now + 1000 * Self.ms).isEmpty)
            now += 1000 * Self.ms
        }
        let again = try #require(grow(&policy, rate: 100, from: now))
        // libcurl opens no connection for it: the one given up takes its trial streams at once.
        #expect(policy.opensAbove == nil)
        #expect(policy.admissionLimit(configured: 100, now: again) == 125)
        #expect(measureTrialStep(&policy, rate: 200, from: again) == .none)
        #expect(policy.trial?.carriesAll == true)
        #expect(measureTrialStep(&policy, rate: 200, from: again + 1250 * Self.ms) == .growthKept(connections: 2))
        #expect(policy.connectionLimit == 2)
        #expect(policy.trial == nil)
    }

    @Test func aFailureDuringTheTrialStartsItsMeasurementAgain() throws {
        var policy = warmJudged()
        let grewAt = try #require(grow(&policy, rate: 100, from: 0))
        openAndAnswer(&policy)
        #expect(answer(&policy, 50, on: 1, from: grewAt, to: grewAt + 500 * Self.ms).isEmpty)
        #expect(policy.trial?.measuringSince == grewAt + 250 * Self.ms)
        _ = policy.handle(.connectFailed(now: grewAt + 500 * Self.ms, unitRandom: 0))
        #expect(policy.handle(.beforeWait(now: grewAt + 1500 * Self.ms, waiting: true, idle: grewAt + 1500 * Self.ms)) == .none)
        #expect(policy.trial?.measuringSince == nil)
        #expect(policy.trial?.settlesAt == nil)
        #expect(policy.connectionLimit == 2)
    }

    @Test func aClosedConnectionEndsTheTrialAndTheRateMeasured() throws {
        var policy = warmJudged()
        _ = try #require(grow(&policy, rate: 100, from: 0))
        openAndAnswer(&policy)
        #expect(policy.handle(.connectionClosed(socket: 11)) == .growthAbandoned(connectionLimit: 1))
        #expect(policy.trial == nil)
        #expect(policy.waitingRate == nil)
        #expect(policy.lastVerdict?.abandoned == .connectionClosed)
        #expect(policy.lastVerdict?.holdOffNanoseconds == 0)
    }

    /// The hold-offs of loops that give up together are spread, ×0.75 … ×1.25 of 30 s doubling,
    /// by a random source the policy is given: fixed here, so the figures are exact.
    @Test func aHoldOffIsSpreadByTheRandomSourceAroundItsDoublingValue() throws {
        for (unit, holdOffs) in [(0.0, [22_500, 45_000, 90_000]), (0.5, [30_000, 60_000, 120_000]), (0.75, [33_750, 67_500, 135_000])] {
            var policy = ConnectionPolicy(backoff: ReconnectBackoff(initialMilliseconds: 100, maxMilliseconds: 1000, jitter: 0),
                                          growth: judged, holdOffRandom: .fixed(unit))
            _ = policy.handle(.connectionOpened)
            _ = policy.handle(.answered(connection: 0))
            var start: UInt64 = 0
            for holdOff: UInt64 in holdOffs.map(UInt64.init) {
                let grewAt = try #require(grow(&policy, rate: 100, from: start))
                #expect(judge(&policy, rate: 100, grewAt: grewAt) == .undoGrowth(connectionLimit: 1))
                #expect(policy.lastVerdict?.holdOffNanoseconds == holdOff * Self.ms)
                let verdictAt = grewAt + 1250 * Self.ms
                #expect(policy.growthHeldUntil == verdictAt + holdOff * Self.ms)
                // 100 answers a second, requests waiting all through the hold-off: no growth.
                var now = verdictAt
                while now < policy.growthHeldUntil {
                    let step = min(1000 * Self.ms, policy.growthHeldUntil - now)
                    #expect(answer(&policy, Int(step / (10 * Self.ms)), from: now, to: now + step).isEmpty)
                    now += step
                }
                start = now
            }
        }
        // The cap is spread too: 8 min × 1.25 at most.
        #expect(ConnectionGrowth.spread(ConnectionGrowth.maxHoldOffNanoseconds, unitRandom: 0.999_999) <= 600_000 * Self.ms)
        #expect(ConnectionGrowth.spread(30_000 * Self.ms, unitRandom: 0) == 22_500 * Self.ms)
    }

    @Test func loopsSeededApartHoldOffForDifferentTimesWithinTheSpread() throws {
        var holdOffs: Set<UInt64> = []
        for seed: UInt64 in 1...8 {
            var policy = ConnectionPolicy(backoff: ReconnectBackoff(initialMilliseconds: 100, maxMilliseconds: 1000, jitter: 0),
                                          growth: judged, holdOffRandom: UnitRandom(seed: seed))
            var again = policy
            _ = policy.handle(.connectionOpened)
            _ = policy.handle(.answered(connection: 0))
            let grewAt = try #require(grow(&policy, rate: 100, from: 0))
            #expect(judge(&policy, rate: 100, grewAt: grewAt) == .undoGrowth(connectionLimit: 1))
            let holdOff = try #require(policy.lastVerdict?.holdOffNanoseconds)
            #expect((22_500 * Self.ms...37_500 * Self.ms).contains(holdOff))
            holdOffs.insert(holdOff)
            // The same seed, the same hold-off: the policy stays deterministic.
            _ = again.handle(.connectionOpened)
            _ = again.handle(.answered(connection: 0))
            let grewAgainAt = try #require(grow(&again, rate: 100, from: 0))
            _ = judge(&again, rate: 100, grewAt: grewAgainAt)
            #expect(again.lastVerdict?.holdOffNanoseconds == holdOff)
        }
        #expect(holdOffs.count == 8)
    }

    // MARK: - A trial's start and end: every start has exactly one verdict

    @Test func aTrialsStartSaysWhatTriggeredIt() throws {
        var policy = warmJudged()
        let grewAt = try #require(grow(&policy, rate: 100, from: 0))
        // The wait began with the first pass after the waited window (1 s); growth 250 ms later.
        #expect(grewAt == 1250 * Self.ms)
        #expect(policy.lastStart == GrowthJudge.GrowthStart(connectionsBefore: 1, connections: 2, rateBefore: 100,
                                                            waitedNanoseconds: 250 * Self.ms, streamsOnTrial: 25))
    }

    @Test func aTrialWhoseLoopRunsOutOfWorkIsAbandonedWithoutAHoldOff() throws {
        var policy = warmJudged()
        let grewAt = try #require(grow(&policy, rate: 100, from: 0))
        openAndAnswer(&policy)
        #expect(answer(&policy, 50, on: 1, from: grewAt, to: grewAt + 500 * Self.ms).isEmpty)
        let idleFrom = grewAt + 500 * Self.ms
        #expect(policy.wakeDeadline() == nil)
        #expect(policy.handle(.beforeWait(now: idleFrom, waiting: false, idle: idleFrom, hasWork: false)) == .none)
        // The loop must wake by the end of the growth delay: nothing else wakes an idle loop.
        #expect(policy.wakeDeadline() == idleFrom + 250 * Self.ms)
        #expect(policy.handle(.beforeWait(now: idleFrom + 249 * Self.ms, waiting: false, idle: idleFrom, hasWork: false)) == .none)
        #expect(policy.handle(.beforeWait(now: idleFrom + 250 * Self.ms, waiting: false, idle: idleFrom, hasWork: false))
            == .growthAbandoned(connectionLimit: 1))
        let verdict = try #require(policy.lastVerdict)
        #expect(verdict.abandoned == .workRanOut && !verdict.kept && verdict.connections == 1)
        // Measured from 250 ms after the first answer: 25 answers in 500 ms.
        #expect(verdict.rateBefore == 100 && verdict.rateAfter == 50 && verdict.rateRequired == 112.5)
        #expect(verdict.holdOffNanoseconds == 0)
        #expect(policy.trial == nil && policy.wakeDeadline() == nil)
        #expect(policy.connectionLimit == 1)
        #expect(policy.admissionLimit(configured: 100, now: idleFrom + 250 * Self.ms) == 100)
        #expect(policy.growthHeldUntil == 0)
        // Work again: the next trial needs a new waited window, and the next connection that does
        // not raise the rate holds growth off for the first 30 s, not 60.
        let again = try #require(grow(&policy, rate: 100, on: 1, from: idleFrom + 1000 * Self.ms))
        #expect(again >= idleFrom + 2250 * Self.ms)
        #expect(judge(&policy, rate: 100, grewAt: again) == .undoGrowth(connectionLimit: 1))
        #expect(policy.lastVerdict?.holdOffNanoseconds == 30_000 * Self.ms)
    }

    @Test func aShortBreakInTheWorkDoesNotEndTheTrial() throws {
        var policy = warmJudged()
        let grewAt = try #require(grow(&policy, rate: 100, from: 0))
        openAndAnswer(&policy)
        // The next chunk comes 200 ms after the last answer: less than the growth delay.
        #expect(policy.handle(.beforeWait(now: grewAt, waiting: false, idle: grewAt, hasWork: false)) == .none)
        #expect(policy.handle(.beforeWait(now: grewAt + 200 * Self.ms, waiting: true, idle: grewAt, hasWork: true)) == .none)
        #expect(policy.wakeDeadline() == nil)
        #expect(policy.handle(.beforeWait(now: grewAt + 300 * Self.ms, waiting: false, idle: grewAt, hasWork: false)) == .none)
        #expect(policy.trial != nil)
        #expect(policy.connectionLimit == 2)
    }

    @Test func aTrialOpenWhenTheLoopStopsIsAbandonedAndNoneIsOtherwise() throws {
        var policy = warmJudged()
        #expect(policy.handle(.stopped(now: 0)) == .none)
        let grewAt = try #require(grow(&policy, rate: 100, from: 0))
        #expect(policy.handle(.stopped(now: grewAt + 10 * Self.ms)) == .growthAbandoned(connectionLimit: 2))
        #expect(policy.lastVerdict?.abandoned == .stopped)
        #expect(policy.lastVerdict?.connections == 2)
        #expect(policy.lastVerdict?.rateAfter == 0)
        #expect(policy.handle(.stopped(now: grewAt + 20 * Self.ms)) == .none)
    }

    /// Random loop lives (answers, breaks in the work, closes, failures, kept and given-up
    /// trials), each ended by a stop: every `growthStarted` is matched by exactly one of
    /// `growthKept`, `undoGrowth` and `growthAbandoned`, and no verdict comes without a start.
    @Test func everyTrialStartedEndsWithExactlyOneVerdict() {
        var random = UnitRandom(seed: 42)
        var ended: [ConnectionGrowthAbandonment?] = []
        for _ in 0..<200 {
            var policy = warmJudged()
            var open = 0, now: UInt64 = 0, connection: Int64 = 0
            func note(_ action: ConnectionPolicy.Action) {
                switch action {
                case .growthStarted:
                    #expect(open == 0, "a second trial started while one was open")
                    open += 1
                case .growthKept, .undoGrowth, .growthAbandoned:
                    #expect(open == 1, "a verdict without a trial: \(action)")
                    open -= 1
                    if case .growthAbandoned = action { ended.append(policy.lastVerdict?.abandoned) } else { ended.append(nil) }
                default: break
                }
            }
            for _ in 0..<3000 {
                now += UInt64(random.next() * 20) * Self.ms
                let roll = Int(random.next() * 1000)
                if roll < 2 {
                    note(policy.handle(.connectionClosed(socket: 9)))
                } else if roll < 3 {
                    note(policy.handle(.connectFailed(now: now, unitRandom: 0.5)))
                } else if roll < 6 {
                    note(policy.handle(.connectionOpened))
                    connection += 1
                } else if roll < 8 {
                    // A break in the work of up to a second.
                    let until = now + UInt64(random.next() * 1000) * Self.ms
                    while now < until {
                        note(policy.handle(.beforeWait(now: now, waiting: false, idle: now, hasWork: false)))
                        now = min(until, policy.wakeDeadline() ?? until)
                    }
                } else {
                    note(policy.handle(.beforeWait(now: now, waiting: true, idle: now)))
                    note(policy.handle(.answered(connection: connection, now: now)))
                }
            }
            note(policy.handle(.stopped(now: now)))
            #expect(open == 0)
        }
        #expect(ended.contains(nil) && ended.contains(.workRanOut) && ended.contains(.stopped), "\(Set(ended.map { "\($0.map(\.rawValue) ?? "judged")" }))")
    }

    @Test func theConfigurationSharesTheCeilingBetweenThreadsAndSizesTheWindowForIt() throws {
        var configuration = DispatcherConfiguration(host: "localhost", threads: 2, connectionsPerThread: 1, streamsPerConnection: 500)
        #expect(configuration.connectionGrowth.ceiling == 1)
        #expect(configuration.effectiveMaxOutstanding == 2000)
        configuration.maxConnections = 8
        try configuration.validate()
        #expect(configuration.connectionGrowth == ConnectionGrowth(base: 1, ceiling: 4, streamsPerConnection: 500, delayNanoseconds: 250 * Self.ms,
                                                                   judgedOverNanoseconds: 1000 * Self.ms, trialFirstStep: 125))
        #expect(configuration.connectionGrowth.trialStreams == 125)
        // Fewer than 100 streams on trial would add too little to measure: 400 or fewer, one step.
        #expect(ConnectionGrowth.firstStepStreams(streamsPerConnection: 1000) == 250)
        #expect(ConnectionGrowth.firstStepStreams(streamsPerConnection: 200) == 100)
        #expect(ConnectionGrowth.firstStepStreams(streamsPerConnection: 10) == 10)
        configuration.connectionGrowthJudgedOverMilliseconds = -1
        #expect(throws: DispatcherConfigurationError.self) { try configuration.validate() }
        configuration.connectionGrowthJudgedOverMilliseconds = 1000
        #expect(configuration.effectiveMaxOutstanding == 8000)
        configuration.maxConnections = 1
        #expect(throws: DispatcherConfigurationError.self) { try configuration.validate() }
    }
}
