import APNs
import Polling

// The answer deadline: a request waits in the backlog only as long as an attempt started
// then can still end before its deadline. Runs on the loop's thread only, like the rest of the loop.
extension CurlEventLoop {
    /// The monotonic time after which `pending` may start no more attempts: its answer deadline
    /// less one whole request timeout, so an attempt started before it ends by the deadline.
    /// nil without a deadline.
    func lastStart(of pending: PendingRequest) -> UInt64? {
        guard answerDeadlineNanoseconds > 0 else { return nil }
        let last = pending.submittedAt &+ answerDeadlineNanoseconds
        return last >= requestTimeoutNanoseconds ? last - requestTimeoutNanoseconds : 0
    }

    /// Whether an attempt of `pending` started now still ends (by the request timeout) before its deadline.
    func mayStart(_ pending: PendingRequest, now: UInt64) -> Bool {
        guard let last = lastStart(of: pending) else { return true }
        return now <= last
    }

    /// Answers a request that may start no more attempts (`pastDeadline`).
    func answerPastDeadline(_ pending: PendingRequest) {
        sink.counters.pastDeadline.add(1, ordering: .relaxed)
        deliver(pending, outcome: Self.pastDeadline(pending, milliseconds: configuration.answerDeadlineMilliseconds))
    }

    /// What a request that may start no more attempts is answered: `notSent` when no attempt of
    /// it went on the wire unanswered (none went, or APNs answered each one that did, without
    /// taking it: UnrelatedKeyIdInToken); else a time-out, since an earlier attempt, on a
    /// connection that ended unanswered, may have reached the server.
    static func pastDeadline(_ pending: PendingRequest, milliseconds: Int) -> DispatchResult.Outcome {
        guard pending.unansweredOnWire else {
            return .notSent(.pastAnswerDeadline(milliseconds: milliseconds, earlierAttemptsAnswered: pending.wentOnWire))
        }
        return .transportFailure(TransportError(code: CurlResultCode.operationTimedOut.rawValue,
                                                message: "no answer by the answer deadline (\(milliseconds) ms); an earlier attempt may have reached the server"))
    }

    /// Answers the waiting requests, oldest first, whose last moment to start has passed:
    /// during a back-off nothing is let into libcurl, yet each is answered by its deadline.
    func answerOverdue() {
        guard answerDeadlineNanoseconds > 0, !backlog.isEmpty else { return }
        let now = monotonicNanoseconds()
        var answered = false
        while let front = backlog.front, !mayStart(front, now: now), let overdue = backlog.popFront() {
            answerPastDeadline(overdue)
            answered = true
        }
        if answered { releaseSlots() }
    }
}
