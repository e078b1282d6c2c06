/// Faults the mock injects, set at start and replaceable at run time.
///
/// Encoded as JSON for the config file and the control endpoint; every field is optional in
/// the JSON so a file names only the faults it wants.
public struct FaultConfiguration: Sendable, Equatable, Codable {
    /// Tokens answering 410 Unregistered, with the time (milliseconds since 1970) APNs reports
    /// the token stopped being valid.
    public var unregisteredTokens: [String: Int64]
    /// Tokens answering 400 BadDeviceToken.
    public var badDeviceTokens: Set<String>
    /// Tokens answering 400 DeviceTokenNotForTopic.
    public var tokensNotForTopic: Set<String>
    /// Token → the topic it was issued for (an app's bundle id, or that plus a push type's
    /// suffix): a notification to any other topic answers 400 DeviceTokenNotForTopic, as
    /// APNs answers for a token of another app, or an alert token sent a VoIP push.
    public var tokenTopics: [String: String]
    /// Share of otherwise valid requests answered 429 TooManyRequests (0…1).
    public var tooManyRequestsRate: Double
    /// Share answered 500 InternalServerError (0…1).
    public var internalServerErrorRate: Double
    /// Share answered 503 ServiceUnavailable (0…1).
    public var serviceUnavailableRate: Double
    /// Send GOAWAY once a connection has begun this many streams; later streams are left
    /// unprocessed so the client retries them elsewhere.
    public var goawayAfterStreams: Int?
    /// Send GOAWAY this many seconds after a connection starts.
    public var goawayAfterSeconds: Double?
    /// Reset the TCP connection (RST, no answer) when this many streams have completed.
    public var resetAfterStreams: Int?
    /// Answer the first this many streams of every connection and refuse every later one
    /// (RST_STREAM REFUSED_STREAM once read), the connection staying open: "partial churn", a
    /// front end or middlebox that ends each new connection after a few answers (libcurl closes
    /// a connection that refused a stream and sends the refused requests on a new one).
    public var refuseAfterStreams: Int?
    /// Share of requests on which the TCP connection is reset instead of answered (0…1).
    public var resetRate: Double
    /// Share of requests whose stream is reset (RST_STREAM with `streamResetErrorCode`) instead
    /// of answered, the connection staying open (0…1).
    public var streamResetRate: Double
    /// The HTTP/2 error code of those RST_STREAM frames: 2 INTERNAL_ERROR (the default),
    /// 7 REFUSED_STREAM, or any other code of RFC 9113 section 7 (1…13).
    public var streamResetErrorCode: Int
    /// Fixed delay before every answer, in milliseconds.
    public var delayMilliseconds: Int
    /// Extra random delay, uniform in 0…this, in milliseconds.
    public var randomDelayMilliseconds: Int
    /// Token → milliseconds its answers wait beyond the others' (whatever they answer): one
    /// slow answer among quick ones, as a request that waits on a busy APNs node is.
    public var delayedTokens: [String: Int]
    /// Like APNs, drop the connection's MAX_CONCURRENT_STREAMS to 1 after an error answer and
    /// raise it again after the next accepted notification.
    public var lowerConcurrencyAfterError: Bool
    /// Leave clients' HTTP/2 PINGs unanswered on connections opened from now on, as a dead
    /// path would.
    public var ignorePings: Bool
    /// Share answered 503 Shutdown (0…1), as a server about to go away answers.
    public var shutdownRate: Double

    /// Answer every otherwise valid notification 403 with this reason, as APNs answers when it
    /// refuses the credentials (a reason added after pushd was written, say); the empty string
    /// answers 403 without a body.
    public var forbiddenReason: String?
    /// Tokens whose otherwise valid notifications answer 403 Forbidden ("The specified action
    /// is not allowed"), the other tokens' being accepted: a refusal of one request, not of
    /// the credentials.
    public var forbiddenTokens: Set<String>
    /// Channel ids (base64, as sent) whose otherwise valid broadcasts answer 403 Forbidden,
    /// whether or not the channel exists.
    public var forbiddenChannels: Set<String>
    /// `forbiddenReason` answers only on the connections the mock numbers up to this (it
    /// numbers them from 1 as it accepts them); later connections are answered as without it,
    /// as when a new connection is what APNs asks for (UnrelatedKeyIdInToken). nil: every one.
    public var forbiddenConnections: Int?

