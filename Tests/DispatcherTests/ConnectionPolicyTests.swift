@testable import Dispatcher
import Testing

/// Every event of `ConnectionPolicy` in every state that matters, without sockets.
@Suite struct ConnectionPolicyTests {
    private let backoff = ReconnectBackoff(initialMilliseconds: 100, maxMilliseconds: 1000, jitter: 0)

    private func policy() -> ConnectionPolicy {
        ConnectionPolicy(backoff: backoff)
    }

    /// A policy with one open connection that has answered.
    private func warm() -> ConnectionPolicy {
        var policy = policy()
        #expect(policy.handle(.connectionOpened) == .none)
        #expect(policy.handle(.answered(connection: 0)) == .none)
        return policy
    }

    @Test func oneRequestAtATimeUntilAConnectionExistsAndHasAnswered() {
        var policy = policy()
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
        _ = policy.handle(.connectionOpened)
        #expect(policy.cold)
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
        _ = policy.handle(.answered(connection: 0))
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
        // A second connection is cold again until an answer: its SETTINGS are unknown.
        _ = policy.handle(.connectionOpened)
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
        _ = policy.handle(.answered(connection: 0))
        _ = policy.handle(.connectionClosed(socket: 9))
        _ = policy.handle(.connectionClosed(socket: 10))
        #expect(policy.openConnections == 0)
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
        // A close the policy never saw opened does not go below zero.
        _ = policy.handle(.connectionClosed(socket: 11))
        #expect(policy.openConnections == 0)
    }

