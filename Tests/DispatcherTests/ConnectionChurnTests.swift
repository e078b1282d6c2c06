@testable import Dispatcher
import Testing

/// Connections that answer a few requests and are then lost ("partial churn"): the rule of
/// `ConnectionChurn` and what `ConnectionPolicy` does with it, every case without sockets.
@Suite struct ConnectionChurnTests {
    private let backoff = ReconnectBackoff(initialMilliseconds: 100, maxMilliseconds: 1000, jitter: 0)
    private static let ms: UInt64 = 1_000_000
    private static let second: UInt64 = 1_000_000_000

    /// `connection` opened at `now` and answered `answers` requests, the first at `now`.
    private func answers(_ policy: inout ConnectionPolicy, on connection: Int64, count: Int, at now: UInt64) {
        _ = policy.handle(.connectionOpened)
        for index in 0..<count { _ = policy.handle(.answered(connection: connection, now: now + UInt64(index) * Self.ms)) }
    }

    /// A policy whose connections 1 and 2 churned in a row: a run of one failure, connection 2 retired and drained.
    private func churnRunStarted() -> ConnectionPolicy {
        var policy = ConnectionPolicy(backoff: backoff)
        answers(&policy, on: 1, count: 1, at: 0)
        _ = lost(&policy, 1, at: Self.ms)
        answers(&policy, on: 2, count: 1, at: 2 * Self.ms)
        #expect(lost(&policy, 2, at: 3 * Self.ms) == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        _ = policy.handle(.drained(connection: 2))
        return policy
    }

    private func lost(_ policy: inout ConnectionPolicy, _ connection: Int64, at now: UInt64, socket: Int32? = nil) -> ConnectionPolicy.Action {
        policy.handle(.connectionLost(connection: connection, socket: socket, now: now, unitRandom: 0))
    }

    // MARK: The rule

    @Test func aConnectionLostHavingAnsweredFewerThanFiveWithinTwoSecondsOfItsFirstAnswerChurned() {
        var churn = ConnectionChurn()
        for _ in 0..<4 { churn.answered(on: 1, heard: false, now: Self.second) }
        #expect(churn.churns(1, now: Self.second + 10 * Self.ms))
        #expect(churn.churns(1, now: 3 * Self.second - 1))
        // Lived two seconds since its first answer: a quiet connection the server or path closed.
        #expect(!churn.churns(1, now: 3 * Self.second))
        // A fifth answer: it did its work.
        churn.answered(on: 1, heard: false, now: 2 * Self.second)
        #expect(!churn.churns(1, now: Self.second + 10 * Self.ms))
        // Never answered, or answered long ago (forgotten): not this rule's.
        #expect(!churn.churns(2, now: Self.second))
    }

    /// A connection libcurl closed with nothing of it failed (a GOAWAY after its answers) is
    /// judged by its answers: a few, within the short life, and closed soon after the last
    /// (libcurl may shut it down for up to 2 s first). One let go idle, or that answered over
    /// more than the short life, or five, did not churn.
    @Test func aConnectionEndedInOrderIsJudgedByItsAnswersAndWhenItWasClosed() {
        var churn = ConnectionChurn()
        churn.answered(on: 1, heard: true, now: Self.second)
        churn.answered(on: 1, heard: false, now: Self.second + Self.ms)
        #expect(churn.endedInOrder(1, closedAt: Self.second + 5 * Self.ms) == Self.second)
        // Closed after libcurl's shutdown of up to 2 s: still when its last answer came.
        #expect(churn.endedInOrder(1, closedAt: 3 * Self.second + 500 * Self.ms) == Self.second)
        // Let go idle long after its last answer; or after the idle close the loop has set (1 s).
        #expect(churn.endedInOrder(1, closedAt: 5 * Self.second) == nil)
        #expect(churn.endedInOrder(1, closedAt: 2 * Self.second + 500 * Self.ms, within: Self.second) == nil)
        // Answers spread over more than the short life: a quiet connection.
        churn.answered(on: 2, heard: false, now: Self.second)
        churn.answered(on: 2, heard: false, now: 3 * Self.second + Self.ms)
        #expect(churn.endedInOrder(2, closedAt: 3 * Self.second + 2 * Self.ms) == nil)
        // Five answers: it did its work.
        for index in 0..<UInt64(ConnectionChurn.fewAnswers) { churn.answered(on: 3, heard: false, now: Self.second + index * Self.ms) }
        #expect(churn.endedInOrder(3, closedAt: Self.second + 10 * Self.ms) == nil)
        // Judged already (a loss reported on it), or never answered.
        churn.answered(on: 4, heard: false, now: Self.second)
        _ = churn.judgeLoss(of: 4, now: Self.second + Self.ms)
        #expect(churn.endedInOrder(4, closedAt: Self.second + 2 * Self.ms) == nil)
        #expect(churn.endedInOrder(5, closedAt: Self.second) == nil)
    }

