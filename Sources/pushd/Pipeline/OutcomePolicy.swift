import APNs
import Posix

/// What came back for one send: APNs's answer (read once, by the engine), or no answer at all.
enum SendOutcome: Sendable, Equatable {
    case response(APNsResponse)
    case transportFailure(String)
    /// No answer because TLS failed on a certificate (the server's or the app's): nothing
    /// was sent, and no retry can succeed until the configuration is fixed.
    case tlsRefused(String)
    /// Never sent: connections to APNs failed several times in a row and the engine handed
    /// the notification back. No attempt was made, so none is counted.
    case notSent(String)

    static func response(status: Int, body: [UInt8]) -> SendOutcome {
        .response(APNsResponse(status: status, body: body))
    }

    /// A metric label and failure reason from a closed set: a documented APNs reason, `none`
    /// for an answer without one, `unknown` for a reason APNs has added since, `transport` for
    /// no answer.
    var label: String {
        switch self {
        case .transportFailure:
            return "transport"
        case .tlsRefused:
            return "tls"
        case .notSent:
            return "not_sent"
        case .response(let response):
            guard let reason = response.reason else { return "none" }
            return APNsReason.known.contains { $0.reason == reason } ? reason.rawValue : "unknown"
        }
    }
}

/// What pushd does with a job (or campaign target) after one send.
enum Verdict: Sendable, Equatable {
    case delivered
    /// The token is dead: record the job as failed with `reason` and prune the token
    /// (unless it was registered again after `apnsTimestamp`).
    case prune(status: Int, reason: String, apnsTimestamp: Timestamp?)
    /// Send again at `at`. `refreshProviderToken` asks for a new JWT first. `countsAsAttempt`
    /// is false when APNs never answered: the send does not use up the attempt budget.
    case retry(at: Timestamp, reason: String, refreshProviderToken: Bool, countsAsAttempt: Bool)
    /// Give up: the job goes to dead letters with `reason`.
    case dead(status: Int?, reason: String)
    /// The app's credentials are rejected: stop sending for the app and keep the job.
    case pauseApp(reason: String)
    /// The app's configuration refuses this kind of request (`scope`): hold sending for the
    /// scope and keep the job, unspent. `reason` is APNs's, `why` says what to fix.
    case hold(ConfigurationScope, reason: String, why: String)
}

/// Turns an outcome into a verdict: APNs's classification of the reason, then the
/// retry policy's backoff and budget. Answers that blame the request use up attempts; no
/// answer, 5xx and 429 only use up time (the outage limit, or the notification's expiration)
/// counted from the first send attempt. A pure function of its inputs.
struct OutcomePolicy: Sendable {
    var retry: RetryPolicy

    /// What the reason of a retry begins with when APNs was unavailable (no answer, never sent,
    /// a 5xx), and with it the job's `last_error`: such jobs wait out the outage, and when the
    /// lane answers again they are made due at once (`JobQueue.makeDue`) instead of after the
    /// rest of a wait that grew with the outage.
    static let unavailableReasonPrefixes = ["transport: ", "not sent: ", "HTTP 5"]

    /// When a notification held back while APNs is down (`PipelineContext.holdsBackWhileDown`)
    /// is due again: as if APNs had just left it unanswered in the outage
    /// (`RetryPolicy.decideWhileDown`). Nil when its time budget is spent: it goes, and its
    /// answer decides it as any other.
    func dueWhileDown<Random: RandomNumberGenerator>(now: Timestamp, expiration: Int64?, firstAttemptAt: Timestamp?,
                                                     random: inout Random) -> Timestamp? {
        switch retry.decideWhileDown(now: now, expiration: expiration, firstAttemptAt: firstAttemptAt,
                                     trouble: "APNs takes none of the lane's notifications", random: &random) {
        case .retry(_, let at): return at
        case .giveUp: return nil
        }
    }

    /// The dead-letter reason (and metric label) of a notification whose `apns-expiration`
    /// passed before it could be sent.
    static let expiredLabel = "Expired"

    /// Why a notification with `expiration` (epoch seconds; 0 is "deliver once, now", never
    /// past) must not be sent at `now`: its time passed while it waited — queued behind others,
    /// scheduled past it (`run_at`), held through an outage, the database or the app paused.
    /// APNs would take it and deliver it late (a date in the past is not refused), so the sender
    /// must not send it. nil while it may be sent.
    static func expiredBeforeSending(_ expiration: Int64?, now: Timestamp) -> String? {
        guard let expiration, expiration > 0, Double(expiration) <= now.timeIntervalSince1970 else { return nil }
        let late = Int(now.timeIntervalSince1970 - Double(expiration))
        return "\(expiredLabel): its apns-expiration (\(expiration), \(late) s ago) passed before it could be sent; not sent"
    }

