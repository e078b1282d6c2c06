import APNs
@testable import Dispatcher
import Testing

/// Every event of `FailureRun` and of the policy's failed connections, without sockets.
@Suite struct FailureRunTests {
    private let backoff = ReconnectBackoff(initialMilliseconds: 250, maxMilliseconds: 4000, jitter: 0)
    private let second: UInt64 = 1_000_000_000

    @Test func eachFailureInARowDoublesTheDelayFrom250MillisecondsTo4Seconds() {
        var run = FailureRun(backoff: backoff)
        var delays = [Int]()
        for failure in 1...8 {
            guard case .backOff(let until, let delay, let failures, _, _) = run.handle(.failed(now: 10 * second, unitRandom: 0)) else {
                Issue.record("no backoff")
                return
            }
            #expect(failures == failure)
            #expect(until == 10 * second + UInt64(delay) * 1_000_000)
            delays.append(delay)
        }
        #expect(delays == [250, 500, 1000, 2000, 4000, 4000, 4000, 4000])
    }

    @Test func jitterPlacesEachDelayBetweenHalfAndAllOfIt() {
        var run = FailureRun(backoff: ReconnectBackoff())
        guard case .backOff(_, let longest, _, _, _) = run.handle(.failed(now: 0, unitRandom: 0)) else { return }
        #expect(longest == 250)
        var other = FailureRun(backoff: ReconnectBackoff())
        guard case .backOff(_, let shortest, _, _, _) = other.handle(.failed(now: 0, unitRandom: 0.999_999)) else { return }
        #expect(shortest == 125)
    }

    @Test func onlyTheFirstFailureStartsARunAndFromTheThirdWaitingRequestsAreHandedBack() {
        var run = FailureRun(backoff: backoff)
        var starts = [Bool](), handsBack = [Bool]()
        for _ in 1...5 {
            guard case .backOff(_, _, _, let startsRun, let hands) = run.handle(.failed(now: 0, unitRandom: 0)) else { return }
            starts.append(startsRun)
            handsBack.append(hands)
        }
        #expect(starts == [true, false, false, false, false])
        #expect(handsBack == [false, false, true, true, true])
    }