    @Test func anAnswerHeardAndThenFinishedCountsOnce() {
        var churn = ConnectionChurn()
        for _ in 0..<3 {
            churn.answered(on: 7, heard: true, now: 5)
            churn.answered(on: 7, heard: false, now: 9)
        }
        #expect(churn.answers(on: 7)?.count == 3)
        #expect(churn.answers(on: 7)?.firstAt == 5, "the time of the first answer, whichever saw it")
        #expect(churn.churns(7, now: 10))
        // Heard before the transfers finished (a GOAWAY read with the answers): they count.
        churn.answered(on: 7, heard: true, now: 11)
        churn.answered(on: 7, heard: true, now: 11)
        #expect(churn.answers(on: 7)?.count == 5)
        #expect(!churn.churns(7, now: 12))
    }

    @Test func countsStopAtFiveAndOnlyRecentConnectionsAreRemembered() {
        var churn = ConnectionChurn(capacity: 3)
        for _ in 0..<1000 { churn.answered(on: 1, heard: false, now: 0) }
        #expect(churn.answers(on: 1)?.count == ConnectionChurn.fewAnswers)
        for connection in Int64(2)...4 { churn.answered(on: connection, heard: false, now: 0) }
        // 1 is older than every one remembered: it answered long ago.
        #expect(churn.answers(on: 1) == nil)
        #expect(!churn.churns(1, now: 1))
        // 3 is remembered with its one answer; 5 is newer and never answered.
        #expect(churn.answers(on: 3)?.count == 1)
        #expect(churn.answers(on: 5)?.count == 0)
    }

    @Test func onlyTheSecondChurnedConnectionInARowIsAFailureAndAWellConnectionEndsTheStreak() {
        var churn = ConnectionChurn()
        churn.answered(on: 1, heard: false, now: 0)
        #expect(churn.judgeLoss(of: 1, now: Self.ms) == .firstChurned)
        churn.answered(on: 2, heard: false, now: 2 * Self.ms)
        #expect(churn.judgeLoss(of: 2, now: 3 * Self.ms) == .churned)
        // Five answers on one connection: the server is well again.
        for _ in 0..<5 { churn.answered(on: 3, heard: false, now: 4 * Self.ms) }
        #expect(churn.lastChurnedAt == nil)
        churn.answered(on: 4, heard: false, now: 5 * Self.ms)
        #expect(churn.judgeLoss(of: 4, now: 6 * Self.ms) == .firstChurned)
        // So does a connection that lived long and was lost (a healthy loss).
        churn.answered(on: 5, heard: false, now: 7 * Self.ms)
        #expect(churn.judgeLoss(of: 5, now: 7 * Self.ms + 2 * Self.second) == .healthy)
        churn.answered(on: 6, heard: false, now: 3 * Self.second)
        #expect(churn.judgeLoss(of: 6, now: 3 * Self.second + Self.ms) == .firstChurned)
    }