    /// - Parameters:
    ///   - attempt: sends made so far, this one included (1 after the first).
    ///   - expiration: the notification's apns-expiration, if any.
    ///   - firstAttemptAt: when the notification was first sent (not when it was queued): every
    ///     retry window counts from there.
    ///   - apnsDown: APNs takes none of this lane's notifications for the app and environment now
    ///     (`OperatorLog.isDown`; asked only of a send APNs did not answer or answered with a 5xx): a send it did not answer, or answered with a 5xx, waits for the
    ///     outage probe to see APNs back (`RetryPolicy.decideWhileDown`) instead of being sent
    ///     again on its own backoff, so that a down APNs gets the probes, not every notification
    ///     waiting for it every few seconds.
    func verdict<Random: RandomNumberGenerator>(for outcome: SendOutcome, attempt: Int, expiration: Int64?,
                                                firstAttemptAt: Timestamp?, now: Timestamp, apnsDown: @autoclosure () -> Bool = false,
                                                random: inout Random) -> Verdict {
        let action: ResponseAction
        let reason: APNsReason?
        let status: Int?
        let label: String
        switch outcome {
        case .tlsRefused(let message):
            return .pauseApp(reason: message)
        case .transportFailure(let message), .notSent(let message):
            // No answer: APNs or the path to it is down. That is no verdict on the notification,
            // so it waits the outage out (within the outage limit and its expiration).
            let label = outcome.label == "not_sent" ? message : "transport: \(message)"
            let decision = apnsDown()
                ? retry.decideWhileDown(now: now, expiration: expiration, firstAttemptAt: firstAttemptAt, trouble: "no answer from APNs", random: &random)
                : retry.decideAfterNoAnswer(now: now, expiration: expiration, firstAttemptAt: firstAttemptAt, random: &random)
            switch decision {
            case .retry(_, let at):
                return .retry(at: at, reason: label, refreshProviderToken: false, countsAsAttempt: false)
            case .giveUp(let why):
                return .dead(status: nil, reason: "\(label): \(why)")
            }
        case .response(let response):
            let code = response.status
            action = response.action
            reason = response.reason
            status = code
            label = response.reason?.rawValue ?? "HTTP \(code)"
            if case .pruneToken(let timestamp) = action {
                return .prune(status: code, reason: label, apnsTimestamp: Self.unregisteredSince(timestamp))
            }
        }
        switch action {
        case .delivered:
            return .delivered
        case .pruneToken:
            return .dead(status: status, reason: label)
        case .deadLetter(let why):
            return .dead(status: status, reason: "\(label): \(why)")
        case .holdScope(let scope, let holdReason, let why):
            return .hold(scope, reason: holdReason.rawValue, why: why)
        case .configurationError(let configurationReason):
            return .pauseApp(reason: configurationReason.rawValue)
        case .retry, .reconnectThenRetry, .refreshProviderTokenThenRetry:
            if let status, RetryPolicy.saysNothingAgainstTheRequest(status: status, reason: reason) {
                // APNs is failing, overloaded or throttling this token: no verdict on the
                // notification, so it waits within its time budget and keeps its attempts.
                let throttled = status == 429
                let decision = status >= 500 && apnsDown()
                    ? retry.decideWhileDown(now: now, expiration: expiration, firstAttemptAt: firstAttemptAt,
                                            trouble: "APNs answered \(label)", random: &random)
                    : retry.decideWithinBudget(now: now, expiration: expiration, firstAttemptAt: firstAttemptAt,
                                               throttled: throttled, trouble: "APNs answered \(label)", random: &random)
                switch decision {
                case .retry(_, let at):
                    // A 5xx says APNs is unavailable: its status leads the reason (and `last_error`).
                    let unavailable = status >= 500 ? "HTTP \(status)" + (reason.map { " \($0.rawValue)" } ?? "") : label
                    return .retry(at: at, reason: unavailable, refreshProviderToken: action == .refreshProviderTokenThenRetry,
                                  countsAsAttempt: false)
                case .giveUp(let why):
                    return .dead(status: status, reason: "\(label): \(why)")
                }
            }
            switch retry.decide(attempt: attempt, reason: reason, now: now, expiration: expiration,
                                firstAttemptAt: firstAttemptAt, random: &random) {
            case .retry(_, let at):
                return .retry(at: at, reason: label, refreshProviderToken: action == .refreshProviderTokenThenRetry,
                              countsAsAttempt: true)
            case .giveUp(let why):
                return .dead(status: status, reason: "\(label): \(why)")
            }
        }
    }

    /// The time a 410 says APNs learned the token was gone (milliseconds since the epoch), when it
    /// is a time: one more than a day ahead of this host's clock is not (a garbled answer; the
    /// database would refuse a year beyond 294276 and, with it, the batch's every answer), and is
    /// taken as no timestamp, which prunes the token as a 410 without one does.
    static func unregisteredSince(_ milliseconds: Int64?, now: Timestamp = Timestamp()) -> Timestamp? {
        guard let milliseconds, milliseconds >= 0 else { return nil }
        let seconds = Double(milliseconds) / 1000
        guard seconds <= now.timeIntervalSince1970 + 86_400 else { return nil }
        return Timestamp(timeIntervalSince1970: seconds)
    }
}