    @Test func answersWithoutARunDoNothing() {
        var run = FailureRun(backoff: backoff)
        for index in 0..<100 { #expect(run.handle(.answered(now: UInt64(index) * second)) == .none) }
        #expect(run.failures == 0)
        #expect(run.answers == 0)
    }

    @Test func twentyAnswersEndTheRun() {
        var run = FailureRun(backoff: backoff)
        _ = run.handle(.failed(now: 0, unitRandom: 0))
        _ = run.handle(.failed(now: 0, unitRandom: 0))
        for _ in 1..<FailureRun.answersEndingRun { #expect(run.handle(.answered(now: second)) == .none) }
        #expect(run.handle(.answered(now: second)) == .ended(failures: 2))
        #expect(run.failures == 0)
        // The next failure starts a new run at the first delay.
        #expect(run.handle(.failed(now: 2 * second, unitRandom: 0))
                == .backOff(until: 2 * second + 250_000_000, delayMilliseconds: 250, failures: 1, startsRun: true, handsBack: false))
    }

    @Test func twoSecondsOfAnswersEndTheRunHoweverFewTheyWere() {
        var run = FailureRun(backoff: backoff)
        _ = run.handle(.failed(now: 0, unitRandom: 0))
        #expect(run.handle(.answered(now: 5 * second)) == .none)
        #expect(run.handle(.answered(now: 6 * second)) == .none)
        #expect(run.handle(.answered(now: 7 * second - 1)) == .none)
        #expect(run.handle(.answered(now: 7 * second)) == .ended(failures: 1))
    }

    @Test func aFailureAmongTheAnswersStartsTheirCountAndClockAgain() {
        var run = FailureRun(backoff: backoff)
        _ = run.handle(.failed(now: 0, unitRandom: 0))
        for _ in 0..<19 { _ = run.handle(.answered(now: second)) }
        #expect(run.handle(.answered(now: 1_500_000_000)) == .ended(failures: 1))
        _ = run.handle(.failed(now: 2 * second, unitRandom: 0))
        for _ in 0..<19 { _ = run.handle(.answered(now: 3 * second)) }
        // A Shutdown on the new connection: the run goes on, its delay grows.
        guard case .backOff(_, let delay, 2, false, false) = run.handle(.failed(now: 3 * second, unitRandom: 0)) else {
            Issue.record("the run did not go on")
            return
        }
        #expect(delay == 500)
        #expect(run.answers == 0)
        #expect(run.answeringSince == nil)
        #expect(run.handle(.answered(now: 4 * second)) == .none)
        #expect(run.handle(.answered(now: 5 * second)) == .none)
        #expect(run.handle(.answered(now: 6 * second)) == .ended(failures: 2))
    }

    // MARK: The policy's side

    private func warm() -> ConnectionPolicy {
        var policy = ConnectionPolicy(backoff: backoff)
        _ = policy.handle(.connectionOpened)
        _ = policy.handle(.answered(connection: 0))
        return policy
    }

    @Test func aFailedConnectionIsRetiredAndItsReplacementWaitsOutTheBackoff() {
        var policy = warm()
        #expect(policy.handle(.connectionFailed(connection: 0, socket: 7, now: second, unitRandom: 0))
                == .backOff(delayMilliseconds: 250, failures: 1, startsRun: true, handsBack: false))
        #expect(policy.admissionLimit(configured: 500, now: second) == 0)
        #expect(policy.handle(.drained(connection: 0)) == .closeRetired(socket: 7))
        #expect(policy.admissionLimit(configured: 500, now: second + 200_000_000) == 0)
        #expect(policy.backoffDeadline(now: second) == second + 250_000_000)
        #expect(policy.admissionLimit(configured: 500, now: second + 250_000_000) == 1)
    }