    @Test func churnedConnectionsFarApartAreEachTheFirstOfAStreak() {
        var churn = ConnectionChurn()
        churn.answered(on: 1, heard: false, now: 0)
        #expect(churn.judgeLoss(of: 1, now: Self.ms) == .firstChurned)
        let later = Self.ms + ConnectionChurn.shortestStreakNanoseconds
        churn.answered(on: 2, heard: false, now: later)
        #expect(churn.judgeLoss(of: 2, now: later + Self.ms) == .firstChurned)
    }

    @Test func aStreakOutlastsTheLongestBackoff() {
        // Backoffs up to 30 s: the connection opened after the longest still continues the streak.
        var churn = ConnectionChurn(longestBackoffMilliseconds: 30_000)
        #expect(churn.streakNanoseconds == 60 * Self.second)
        churn.answered(on: 1, heard: false, now: 0)
        #expect(churn.judgeLoss(of: 1, now: Self.ms) == .firstChurned)
        churn.answered(on: 2, heard: false, now: 40 * Self.second)
        #expect(churn.judgeLoss(of: 2, now: 40 * Self.second + Self.ms) == .churned)
        #expect(ConnectionChurn(longestBackoffMilliseconds: 4000).streakNanoseconds == ConnectionChurn.shortestStreakNanoseconds)
    }

    @Test func aLossIsJudgedOncePerConnection() {
        var churn = ConnectionChurn()
        churn.answered(on: 1, heard: false, now: 0)
        #expect(churn.awaitsJudgement(1))
        #expect(churn.judgeLoss(of: 1, now: Self.ms) == .firstChurned)
        #expect(!churn.awaitsJudgement(1))
        #expect(!churn.churns(1, now: Self.ms))
        // Its other requests reporting it neither count again nor end the streak.
        #expect(churn.judgeLoss(of: 1, now: 5 * Self.second) == .judged)
        #expect(churn.lastChurnedAt == Self.ms)
        // Not remembered (never answered, or long ago): nothing to judge.
        #expect(!churn.awaitsJudgement(2))
        #expect(churn.judgeLoss(of: 2, now: Self.ms) == .healthy)
    }

    // MARK: What the policy does with it

    @Test func partialChurnIsARunOfFailedConnectionsFromTheSecondOn() {
        var policy = ConnectionPolicy(backoff: backoff)
        var now = Self.second
        // The first connection answers one request and is lost: its requests go again at once.
        answers(&policy, on: 1, count: 1, at: now)
        #expect(lost(&policy, 1, at: now + Self.ms, socket: 9) == .none)
        #expect(policy.consecutiveFailures == 0)
        #expect(policy.retiring.isEmpty)
        #expect(policy.mayOpenConnection(now: now + Self.ms))
        // Every later connection does the same: a failed connection each, backoff doubling,
        // announced once, waiting requests handed back from the third.
        var expected = [ConnectionPolicy.Action]()
        var actions = [ConnectionPolicy.Action]()
        for (index, connection) in (Int64(2)...6).enumerated() {
            now += Self.second
            answers(&policy, on: connection, count: 1, at: now)
            actions.append(lost(&policy, connection, at: now + Self.ms))
            #expect(!policy.mayOpenConnection(now: now + Self.ms), "no connection opens during the backoff")
            #expect(policy.admissionLimit(configured: 500, now: now + Self.ms) == 0)
            let delay = min(1000, 100 << index)
            expected.append(.backOff(delayMilliseconds: delay, failures: index + 1, startsRun: index == 0, handsBack: index >= 2))
            _ = policy.handle(.drained(connection: connection))
        }
        #expect(actions == expected)
        #expect(policy.consecutiveFailures == 5)
    }

