@testable import Dispatcher
import Testing

/// What the engine answers a request it hands back at the third failed connection in a row
/// (`CurlEventLoop.handedBack`), or gives up at its answer deadline (`CurlEventLoop.pastDeadline`):
/// not sent, or, when an earlier attempt went on a connection that ended without answering it,
/// a transport failure (pushd waits a hand-back out like an unreachable APNs).
@Suite struct HandBackOutcomeTests {
    static func pending(wentOnWire: Bool, unansweredOnWire: Bool) throws -> PendingRequest {
        let request = try DispatchRequest(path: "/3/device/00", headerLines: ["apns-topic: com.example.shop"], body: Array("{}".utf8))
        var pending = PendingRequest(request: request, tag: 7, continuation: nil, submittedAt: 0, attempts: 1)
        pending.wentOnWire = wentOnWire
        pending.unansweredOnWire = unansweredOnWire
        return pending
    }

    /// The last failed connection was refused with a TLS alert, as a TLS-intercepting middlebox
    /// or a server refusing the client certificate says it; quoted in the hand-back's message,
    /// under libcurl's receive-error code (judged by its message), it made the requests that had
    /// been on the wire a certificate refusal, and pushd paused the app for them, while the
    /// requests handed back beside them, never sent, waited for APNs.
    @Test(arguments: [
        "OpenSSL/3.0.15: error:0A000418:SSL routines::tlsv1 alert unknown ca (libcurl error 35)",
        "OpenSSL SSL_read: OpenSSL/3.0.15: error:0A00045C:SSL routines::tlsv13 alert certificate required, errno 0 (libcurl error 56)",
        "OpenSSL/3.0.15: error:0A000086:SSL routines::certificate verify failed (libcurl error 35)",
    ])
    func aHandBackIsAnUnreachableServerWhateverTheLastFailureSays(lastFailure: String) throws {
        let notSent = NotSent(consecutiveFailures: 3, lastFailure: lastFailure)
        guard case .transportFailure(let error) = CurlEventLoop.handedBack(try Self.pending(wentOnWire: true, unansweredOnWire: true), notSent) else {
            Issue.record("a request that went on the wire unanswered was handed back as not sent")
            return
        }
        #expect(TransportFailureKind(error) == .unreachable, "\(error.code): \(error.message)")
        #expect(error.message.contains("may have reached the server"))
        #expect(error.message.contains(lastFailure))
        guard case .notSent = CurlEventLoop.handedBack(try Self.pending(wentOnWire: false, unansweredOnWire: false), notSent) else {
            Issue.record("a request that never went on the wire was not handed back as not sent")
            return
        }
    }

    /// An attempt APNs answered with a refusal the engine sends again (UnrelatedKeyIdInToken on a
    /// new connection) did not reach it for delivery: handed back, the request is not sent, and
    /// a campaign's chunk takes it back with the rest, rather than keep a window for a delivery
    /// that may have happened.
    @Test func aRequestWhoseAttemptsWereAllAnsweredIsHandedBackNotSent() throws {
        let notSent = NotSent(consecutiveFailures: 3, lastFailure: "Failed to connect to 127.0.0.1 port 1 (libcurl error 7)")
        let outcome = CurlEventLoop.handedBack(try Self.pending(wentOnWire: true, unansweredOnWire: false), notSent)
        guard case .notSent(let handedBack) = outcome else {
            Issue.record("handed back as \(outcome)")
            return
        }
        #expect(handedBack == notSent)
    }

    /// The same rule at the answer deadline (`CurlEventLoop.pastDeadline`): a request whose
    /// attempt APNs answered UnrelatedKeyIdInToken, waiting for another connection past its last
    /// moment to start, was answered "no answer by the answer deadline; an earlier attempt may
    /// have reached the server", which APNs had refused.
    @Test func aRequestPastItsDeadlineIsATimeOutOnlyWhenAnAttemptWentUnanswered() throws {
        let answered = CurlEventLoop.pastDeadline(try Self.pending(wentOnWire: true, unansweredOnWire: false), milliseconds: 70_000)
        guard case .notSent(let notSent) = answered else {
            Issue.record("a request APNs answered each time was given up as \(answered)")
            return
        }
        #expect(notSent.answerDeadlineMilliseconds == 70_000)
        #expect(notSent.description.contains("APNs answered each one that went on the wire"), "\(notSent)")
        let never = CurlEventLoop.pastDeadline(try Self.pending(wentOnWire: false, unansweredOnWire: false), milliseconds: 70_000)
        #expect(never.notSentDescription?.hasSuffix("none went on the wire") == true, "\(never)")
        let lost = CurlEventLoop.pastDeadline(try Self.pending(wentOnWire: true, unansweredOnWire: true), milliseconds: 70_000)
        guard case .transportFailure(let error) = lost else {
            Issue.record("a request that went on the wire unanswered was given up as \(lost)")
            return
        }
        #expect(error.code == CurlResultCode.operationTimedOut.rawValue && error.message.contains("may have reached the server"))
    }
}

/// Whether a request may have reached the server, as a campaign's chunk judges the targets it
/// gives back unsent (`DispatchResult.mayHaveReachedServer`): a connection refused or a failed
/// handshake carried nothing of it, and a target handed back after one was parked one row each.
@Suite struct ReachedServerTests {
    @Test(arguments: [(5, false), (6, false), (7, false), (35, false), (60, false), (28, true), (52, true), (56, true), (92, true)])
    func aTransportFailureReachedTheServerUnlessItsConnectionWasNeverSetUp(code: Int, reached: Bool) {
        let result = DispatchResult(tag: 1, outcome: .transportFailure(TransportError(code: code, message: "libcurl error \(code)")),
                                    latencyNanoseconds: 0, attempts: 1)
        #expect(result.mayHaveReachedServer == reached, "libcurl error \(code)")
    }

    @Test func anAnswerReachedItAndAHandBackDidNot() {
        let notSent = DispatchResult(tag: 1, outcome: .notSent(NotSent(consecutiveFailures: 3, lastFailure: "refused")),
                                     latencyNanoseconds: 0, attempts: 0)
        #expect(!notSent.mayHaveReachedServer)
        let answered = DispatchResult(tag: 1, outcome: .response(Response(status: 503, apnsID: nil, body: [])), latencyNanoseconds: 0, attempts: 1)
        #expect(answered.mayHaveReachedServer)
        // A connection refused at the last attempt, after one that ended unanswered.
        var refusedAfterLost = DispatchResult(tag: 1, outcome: .transportFailure(TransportError(code: 7, message: "refused")),
                                              latencyNanoseconds: 0, attempts: 2)
        refusedAfterLost.earlierAttemptUnanswered = true
        #expect(refusedAfterLost.mayHaveReachedServer)
    }
}

private extension DispatchResult.Outcome {
    var notSentDescription: String? {
        if case .notSent(let notSent) = self { return notSent.description }
        return nil
    }
}