    @Test func manyStreamsReportingOneFailedConnectionAreOneFailure() {
        var policy = warm()
        _ = policy.handle(.connectionFailed(connection: 3, socket: 7, now: 0, unitRandom: 0))
        #expect(policy.handle(.connectionFailed(connection: 3, socket: 7, now: 0, unitRandom: 0)) == .holdAdmissions)
        #expect(policy.consecutiveFailures == 1)
        // A failure on a connection whose id is not known (it never connected) counts.
        #expect(policy.handle(.connectionFailed(connection: -1, socket: nil, now: 0, unitRandom: 0))
                == .backOff(delayMilliseconds: 500, failures: 2, startsRun: false, handsBack: false))
    }

    @Test func connectFailuresAndFailedConnectionsMakeOneRun() {
        var policy = warm()
        _ = policy.handle(.connectionFailed(connection: 1, socket: 5, now: 0, unitRandom: 0))
        _ = policy.handle(.drained(connection: 1))
        #expect(policy.handle(.connectFailed(now: 0, unitRandom: 0))
                == .backOff(delayMilliseconds: 500, failures: 2, startsRun: false, handsBack: false))
        #expect(policy.handle(.connectFailed(now: 0, unitRandom: 0))
                == .backOff(delayMilliseconds: 1000, failures: 3, startsRun: false, handsBack: true))
    }

    @Test func anOrderlyRetirementStartsNoBackoff() {
        var policy = warm()
        #expect(policy.handle(.retireRequested(connection: 0, socket: 7)) == .holdAdmissions)
        #expect(policy.consecutiveFailures == 0)
        _ = policy.handle(.drained(connection: 0))
        #expect(policy.admissionLimit(configured: 500, now: 0) == 1)
    }

    @Test func connectionsLostBeforeAnsweringMakeARunAnnouncedOnceThatHandsBackFromTheThird() {
        var policy = warm()
        var actions = [ConnectionPolicy.Action]()
        for connection in Int64(1)...4 {
            _ = policy.handle(.connectionOpened)
            // Each connection's streams all report it, as a reset connection's do.
            for _ in 0..<3 {
                let action = policy.handle(.connectionLost(connection: connection, socket: nil, now: 0, unitRandom: 0))
                if case .backOff = action { actions.append(action) }
            }
            _ = policy.handle(.drained(connection: connection))
        }
        #expect(actions == [.backOff(delayMilliseconds: 250, failures: 1, startsRun: true, handsBack: false),
                            .backOff(delayMilliseconds: 500, failures: 2, startsRun: false, handsBack: false),
                            .backOff(delayMilliseconds: 1000, failures: 3, startsRun: false, handsBack: true),
                            .backOff(delayMilliseconds: 2000, failures: 4, startsRun: false, handsBack: true)])
        // Answers on the next connection end the run, as after any other failures.
        for index in 1..<FailureRun.answersEndingRun { _ = policy.handle(.answered(connection: 5, now: UInt64(index))) }
        #expect(policy.handle(.answered(connection: 5, now: 100)) == .backoffEnded(failures: 4))
    }

    /// A server that resets every connection once it has read a request, for 20 s: the loop opens
    /// a connection when the policy lets it, the connection is lost at once, and no more are
    /// opened than the backoff's delays (250 ms doubling to 4 s) leave room for.
    @Test func aResetStormOpensOneConnectionPerBackoff() {
        var policy = warm()
        let millisecond: UInt64 = 1_000_000
        var connection: Int64 = 0
        var opened = [UInt64]()
        for now in stride(from: UInt64(0), to: 20_000 * millisecond, by: Int(millisecond)) where policy.mayOpenConnection(now: now) {
            connection += 1
            opened.append(now / millisecond)
            _ = policy.handle(.connectionOpened)
            _ = policy.handle(.connectionLost(connection: connection, socket: nil, now: now + millisecond, unitRandom: 0))
            _ = policy.handle(.drained(connection: connection))
        }
        #expect(opened == [0, 251, 752, 1753, 3754, 7755, 11756, 15757, 19758])
        #expect(policy.consecutiveFailures == 9)
    }

    @Test func answersEndTheRunThroughThePolicyAndGrowthResumes() {
        var policy = warm()
        _ = policy.handle(.connectFailed(now: 0, unitRandom: 0))
        for index in 1..<FailureRun.answersEndingRun {
            #expect(policy.handle(.answered(connection: 1, now: UInt64(index))) == .none)
        }
        #expect(policy.consecutiveFailures == 1)
        #expect(policy.handle(.answered(connection: 1, now: 100)) == .backoffEnded(failures: 1))
        #expect(policy.consecutiveFailures == 0)
    }
}

/// What the engine does with each answer and failure for its connection.
@Suite struct FailedConnectionDispositionTests {
    private func decide(code: Int = 0, status: Int, reason: String? = nil, attempts: Int = 1) -> TransferDisposition {
        TransferDisposition.decide(curlCode: code, status: status, reason: reason.map { APNsReason($0) }, attempts: attempts, maxAttempts: 3)
    }

    @Test func serviceUnavailableKeepsTheConnection() {
        #expect(decide(status: 503, reason: "ServiceUnavailable") == .deliver)
        #expect(decide(status: 503) == .deliver)
    }

    @Test func shutdownAndTimeOutsFailTheConnection() {
        #expect(decide(status: 503, reason: "Shutdown")
                == TransferDisposition(retry: false, replaceConnection: true, connectFailed: false, connectionFailed: true))
        #expect(decide(code: 28, status: 0)
                == TransferDisposition(retry: true, replaceConnection: true, connectFailed: false, connectionFailed: true))
    }

    @Test func orderlyRetirementsDoNotFailTheConnection() {
        for (status, reason) in [(400, "IdleTimeout"), (403, "ExpiredProviderToken"), (429, "TooManyProviderTokenUpdates")] {
            let disposition = decide(status: status, reason: reason)
            #expect(disposition.replaceConnection && !disposition.connectionFailed, "\(status) \(reason)")
        }
    }
}
