import APNs
import Posix

/// What became of one request: the server's answer or the transport failure that ended it.
public struct DispatchResult: Sendable {
    /// The caller's tag given at submission.
    public var tag: UInt64
    public var outcome: Outcome
    /// From submission to completion, including time spent waiting in the engine's own queue.
    public var latencyNanoseconds: UInt64
    /// How many times the request was handed to the transport (1 + transparent retries).
    public var attempts: Int
    /// Where the time went, when the engine records it (`DispatcherConfiguration.recordsTransferTimings`).
    public var timings: TransferTimings?
    /// An attempt of the request went on a connection that ended without answering it: the
    /// server may have it, whatever ended the last attempt (`mayHaveReachedServer`).
    public var earlierAttemptUnanswered = false

    public enum Outcome: Sendable, Equatable {
        case response(Response)
        case transportFailure(TransportError)
        /// Never put on the wire: the request waited for a connection while several in a row
        /// failed, and the engine hands it back rather than hold it behind its backoffs; or its
        /// answer deadline came before another attempt could fit.
        case notSent(NotSent)
    }

    public var response: Response? {
        if case .response(let response) = outcome { return response }
        return nil
    }

    public var transportError: TransportError? {
        if case .transportFailure(let error) = outcome { return error }
        return nil
    }

    public var notSent: NotSent? {
        if case .notSent(let notSent) = outcome { return notSent }
        return nil
    }

    /// Whether the request may have reached the server: it was answered, or an attempt of it
    /// went on a connection that ended without an answer. Not when it was handed back unsent,
    /// nor when every attempt's connection failed to be set up.
    public var mayHaveReachedServer: Bool {
        switch outcome {
        case .response: true
        case .transportFailure(let error): earlierAttemptUnanswered || !error.failedBeforeConnecting
        case .notSent: false
        }
    }
}

/// Why a request was handed back without being sent: nothing of it reached the server, so
/// sending it again later is no second delivery attempt.
public struct NotSent: Sendable, Equatable, CustomStringConvertible {
    /// Connections that failed in a row on the event loop that held the request (0 when the
    /// answer deadline handed it back).
    public var consecutiveFailures: Int
    /// The last failure, as an operator reads it.
    public var lastFailure: String
    /// The last failure was a connection that ended after its TLS handshake, before answering
    /// anything (`ConnectionFailureCause.endedAfterHandshake`).
    public var lastFailureEndedAfterHandshake = false
    /// The last failure was a connection the server reset during its TLS handshake, after the
    /// client sent its certificate (`ConnectionFailureCause.endedDuringHandshakeAfterClientCertificate`).
    public var lastFailureEndedDuringHandshakeAfterClientCertificate = false
    /// Set when the request's answer deadline (`DispatcherConfiguration.answerDeadlineMilliseconds`)
    /// came before a whole request timeout fitted in front of it.
    public var answerDeadlineMilliseconds: Int?
    /// With `answerDeadlineMilliseconds`: attempts of it went on the wire, and APNs answered
    /// each without taking it (UnrelatedKeyIdInToken, sent again on another connection).
    public var earlierAttemptsAnswered = false

    public init(consecutiveFailures: Int, lastFailure: String) {
        self.consecutiveFailures = consecutiveFailures
        self.lastFailure = lastFailure
        answerDeadlineMilliseconds = nil
    }

    /// The answer deadline left no room for another attempt, and none had gone on the wire or
    /// APNs had answered each that did without taking it (`earlierAttemptsAnswered`).
    public static func pastAnswerDeadline(milliseconds: Int, earlierAttemptsAnswered: Bool = false) -> NotSent {
        var notSent = NotSent(consecutiveFailures: 0, lastFailure: "")
        notSent.answerDeadlineMilliseconds = milliseconds
        notSent.earlierAttemptsAnswered = earlierAttemptsAnswered
        return notSent
    }

    public var description: String {
        if let milliseconds = answerDeadlineMilliseconds {
            return "not sent: the answer deadline (\(milliseconds) ms) left no room for another attempt, and "
                + (earlierAttemptsAnswered ? "APNs answered each one that went on the wire without taking it" : "none went on the wire")
        }
        return "not sent: \(consecutiveFailures) connections to APNs failed in a row (last: \(lastFailure))"
    }
}

/// The stages of one request's time in the engine, for tracing where latency goes. libcurl's
/// times count from the moment the loop handed it the request's last attempt.
public struct TransferTimings: Sendable, Equatable {
    /// Submission → handed to libcurl: the engine's queue and its event loop's wake-up.
    public var queuedNanoseconds: UInt64
    /// Handed to libcurl → the request's last byte written (`CURLINFO_POSTTRANSFER_TIME_T`).
    public var sentMicroseconds: Int64
    /// Handed to libcurl → the answer's first byte read (`CURLINFO_STARTTRANSFER_TIME_T`): the
    /// server, the network and the loop's wake-up to read it.
    public var firstByteMicroseconds: Int64
    /// Handed to libcurl → the transfer finished (`CURLINFO_TOTAL_TIME_T`).
    public var totalMicroseconds: Int64