    public init(
        unregisteredTokens: [String: Int64] = [:],
        badDeviceTokens: Set<String> = [],
        tokensNotForTopic: Set<String> = [],
        tokenTopics: [String: String] = [:],
        tooManyRequestsRate: Double = 0,
        internalServerErrorRate: Double = 0,
        serviceUnavailableRate: Double = 0,
        goawayAfterStreams: Int? = nil,
        goawayAfterSeconds: Double? = nil,
        resetAfterStreams: Int? = nil,
        refuseAfterStreams: Int? = nil,
        resetRate: Double = 0,
        streamResetRate: Double = 0,
        streamResetErrorCode: Int = 2,
        delayMilliseconds: Int = 0,
        randomDelayMilliseconds: Int = 0,
        delayedTokens: [String: Int] = [:],
        lowerConcurrencyAfterError: Bool = false,
        ignorePings: Bool = false,
        shutdownRate: Double = 0,
        forbiddenReason: String? = nil,
        forbiddenTokens: Set<String> = [],
        forbiddenChannels: Set<String> = [],
        forbiddenConnections: Int? = nil
    ) {
        self.unregisteredTokens = unregisteredTokens
        self.badDeviceTokens = badDeviceTokens
        self.tokensNotForTopic = tokensNotForTopic
        self.tokenTopics = tokenTopics
        self.tooManyRequestsRate = tooManyRequestsRate
        self.internalServerErrorRate = internalServerErrorRate
        self.serviceUnavailableRate = serviceUnavailableRate
        self.goawayAfterStreams = goawayAfterStreams
        self.goawayAfterSeconds = goawayAfterSeconds
        self.resetAfterStreams = resetAfterStreams
        self.refuseAfterStreams = refuseAfterStreams
        self.resetRate = resetRate
        self.streamResetRate = streamResetRate
        self.streamResetErrorCode = streamResetErrorCode
        self.delayMilliseconds = delayMilliseconds
        self.randomDelayMilliseconds = randomDelayMilliseconds
        self.delayedTokens = delayedTokens
        self.lowerConcurrencyAfterError = lowerConcurrencyAfterError
        self.ignorePings = ignorePings
        self.shutdownRate = shutdownRate
        self.forbiddenReason = forbiddenReason
        self.forbiddenTokens = forbiddenTokens
        self.forbiddenChannels = forbiddenChannels
        self.forbiddenConnections = forbiddenConnections
    }

    /// No faults: every valid request is accepted at once.
    public static let none = FaultConfiguration()

