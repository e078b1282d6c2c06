import APNs

/// A complete HTTP/2 request as the transport hands it to the logic.
struct IncomingRequest: Sendable {
    var streamID: Int32
    var method: String = ""
    var path: String = ""
    var headers: [HeaderField] = []
    var body: [UInt8] = []
    /// The body went past `maximumBodyBytes` and was cut; the request is answered PayloadTooLarge.
    var bodyTruncated = false

    /// Bodies beyond this are not buffered: APNs's largest payload is 5120 bytes.
    static let maximumBodyBytes = 16 * 1024

    init(streamID: Int32) {
        self.streamID = streamID
        headers.reserveCapacity(6)
    }

    func header(_ name: String) -> String? {
        headers.first { $0.name == name }?.value
    }
}

/// What the logic decided for one request.
enum Verdict: Equatable {
    case answer(Answer)
    /// Drop the TCP connection with RST instead of answering.
    case resetConnection
    /// Reset the request's stream (RST_STREAM with this HTTP/2 error code) instead of
    /// answering; the connection stays open.
    case resetStream(errorCode: UInt32)
}

/// An HTTP answer in APNs's shape.
struct Answer: Equatable {
    var status: Int
    var apnsID: String
    /// `reason` of the JSON body; nil for 200.
    var reason: String?
    /// `timestamp` of a 410 body, milliseconds since 1970.
    var timestamp: Int64?
    var delayMilliseconds: UInt64 = 0
    /// The connection's new MAX_CONCURRENT_STREAMS, when this answer changes it.
    var newMaxConcurrentStreams: Int?
    /// The accepted-notification log entry, made only when the server keeps that log.
    var logEntry: AcceptedNotification?
    /// Token the answer concerns, for per-token counts.
    var token: String?
    /// Headers after `apns-id` (which is left out when empty): `apns-channel-id`,
    /// `apns-request-id` of the broadcast and channel APIs.
    var extraHeaders: [HeaderField] = []
    /// The JSON body of a successful channel read or list.
    var successBody: [UInt8]?
    /// Channel management answers are not notifications and stay out of `accepted`.
    var countsAsNotification = true

    /// The JSON body APNs sends with an error, or a success body.
    var body: [UInt8]? {
        guard let reason else { return successBody }
        if let timestamp { return Array("{\"reason\":\"\(reason)\",\"timestamp\":\(timestamp)}".utf8) }
        return Array("{\"reason\":\"\(reason)\"}".utf8)
    }
}