    @Test func connectFailuresBackOffExponentiallyAndTwoSecondsOfAnswersResetTheCount() {
        var policy = warm()
        #expect(policy.handle(.connectFailed(now: 1_000_000_000, unitRandom: 0))
                == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        #expect(policy.backoffDeadline(now: 1_000_000_000) == 1_100_000_000)
        #expect(policy.admissionLimit(configured: 500, now: 1_050_000_000) == 0)
        #expect(policy.admissionLimit(configured: 500, now: 1_100_000_000) == 500)
        #expect(policy.backoffDeadline(now: 1_100_000_000) == nil)
        #expect(policy.handle(.connectFailed(now: 2_000_000_000, unitRandom: 0))
                == .backOff(delayMilliseconds: 200, failures: 2, startsRun: false, handsBack: false))
        #expect(policy.backoffDeadline(now: 2_000_000_000) == 2_200_000_000)
        // One answer does not end the run; answers for 2 s do.
        #expect(policy.handle(.answered(connection: 0, now: 2_300_000_000)) == .none)
        #expect(policy.consecutiveFailures == 2)
        #expect(policy.handle(.answered(connection: 0, now: 4_300_000_000)) == .backoffEnded(failures: 2))
        #expect(policy.consecutiveFailures == 0)
        #expect(policy.handle(.connectFailed(now: 5_000_000_000, unitRandom: 0))
                == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        #expect(policy.backoffDeadline(now: 5_000_000_000) == 5_100_000_000)
    }

    @Test func fromTheThirdFailedConnectionInARowEverythingWaitingIsHandedBack() {
        var policy = policy()
        #expect(policy.handle(.connectFailed(now: 0, unitRandom: 0)) == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        #expect(policy.handle(.connectFailed(now: 0, unitRandom: 0)) == .backOff(delayMilliseconds: 200, failures: 2, startsRun: false, handsBack: false))
        #expect(policy.handle(.connectFailed(now: 0, unitRandom: 0)) == .backOff(delayMilliseconds: 400, failures: 3, startsRun: false, handsBack: true))
        // Every later failure hands back what waits then, too, until the run ends.
        #expect(policy.handle(.connectFailed(now: 0, unitRandom: 0)) == .backOff(delayMilliseconds: 800, failures: 4, startsRun: false, handsBack: true))
        for _ in 0..<FailureRun.answersEndingRun { _ = policy.handle(.answered(connection: 0)) }
        #expect(policy.handle(.connectFailed(now: 0, unitRandom: 0)) == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
    }

    @Test func aRetiredConnectionHoldsAdmissionsUntilDrainedThenItsSocketIsClosed() {
        var policy = warm()
        #expect(policy.handle(.retireRequested(connection: 4, socket: 12)) == .holdAdmissions)
        #expect(policy.admissionLimit(configured: 500, now: 0) == 0)
        // More answers from the same connection ask nothing more.
        #expect(policy.handle(.retireRequested(connection: 4, socket: 12)) == .holdAdmissions)
        #expect(policy.handle(.drained(connection: 4)) == .closeRetired(socket: 12))
        // One request opens the replacement; the rest follow once it has answered.
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
        _ = policy.handle(.answered(connection: 5))
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
        // An answer arriving late from the closed connection retires nothing new.
        #expect(policy.handle(.retireRequested(connection: 4, socket: 12)) == .none)
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
        #expect(policy.handle(.drained(connection: 4)) == .none)
    }

    @Test func aRetiredConnectionWhoseSocketIsUnknownIsReplacedByAFreshConnect() {
        var policy = warm()
        #expect(policy.handle(.retireRequested(connection: 2, socket: nil)) == .holdAdmissions)
        #expect(policy.handle(.drained(connection: 2)) == .freshConnect)
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
        _ = policy.handle(.answered(connection: 3))
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
    }

    @Test func aRetiredConnectionThatClosesByItselfIsNeverClosedAgain() {
        var policy = warm()
        _ = policy.handle(.retireRequested(connection: 7, socket: 20))
        // The server closed it (its descriptor number may be reused at once).
        _ = policy.handle(.connectionClosed(socket: 20))
        #expect(policy.retiring.isEmpty)
        // Admissions resume, one at a time: no connection is open any more.
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
        #expect(policy.handle(.drained(connection: 7)) == .none)
    }

    @Test func twoRetiredConnectionsHoldAdmissionsUntilBothAreDrained() {
        var policy = warm()
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        #expect(policy.handle(.retireRequested(connection: 1, socket: 8)) == .holdAdmissions)
        #expect(policy.handle(.retireRequested(connection: 2, socket: 9)) == .holdAdmissions)
        #expect(policy.handle(.drained(connection: 1)) == .closeRetired(socket: 8))
        #expect(policy.admissionLimit(configured: 500, now: 0) == 0)
        #expect(policy.handle(.drained(connection: 2)) == .closeRetired(socket: 9))
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
        _ = policy.handle(.answered(connection: 3))
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
    }

    @Test func aRetirementWithoutAConnectionIdIsIgnored() {
        var policy = warm()
        #expect(policy.handle(.retireRequested(connection: -1, socket: 5)) == .none)
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
    }

    @Test func aBackoffAndARetirementTogetherHoldAdmissionsUntilBothEnd() {
        var policy = warm()
        _ = policy.handle(.connectFailed(now: 0, unitRandom: 0))
        _ = policy.handle(.retireRequested(connection: 3, socket: 6))
        _ = policy.handle(.drained(connection: 3))
        #expect(policy.admissionLimit(configured: 500, now: 50_000_000) == 0)
        #expect(policy.admissionLimit(configured: 500, now: 100_000_000) == 1)
        _ = policy.handle(.answered(connection: 4))
        #expect(policy.admissionLimit(configured: 500, now: 100_000_000) == 500)
    }
    // MARK: Connections that end before answering

    @Test func aConnectionLostBeforeAnsweringFailsOnceAndNothingOpensUntilItsBackoffEnds() {
        var policy = warm()
        _ = policy.handle(.connectionOpened)
        let second: UInt64 = 1_000_000_000
        #expect(policy.handle(.connectionLost(connection: 1, socket: 8, now: second, unitRandom: 0))
                == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        // Its other streams, and libcurl sending them again, report the same connection: one failure.
        #expect(policy.handle(.connectionLost(connection: 1, socket: 8, now: second, unitRandom: 0)) == .holdAdmissions)
        #expect(policy.consecutiveFailures == 1)
        #expect(!policy.mayOpenConnection(now: second + 99_999_999))
        #expect(policy.admissionLimit(configured: 500, now: second + 50_000_000) == 0)
        #expect(policy.handle(.drained(connection: 1)) == .closeRetired(socket: 8))
        #expect(policy.mayOpenConnection(now: second + 100_000_000))
        #expect(policy.admissionLimit(configured: 500, now: second + 100_000_000) == 1)
    }

    @Test func aConnectionThatAnsweredAndThenEndedIsNoFailure() {
        var policy = warm()
        // A GOAWAY, an idle close or a reset after answers (here, seconds after its first: one
        // lost at once after a few churned, `ConnectionChurnTests`): its requests go again at once.
        #expect(policy.handle(.connectionLost(connection: 0, socket: 7, now: 3_000_000_000, unitRandom: 0)) == .none)
        #expect(policy.consecutiveFailures == 0)
        #expect(policy.retiring.isEmpty)
        #expect(policy.mayOpenConnection(now: 0))
        #expect(policy.admissionLimit(configured: 500, now: 0) == 500)
        // Nor is a loss on a connection libcurl gave no id.
        #expect(policy.handle(.connectionLost(connection: -1, socket: nil, now: 0, unitRandom: 0)) == .none)
    }

    @Test func whetherAConnectionAnsweredIsKnownPerConnectionNotFromTheNewestThatDid() {
        var policy = warm()
        _ = policy.handle(.answered(connection: 2))
        _ = policy.handle(.answered(connection: 0))
        // Connection 1 never answered, although older and newer ones did.
        #expect(policy.hasAnswered(0) && policy.hasAnswered(2) && !policy.hasAnswered(1))
        #expect(policy.handle(.connectionLost(connection: 1, socket: nil, now: 0, unitRandom: 0))
                == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
        #expect(policy.handle(.connectionLost(connection: 2, socket: nil, now: 0, unitRandom: 0)) == .none, "it answered")
        #expect(policy.consecutiveFailures == 1)
    }

    @Test func anAnswerSeenBeforeItsTransferFinishedCountsForItsConnection() {
        var policy = warm()
        // The status line came in libcurl's header callback; libcurl then read a GOAWAY and sends
        // the refused requests again before the loop reads the finished transfers.
        policy.noteAnswer(on: 3)
        #expect(policy.handle(.connectionLost(connection: 3, socket: nil, now: 0, unitRandom: 0)) == .none)
        #expect(policy.consecutiveFailures == 0)
    }

    @Test func aConnectionOlderThanEveryOneRememberedIsTakenToHaveAnswered() {
        var policy = warm()
        for connection in Int64(1)...300 { _ = policy.handle(.answered(connection: connection)) }
        #expect(policy.hasAnswered(10))
        #expect(policy.handle(.connectionLost(connection: 10, socket: nil, now: 0, unitRandom: 0)) == .none)
        #expect(!policy.hasAnswered(301))
        #expect(policy.handle(.connectionLost(connection: 301, socket: nil, now: 0, unitRandom: 0))
                == .backOff(delayMilliseconds: 100, failures: 1, startsRun: true, handsBack: false))
    }
}