    /// Checks ranges and lowercases tokens (APNs tokens are case-insensitive); the error
    /// names the field and the rule.
    public func validated() throws(MockServerError) -> FaultConfiguration {
        var normalized = self
        normalized.unregisteredTokens = Dictionary(
            unregisteredTokens.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        normalized.badDeviceTokens = Set(badDeviceTokens.map { $0.lowercased() })
        normalized.tokensNotForTopic = Set(tokensNotForTopic.map { $0.lowercased() })
        normalized.forbiddenTokens = Set(forbiddenTokens.map { $0.lowercased() })
        normalized.tokenTopics = Dictionary(tokenTopics.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        normalized.delayedTokens = Dictionary(delayedTokens.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        if let negative = normalized.delayedTokens.first(where: { $0.value < 0 }) {
            throw .configuration("fault delayedTokens gives token \(negative.key) a negative delay (\(negative.value) ms)")
        }
        if let empty = normalized.tokenTopics.first(where: { $0.value.isEmpty }) {
            throw .configuration("fault tokenTopics gives token \(empty.key) an empty topic")
        }
        let rates: [(String, Double)] = [
            ("tooManyRequestsRate", tooManyRequestsRate), ("internalServerErrorRate", internalServerErrorRate),
            ("serviceUnavailableRate", serviceUnavailableRate), ("resetRate", resetRate), ("streamResetRate", streamResetRate),
            ("shutdownRate", shutdownRate),
        ]
        for (name, value) in rates where !(0...1).contains(value) {
            throw .configuration("fault \(name) must be between 0 and 1, got \(value)")
        }
        if tooManyRequestsRate + internalServerErrorRate + serviceUnavailableRate + shutdownRate > 1 {
            throw .configuration("faults tooManyRequestsRate + internalServerErrorRate + serviceUnavailableRate + shutdownRate must not exceed 1")
        }
        if let goawayAfterStreams, goawayAfterStreams < 1 {
            throw .configuration("fault goawayAfterStreams must be at least 1, got \(goawayAfterStreams)")
        }
        if let goawayAfterSeconds, !(goawayAfterSeconds > 0) {
            throw .configuration("fault goawayAfterSeconds must be positive, got \(goawayAfterSeconds)")
        }
        if let resetAfterStreams, resetAfterStreams < 1 {
            throw .configuration("fault resetAfterStreams must be at least 1, got \(resetAfterStreams)")
        }
        if let refuseAfterStreams, refuseAfterStreams < 1 {
            throw .configuration("fault refuseAfterStreams must be at least 1 (the streams answered on each connection), got \(refuseAfterStreams)")
        }
        if !(1...13).contains(streamResetErrorCode) {
            throw .configuration("fault streamResetErrorCode must be an HTTP/2 error code from 1 to 13 (2 INTERNAL_ERROR, 7 REFUSED_STREAM), got \(streamResetErrorCode)")
        }
        if let forbiddenConnections, forbiddenConnections < 1 {
            throw .configuration("fault forbiddenConnections must be at least 1, got \(forbiddenConnections)")
        }
        if delayMilliseconds < 0 || randomDelayMilliseconds < 0 {
            throw .configuration("faults delayMilliseconds and randomDelayMilliseconds must not be negative")
        }
        return normalized
    }

    private enum CodingKeys: String, CodingKey {
        case unregisteredTokens, badDeviceTokens, tokensNotForTopic, tokenTopics, tooManyRequestsRate, internalServerErrorRate
        case serviceUnavailableRate, goawayAfterStreams, goawayAfterSeconds, resetAfterStreams, refuseAfterStreams, resetRate
        case streamResetRate, streamResetErrorCode
        case delayMilliseconds, randomDelayMilliseconds, delayedTokens, lowerConcurrencyAfterError, ignorePings, shutdownRate
        case forbiddenReason, forbiddenTokens, forbiddenChannels, forbiddenConnections
    }

    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(
            unregisteredTokens: try c.decodeIfPresent([String: Int64].self, forKey: .unregisteredTokens) ?? [:],
            badDeviceTokens: try c.decodeIfPresent(Set<String>.self, forKey: .badDeviceTokens) ?? [],
            tokensNotForTopic: try c.decodeIfPresent(Set<String>.self, forKey: .tokensNotForTopic) ?? [],
            tokenTopics: try c.decodeIfPresent([String: String].self, forKey: .tokenTopics) ?? [:],
            tooManyRequestsRate: try c.decodeIfPresent(Double.self, forKey: .tooManyRequestsRate) ?? 0,
            internalServerErrorRate: try c.decodeIfPresent(Double.self, forKey: .internalServerErrorRate) ?? 0,
            serviceUnavailableRate: try c.decodeIfPresent(Double.self, forKey: .serviceUnavailableRate) ?? 0,
            goawayAfterStreams: try c.decodeIfPresent(Int.self, forKey: .goawayAfterStreams),
            goawayAfterSeconds: try c.decodeIfPresent(Double.self, forKey: .goawayAfterSeconds),
            resetAfterStreams: try c.decodeIfPresent(Int.self, forKey: .resetAfterStreams),
            refuseAfterStreams: try c.decodeIfPresent(Int.self, forKey: .refuseAfterStreams),
            resetRate: try c.decodeIfPresent(Double.self, forKey: .resetRate) ?? 0,
            streamResetRate: try c.decodeIfPresent(Double.self, forKey: .streamResetRate) ?? 0,
            streamResetErrorCode: try c.decodeIfPresent(Int.self, forKey: .streamResetErrorCode) ?? 2,
            delayMilliseconds: try c.decodeIfPresent(Int.self, forKey: .delayMilliseconds) ?? 0,
            randomDelayMilliseconds: try c.decodeIfPresent(Int.self, forKey: .randomDelayMilliseconds) ?? 0,
            delayedTokens: try c.decodeIfPresent([String: Int].self, forKey: .delayedTokens) ?? [:],
            lowerConcurrencyAfterError: try c.decodeIfPresent(Bool.self, forKey: .lowerConcurrencyAfterError) ?? false,
            ignorePings: try c.decodeIfPresent(Bool.self, forKey: .ignorePings) ?? false,
            shutdownRate: try c.decodeIfPresent(Double.self, forKey: .shutdownRate) ?? 0,
            forbiddenReason: try c.decodeIfPresent(String.self, forKey: .forbiddenReason),
            forbiddenTokens: try c.decodeIfPresent(Set<String>.self, forKey: .forbiddenTokens) ?? [],
            forbiddenChannels: try c.decodeIfPresent(Set<String>.self, forKey: .forbiddenChannels) ?? [],
            forbiddenConnections: try c.decodeIfPresent(Int.self, forKey: .forbiddenConnections))
    }
}
