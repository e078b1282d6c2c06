/// One event loop's run of failed connections, as a plain value: a connection that could not
/// be opened (connect or TLS), that answered 503 Shutdown, on which an answer did not come in
/// time, that ended (reset, closed, a GOAWAY, its streams reset) before answering anything, or
/// that churned: ended so after a few answers, connection after connection (`ConnectionChurn`).
/// Each failure pushes the next connection back (`ReconnectBackoff`); answers without
/// a failure end the run once there were `answersEndingRun` of them or they kept coming for
/// `answeringNanosecondsEndingRun`: one answer on a fresh connection does not prove the server
/// well, since a server shutting down answers one request per connection.
struct FailureRun: Equatable {
    enum Event: Equatable {
        /// A connection failed at `now`; `unitRandom` in [0, 1) places the delay within its jitter.
        case failed(now: UInt64, unitRandom: Double)
        /// An answer arrived at `now` on a connection it did not fail.
        case answered(now: UInt64)
    }

    enum Action: Equatable {
        case none
        /// Open no connection before `until` (`delayMilliseconds` from the failure).
        /// `startsRun` for the first failure of a run (announced once); `handsBack` from the
        /// `failuresBeforeHandingBack`th failure in a row: requests waiting unsent go back to the
        /// caller rather than wait behind backoffs.
        case backOff(until: UInt64, delayMilliseconds: Int, failures: Int, startsRun: Bool, handsBack: Bool)
        /// Answers came for long enough: the run of `failures` is over.
        case ended(failures: Int)
    }

    static let answersEndingRun = 20
    static let answeringNanosecondsEndingRun: UInt64 = 2_000_000_000
    static let failuresBeforeHandingBack = 3

    let backoff: ReconnectBackoff
    /// Failures in the run, 0 when there is none.
    private(set) var failures = 0
    /// Answers since the last failure.
    private(set) var answers = 0
    /// When the first answer since the last failure arrived.
    private(set) var answeringSince: UInt64?
    /// No connection is opened before this time.
    private(set) var until: UInt64 = 0

    init(backoff: ReconnectBackoff) {
        self.backoff = backoff
    }

    mutating func handle(_ event: Event) -> Action {
        switch event {
        case .failed(let now, let unitRandom):
            failures += 1
            answers = 0
            answeringSince = nil
            let delay = backoff.delayMilliseconds(afterFailures: failures, unitRandom: unitRandom)
            until = now + UInt64(delay) * 1_000_000
            return .backOff(until: until, delayMilliseconds: delay, failures: failures, startsRun: failures == 1,
                            handsBack: failures >= Self.failuresBeforeHandingBack)
        case .answered(let now):
            // The common case, every answer of a healthy loop: one comparison.
            guard failures > 0 else { return .none }
            answers += 1
            let since = answeringSince ?? now
            answeringSince = since
            guard answers >= Self.answersEndingRun || now >= since + Self.answeringNanosecondsEndingRun else { return .none }
            let ended = failures
            failures = 0
            answers = 0
            answeringSince = nil
            return .ended(failures: ended)
        }
    }
}