    @Test func afterTheFirstChurnedConnectionTheNextCarriesOneRequestUntilItAnswersAndLibcurlResendsNothing() {
        var policy = ConnectionPolicy(backoff: backoff)
        answers(&policy, on: 1, count: 1, at: 0)
        #expect(policy.admissionLimit(configured: 500, now: Self.ms) == 500)
        #expect(lost(&policy, 1, at: Self.ms) == .none)
        // libcurl's own resends open no connection: they come back to the loop, which sends one
        // on the next connection (libcurl would put them all on it before its SETTINGS arrived).
        #expect(policy.resendsHeldAbove == 1)
        #expect(!policy.mayOpenConnection(now: Self.ms, resend: true))
        #expect(policy.mayOpenConnection(now: Self.ms))
        #expect(policy.admissionLimit(configured: 500, now: Self.ms) == 1)
        #expect(policy.consecutiveFailures == 0)
        // A late answer of the churned connection changes nothing; the next one's does.
        _ = policy.handle(.answered(connection: 1, now: 2 * Self.ms))
        #expect(policy.admissionLimit(configured: 500, now: 2 * Self.ms) == 1)
        answers(&policy, on: 2, count: 1, at: 3 * Self.ms)
        #expect(policy.resendsHeldAbove == nil)
        #expect(policy.mayOpenConnection(now: 3 * Self.ms, resend: true))
        #expect(policy.admissionLimit(configured: 500, now: 3 * Self.ms) == 500)
    }

