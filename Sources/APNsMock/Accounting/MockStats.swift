/// One notification the mock accepted, for proving that nothing was lost or sent twice.
public struct AcceptedNotification: Sendable, Hashable, Codable {
    public var apnsID: String
    public var token: String
    public var topic: String
    /// SHA-256 of the payload bytes, lowercase hex.
    public var payloadSHA256: String
    /// Which connection (numbered from 1 in accept order) and stream carried it.
    public var connectionID: UInt64
    public var streamID: Int32
}

/// A GOAWAY the mock sent: on which connection, and the last stream it promised to process.
public struct GoawayRecord: Sendable, Hashable, Codable {
    public var connectionID: UInt64
    public var lastStreamID: Int32

    public init(connectionID: UInt64, lastStreamID: Int32) {
        self.connectionID = connectionID
        self.lastStreamID = lastStreamID
    }
}

/// Requests received for one device token, and the answers given to them.
public struct TokenCounts: Sendable, Hashable, Codable {
    public var accepted: Int = 0
    public var rejected: Int = 0
    /// Complete requests received for the token, answered or not (one that made the mock reset
    /// its connection included): whether a request reached the server.
    public var received: Int = 0

    public init(accepted: Int = 0, rejected: Int = 0, received: Int = 0) {
        self.accepted = accepted
        self.rejected = rejected
        self.received = received
    }
}

/// Everything the mock counted since start (or the last reset).
public struct MockStats: Sendable, Equatable, Codable {
    /// Complete requests received and handed to the logic (answered, delayed or reset).
    public var requestsReceived: Int = 0
    /// Writes that carried answers held back by a delay (`--delay-ms`): answers due together
    /// share one, so far fewer than the delayed answers when many streams are in flight.
    public var delayedAnswerWrites: Int = 0
    /// Device notifications answered 200 (broadcasts are counted in `broadcastsAccepted`).
    public var accepted: Int = 0
    /// Error answers by "status reason", for example "410 Unregistered".
    public var rejected: [String: Int] = [:]
    /// Answers per device token, filled only when the server counts per token.
    public var perToken: [String: TokenCounts] = [:]
    /// Connections accepted since start: every reconnect counts again, so this is not how many
    /// were open at once (`connectionsOpenPeak`).
    public var connectionsAccepted: Int = 0
    public var connectionsClosed: Int = 0
    /// Closed because the client ended the connection (sent GOAWAY, closed or reset its end)
    /// before the mock sent any GOAWAY.
    public var connectionsClosedByClient: Int = 0
    /// The most connections open at one time.
    public var connectionsOpenPeak: Int = 0
    /// Connections reset on purpose (fault injection).
    public var connectionsReset: Int = 0
    /// Streams reset (RST_STREAM) instead of answered, on purpose (fault injection).
    public var streamsReset: Int = 0
    /// Streams refused because they arrived after a GOAWAY's last stream.
    public var streamsRefused: Int = 0
    /// Connections refused in certificate mode because the client's certificate did not
    /// verify (or there was none), with a TLS alert or, with `refusedCertificateReset`, a reset.
    public var clientCertificatesRefused: Int = 0
    /// Certificate mode: the subject of the client certificate each accepted connection
    /// presented (OpenSSL's one-line form), by connection as numbered in the accepted log, so
    /// that a test can tell which certificate carried a notification.
    public var clientCertificateSubjects: [UInt64: String] = [:]
    /// TLS handshakes completed by resuming an earlier session (a TLS 1.3 PSK, or a TLS 1.2
    /// session ticket or id; OpenSSL's `SSL_session_reused`): a client that reconnects and
    /// keeps its sessions skips the certificate exchange and its signatures.
    public var handshakesResumed: Int = 0
    public var goaways: [GoawayRecord] = []
    /// Accepted notifications left out of the accepted log because it was full.
    public var acceptedNotLogged: Int = 0
    /// HTTP/2 PING frames received from clients (not counting ACKs).
    public var pingsReceived: Int = 0
    /// RST_STREAM frames received from clients.
    public var clientResets: Int = 0
    /// Of those, resets of streams already answered: a well-behaved client sends none
    /// (libcurl 7.88 sends one after nearly every answer without a body).
    public var clientResetsAfterAnswer: Int = 0
    /// ES256 signature checks made: one per distinct token per connection, not per request.
    public var providerTokenVerifications: Int = 0
    /// Channels created and deleted through the channel management listener.
    public var channelsCreated: Int = 0
    public var channelsDeleted: Int = 0
    /// Channels that exist now (not zeroed by a stats reset: they are the server's state).
    public var channelsLive: Int = 0
    /// Broadcasts answered 200, by channel id.
    public var broadcastsAccepted: [String: Int] = [:]

    /// The number of error answers with this reason.
    public func rejected(_ reason: String) -> Int {
        rejected.reduce(0) { sum, entry in entry.key.hasSuffix(" " + reason) ? sum + entry.value : sum }
    }
}