    public init(queuedNanoseconds: UInt64, sentMicroseconds: Int64, firstByteMicroseconds: Int64, totalMicroseconds: Int64) {
        self.queuedNanoseconds = queuedNanoseconds
        self.sentMicroseconds = sentMicroseconds
        self.firstByteMicroseconds = firstByteMicroseconds
        self.totalMicroseconds = totalMicroseconds
    }
}

/// An HTTP response as APNs gives it: status, the `apns-id` response header and the body,
/// and the answer read once, by the engine, into the APNs module's `APNsResponse`.
public struct Response: Sendable, Equatable {
    public let status: Int
    public let apnsID: APNsID?
    /// Empty for a 200; APNs puts `{"reason": …}` (and on 410 `"timestamp"`) in error bodies.
    public let body: [UInt8]
    /// The `apns-channel-id` response header: the id of a channel just created.
    public let channelID: String?
    /// The `apns-unique-id` response header, sent only by APNs's development environment: the
    /// id that finds this notification in Apple's delivery log (the Push Notifications Console).
    public let uniqueID: APNsID?
    /// Read once, by the engine; `apns` is built from it only when asked, so an answer nobody
    /// inspects costs no apns-id string.
    private let errorBody: APNsErrorBody?

    public init(status: Int, apnsID: APNsID?, body: [UInt8], channelID: String? = nil, uniqueID: APNsID? = nil) {
        self.init(status: status, apnsID: apnsID, body: body, errorBody: APNsErrorBody.parse(body), channelID: channelID, uniqueID: uniqueID)
    }

    /// With the error body already read (the engine reads it once, for its own decisions too).
    init(status: Int, apnsID: APNsID?, body: [UInt8], errorBody: APNsErrorBody?, channelID: String? = nil, uniqueID: APNsID? = nil) {
        self.status = status
        self.apnsID = apnsID
        self.body = body
        self.channelID = channelID
        self.uniqueID = uniqueID
        self.errorBody = errorBody
    }

    /// Status, apns-id, reason and timestamp as typed values; `apns.action` says what to do.
    public var apns: APNsResponse {
        APNsResponse(status: status, apnsID: apnsID?.lowercasedString, reason: errorBody?.reason, timestamp: errorBody?.timestamp)
    }

    /// `apns` without the apns-id: what a caller that only classifies the answer needs. A
    /// daemon recording a campaign's answers reads no apns-id, and making it a string cost an
    /// allocation and about 1,000 instructions per answer (docs/dispatcher-measurements.md).
    public var classified: APNsResponse {
        APNsResponse(status: status, apnsID: nil, reason: errorBody?.reason, timestamp: errorBody?.timestamp)
    }

    /// The `reason` string of an APNs error body, or nil when there is none.
    public var reason: String? { errorBody?.reason?.rawValue }

    /// The `timestamp` (milliseconds since the epoch) of a 410 body, or nil when there is none.
    public var timestampMilliseconds: Int64? { errorBody?.timestamp }
}

/// A failure below HTTP: libcurl's error code and its message.
public struct TransportError: Error, Sendable, Equatable, CustomStringConvertible {
    /// libcurl's CURLcode.
    public var code: Int
    public var message: String

    public init(code: Int, message: String) {
        self.code = code
        self.message = message
    }

    /// The request went on a connection that completed its TLS handshake and ended before
    /// answering anything (`ConnectionFailureCause.endedAfterHandshake`).
    public var endedAfterHandshake = false
    /// The request's connection was reset by the server during its TLS handshake, after the
    /// client sent its certificate (`ConnectionFailureCause.endedDuringHandshakeAfterClientCertificate`).
    public var endedDuringHandshakeAfterClientCertificate = false

    public var description: String { "transport error \(code): \(message)" }

    /// The connection the request was to go on was never set up (the name or proxy could not
    /// be resolved, TCP or the TLS handshake failed): nothing of the request reached the server.
    public var failedBeforeConnecting: Bool {
        switch CurlResultCode(code) {
        case .couldntResolveProxy, .couldntResolveHost, .couldntConnect, .sslConnectError, .proxyHandshake,
             .tlsCredentialOrVerification:
            true
        default:
            false
        }
    }

    /// The engine was stopped before the request completed.
    public static let engineStopped = TransportError(code: -1, message: "dispatcher stopped before the request completed")
}