    @Test func aChurnedConnectionIsOneFailureHoweverManyOfItsRequestsReportIt() {
        var policy = ConnectionPolicy(backoff: backoff)
        answers(&policy, on: 1, count: 1, at: 0)
        #expect(policy.lossNeedsJudging(1))
        #expect(lost(&policy, 1, at: Self.ms) == .none)
        // Its other streams, and libcurl sending them again, report it again: nothing more.
        #expect(!policy.lossNeedsJudging(1))
        for _ in 0..<50 { #expect(lost(&policy, 1, at: 2 * Self.ms) == .none) }
        answers(&policy, on: 2, count: 2, at: 3 * Self.ms)
        #expect(policy.lossNeedsJudging(2))
        #expect(lost(&policy, 2, at: 4 * Self.ms) == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        #expect(!policy.lossNeedsJudging(2))
        for _ in 0..<50 { #expect(lost(&policy, 2, at: 5 * Self.ms) == .holdAdmissions) }
        #expect(policy.consecutiveFailures == 1)
    }

    @Test func aConnectionThatAnsweredManyAndLeftMoreUnansweredGoesAgainAtOnce() {
        var policy = ConnectionPolicy(backoff: backoff)
        // A GOAWAY after 20 streams with 100 sent: 20 answers, 80 refused, within milliseconds,
        // connection after connection.
        for connection in Int64(1)...10 {
            let now = UInt64(connection) * 10 * Self.ms
            answers(&policy, on: connection, count: 20, at: now)
            for _ in 0..<80 { #expect(lost(&policy, connection, at: now + 30 * Self.ms) == .none) }
            #expect(!policy.lossNeedsJudging(connection))
        }
        #expect(policy.consecutiveFailures == 0)
        #expect(policy.retiring.isEmpty)
        #expect(policy.mayOpenConnection(now: 0))
    }

    @Test func aQuietConnectionLostLongAfterItsFewAnswersIsNoFailure() {
        var policy = ConnectionPolicy(backoff: backoff)
        // One notification now and then; the server closes the idle connection with one in flight.
        for connection in Int64(1)...5 {
            let now = UInt64(connection) * 60 * Self.second
            answers(&policy, on: connection, count: 1, at: now)
            #expect(lost(&policy, connection, at: now + 30 * Self.second) == .none)
        }
        #expect(policy.consecutiveFailures == 0)
        #expect(policy.retiring.isEmpty)
    }

    @Test func churnedConnectionsAddToARunOfFailuresFromTheSecond() {
        var policy = ConnectionPolicy(backoff: backoff)
        #expect(policy.handle(.connectFailed(now: 0, unitRandom: 0)) == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        answers(&policy, on: 1, count: 1, at: Self.second)
        #expect(lost(&policy, 1, at: Self.second + Self.ms) == .none)
        answers(&policy, on: 2, count: 1, at: 2 * Self.second)
        #expect(lost(&policy, 2, at: 2 * Self.second + Self.ms) == .backOff(delayMilliseconds: 200, failures: 2, startsRun: false, handsBack: false))
    }

    @Test func theRunEndsOnceConnectionsAnswerAgain() {
        var policy = churnRunStarted()
        // Answers on connections that answer one each (a lane's probes, say) for seconds prove
        // nothing: the run goes on.
        for connection in Int64(3)...8 {
            answers(&policy, on: connection, count: 1, at: UInt64(connection) * Self.second)
            #expect(policy.consecutiveFailures == 1)
        }
        // One connection answers five: the server is well, and the run ends after the usual 20.
        _ = policy.handle(.connectionOpened)
        var actions = [ConnectionPolicy.Action]()
        for index in 0..<(ConnectionChurn.fewAnswers - 1 + FailureRun.answersEndingRun) {
            actions.append(policy.handle(.answered(connection: 9, now: 9 * Self.second + UInt64(index) * Self.ms)))
        }
        #expect(actions.dropLast().allSatisfy { $0 == .none })
        #expect(actions.last == .backoffEnded(failures: 1))
        // The server is well: the next connection that churns is the first again.
        answers(&policy, on: 10, count: 1, at: 20 * Self.second)
        #expect(lost(&policy, 10, at: 20 * Self.second + Self.ms) == .none)
        #expect(policy.consecutiveFailures == 0)
    }

    /// A quiet lane (a notification a minute) after churn: its connection would take minutes to
    /// answer five, and the run, its growth held and its next failure unannounced, stayed that
    /// long. A connection answering again two seconds after its first answer outlived churn, and
    /// the run ends as after any failure: answers for two seconds.
    @Test func aQuietConnectionAnsweringPastTheShortLifeEndsTheRun() {
        var policy = churnRunStarted()
        _ = policy.handle(.connectionOpened)
        #expect(policy.handle(.answered(connection: 3, now: 10 * Self.second)) == .none)
        #expect(policy.handle(.answered(connection: 3, now: 70 * Self.second)) == .none)
        #expect(policy.consecutiveFailures == 1)
        #expect(policy.handle(.answered(connection: 3, now: 130 * Self.second)) == .backoffEnded(failures: 1))
        #expect(policy.consecutiveFailures == 0)
    }

    /// A connection ended in order is judged at its last answer, which may be seconds before
    /// libcurl closed it (its shutdown): the streak counts from then, the backoff from now.
    @Test func aConnectionJudgedAtItsLastAnswerBacksOffFromNow() {
        var policy = ConnectionPolicy(backoff: backoff)
        answers(&policy, on: 1, count: 1, at: 0)
        _ = lost(&policy, 1, at: Self.ms)
        answers(&policy, on: 2, count: 1, at: 2 * Self.ms)
        // Judged at now, 3 s after its first answer, it would be a quiet connection: no failure.
        let now = 3 * Self.second
        #expect(policy.handle(.connectionLost(connection: 2, socket: nil, now: now, unitRandom: 0, endedAt: 3 * Self.ms))
                == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        #expect(policy.backoffDeadline(now: now) == now + 100 * Self.ms)
    }

    /// Connection 1 answers twice and is ended in order; libcurl shuts it down for a while, and
    /// meanwhile connection 2 answers five: when 1 is judged at its close, the newer one has
    /// proved well after it ended. No hold on admissions (a loop of one connection would send
    /// one request at a time for as long as 2 lives) and no streak a later churn would extend.
    @Test func aConnectionJudgedAfterANewerOneProvedWellHoldsNothing() {
        let configured = 500
        var policy = ConnectionPolicy(backoff: backoff)
        answers(&policy, on: 1, count: 2, at: 0)
        answers(&policy, on: 2, count: ConnectionChurn.fewAnswers, at: Self.second)
        let closedAt = 2 * Self.second + 300 * Self.ms
        let endedAt = policy.churn.endedInOrder(1, closedAt: closedAt)
        #expect(endedAt == Self.ms)
        #expect(policy.handle(.connectionLost(connection: 1, socket: nil, now: closedAt, unitRandom: 0, endedAt: endedAt)) == .none)
        #expect(policy.handle(.drained(connection: 1, closedBefore: true)) == .none)
        #expect(policy.admissionLimit(configured: configured, now: closedAt) == configured)
        #expect(policy.churn.lastChurnedAt == nil)
        // A churn 3 s later is the first of a streak, not a failure.
        answers(&policy, on: 3, count: 1, at: 5 * Self.second)
        #expect(lost(&policy, 3, at: 5 * Self.second + Self.ms) == .none)
    }

    /// The same, with connection 2 answered but not proved yet (two answers) and 1 a second
    /// churn in a row: 1 is a failed connection and the loop backs off, but once the backoff
    /// is over it does not hold admissions to one request waiting for a connection newer than
    /// 2, which has answered and which libcurl keeps sending on.
    @Test func aChurnedConnectionJudgedAfterANewerOneAnsweredHoldsNoAdmissionsPastItsBackoff() {
        let configured = 500
        var policy = churnRunStarted()
        let start = Self.second
        answers(&policy, on: 3, count: 2, at: start)
        answers(&policy, on: 4, count: 2, at: start + 500 * Self.ms)
        let closedAt = start + 2 * Self.second
        let endedAt = policy.churn.endedInOrder(3, closedAt: closedAt)
        #expect(endedAt == start + Self.ms)
        guard case .backOff = policy.handle(.connectionLost(connection: 3, socket: nil, now: closedAt, unitRandom: 0, endedAt: endedAt)) else {
            Issue.record("a second churn in a row is a failed connection")
            return
        }
        _ = policy.handle(.drained(connection: 3, closedBefore: true))
        let after = closedAt + 5 * Self.second
        #expect(policy.admissionLimit(configured: configured, now: after) == configured)
        // Judged as it was lost (not closed before), the retired connection holds as it did.
        var reported = churnRunStarted()
        answers(&reported, on: 3, count: 2, at: start)
        _ = reported.handle(.connectionLost(connection: 3, socket: 9, now: start + 10 * Self.ms, unitRandom: 0))
        _ = reported.handle(.drained(connection: 3))
        #expect(reported.admissionLimit(configured: configured, now: after) == 1)
    }

    @Test func aConnectionThatNeverAnsweredStillFailsAtOnce() {
        var policy = ConnectionPolicy(backoff: backoff)
        _ = policy.handle(.connectionOpened)
        #expect(policy.lossNeedsJudging(1))
        #expect(lost(&policy, 1, at: 0) == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        // A loss on a connection libcurl gave no id is none.
        #expect(!policy.lossNeedsJudging(-1))
        #expect(lost(&policy, -1, at: 0) == .none)
    }

    @Test func answersHeardFromTheHeaderCallbackCountForTheRule() {
        var policy = ConnectionPolicy(backoff: backoff)
        _ = policy.handle(.connectionOpened)
        // A GOAWAY read with the connection's first answers: libcurl sends the rest again before
        // the loop reads the finished transfers, so only the header callback has seen them.
        for _ in 0..<ConnectionChurn.fewAnswers { policy.noteAnswer(on: 1, now: Self.second) }
        #expect(lost(&policy, 1, at: Self.second + Self.ms) == .none)
        policy.noteAnswer(on: 2, now: 2 * Self.second)
        #expect(lost(&policy, 2, at: 2 * Self.second + Self.ms) == .none)
        policy.noteAnswer(on: 3, now: 3 * Self.second)
        #expect(lost(&policy, 3, at: 3 * Self.second + Self.ms) == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
    }
}
