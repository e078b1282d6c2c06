import APNs
import Posix

/// Decides the answer to each request on one connection: protocol checks, authentication,
/// then injected faults. Holds the connection's own state (stream counts, concurrency).
///
/// A plain value driven by the connection's loop thread; time comes in with each request and
/// randomness from a seeded generator, so tests can pin both.
struct ConnectionLogic {
    let connectionID: UInt64
    let settings: LogicSettings
    /// Which API the listener that accepted this connection serves.
    let role: ListenerRole
    private(set) var completedStreams = 0
    private(set) var concurrencyLowered = false
    private(set) var hasValidToken = false
    private(set) var tokens: ProviderTokenState
    private(set) var random: SplitMix64
    private var announcedMaxStreams: Int
    private var validation = ValidationMemo()

    init(connectionID: UInt64, settings: LogicSettings, seed: UInt64, role: ListenerRole = .notifications) {
        self.connectionID = connectionID
        self.settings = settings
        self.role = role
        self.random = SplitMix64(seed: seed)
        tokens = ProviderTokenState(updateWindowSeconds: settings.providerTokenUpdateWindowSeconds)
        announcedMaxStreams = settings.tokenVerifier != nil && settings.startAtOneStream ? 1 : settings.maxConcurrentStreams
    }

    /// HTTP/2's REFUSED_STREAM error code (RFC 9113 section 7).
    static let refusedStream: UInt32 = 7

    /// MAX_CONCURRENT_STREAMS of the connection's first SETTINGS frame.
    var initialMaxConcurrentStreams: Int { announcedMaxStreams }

    /// `now` is seconds since 1970, for the provider token's age.
    mutating func handle(_ request: IncomingRequest, faults: FaultConfiguration, now: Int64) -> Verdict {
        completedStreams += 1
        if let limit = faults.resetAfterStreams, completedStreams >= limit { return .resetConnection }
        if let answered = faults.refuseAfterStreams, completedStreams > answered { return .resetStream(errorCode: Self.refusedStream) }
        if faults.resetRate > 0 && random.nextUnit() < faults.resetRate { return .resetConnection }
        if faults.streamResetRate > 0 && random.nextUnit() < faults.streamResetRate {
            return .resetStream(errorCode: UInt32(faults.streamResetErrorCode))
        }

        var answer = decide(request, faults: faults, now: now)
        if settings.development && role == .notifications && request.path.utf8.starts(with: APNsRequestValidator.devicePathPrefix.utf8) {
            // APNs's development server adds the id Delivery Log queries take; production does not.
            answer.extraHeaders.append(HeaderField(name: APNsHeader.uniqueID, value: makeID()))
        }
        answer.delayMilliseconds = UInt64(faults.delayMilliseconds)
        if faults.randomDelayMilliseconds > 0 {
            answer.delayMilliseconds += random.next() % UInt64(faults.randomDelayMilliseconds + 1)
        }
        if !faults.delayedTokens.isEmpty, let token = answer.token, let extra = faults.delayedTokens[token] {
            answer.delayMilliseconds += UInt64(max(0, extra))
        }
        concurrencyLowered = faults.lowerConcurrencyAfterError && !(200..<300).contains(answer.status)
        let waitingForToken = settings.tokenVerifier != nil && settings.startAtOneStream && !hasValidToken
        let wanted = waitingForToken || concurrencyLowered ? 1 : settings.maxConcurrentStreams
        if wanted != announcedMaxStreams {
            announcedMaxStreams = wanted
            answer.newMaxConcurrentStreams = wanted
        }
        return .answer(answer)
    }

    private mutating func decide(_ request: IncomingRequest, faults: FaultConfiguration, now: Int64) -> Answer {
        let requestedID = request.header(APNsHeader.id).flatMap { APNsID.isCanonical($0) ? $0.lowercased() : nil }
        if request.bodyTruncated { return reject(413, .payloadTooLarge, apnsID: requestedID ?? makeID()) }
        if role == .channelManagement { return decideChannelRequest(request, faults: faults, now: now) }
        if BroadcastRequestJudge.isBroadcastPath(request.path) {
            return decideBroadcast(request, faults: faults, now: now, requestedID: requestedID)
        }
        let accepted: AcceptedRequest
        switch validation.validate(request, with: settings.validator) {
        case .rejected(let status, let reason):
            return reject(status, reason, apnsID: requestedID ?? makeID())
        case .accepted(let value):
            accepted = value
        }
        let apnsID = accepted.apnsID ?? makeID()
        let token = accepted.token.hex
        if settings.certificateMode && !accepted.pushType.supportsCertificateAuthentication {
            // APNs documents no reason for this; InvalidPushType is what a client can act on.
            return reject(400, .invalidPushType, apnsID: apnsID, token: token)
        }

        if let (status, reason) = authenticate(accepted.authorization, now: now) {
            return reject(status, reason, apnsID: apnsID, token: token)
        }

        if let forbidden = faults.forbiddenReason, faults.forbiddenConnections.map({ connectionID <= UInt64(max(0, $0)) }) ?? true {
            return Answer(status: 403, apnsID: apnsID, reason: forbidden.isEmpty ? nil : forbidden, token: token)
        }

        // Empty lists are the rule; hashing the 64-character token for them cost every request.
        if !faults.unregisteredTokens.isEmpty, let timestamp = faults.unregisteredTokens[token] {
            var answer = reject(410, .unregistered, apnsID: apnsID, token: token)
            answer.timestamp = timestamp
            return answer
        }
        if !faults.badDeviceTokens.isEmpty && faults.badDeviceTokens.contains(token) {
            return reject(400, .badDeviceToken, apnsID: apnsID, token: token)
        }
        if !faults.tokensNotForTopic.isEmpty && faults.tokensNotForTopic.contains(token) {
            return reject(400, .deviceTokenNotForTopic, apnsID: apnsID, token: token)
        }
        if !faults.forbiddenTokens.isEmpty && faults.forbiddenTokens.contains(token) {
            return reject(403, .forbidden, apnsID: apnsID, token: token)
        }
        if !faults.tokenTopics.isEmpty, let topic = faults.tokenTopics[token], topic != accepted.topic {
            return reject(400, .deviceTokenNotForTopic, apnsID: apnsID, token: token)
        }

        if let (status, reason) = rollErrorRates(faults) { return reject(status, reason, apnsID: apnsID, token: token) }

        var answer = Answer(status: 200, apnsID: apnsID, token: token)
        if settings.logsAccepted {
            answer.logEntry = AcceptedNotification(
                apnsID: apnsID, token: token, topic: accepted.topic, payloadSHA256: PayloadDigest.sha256Hex(request.body),
                connectionID: connectionID, streamID: request.streamID)
        }
        return answer
    }

    /// The provider token's verdict, nil when accepted (or when the server checks none).
    mutating func authenticate(_ authorization: String?, now: Int64) -> (Int, APNsReason)? {
        guard let verifier = settings.tokenVerifier else { return nil }
        switch tokens.authorize(authorization, now: now, verifier: verifier) {
        case .rejected(let status, let reason):
            return (status, reason)
        case .accepted:
            hasValidToken = true
            return nil
        }
    }

    /// The rate faults (429, 500, 503) rolled once; nil lets the request through.
    mutating func rollErrorRates(_ faults: FaultConfiguration) -> (Int, APNsReason)? {
        let errorRates = faults.tooManyRequestsRate + faults.internalServerErrorRate + faults.serviceUnavailableRate
            + faults.shutdownRate
        let roll = errorRates > 0 ? random.nextUnit() : 1
        if roll < faults.tooManyRequestsRate { return (429, .tooManyRequests) }
        if roll < faults.tooManyRequestsRate + faults.internalServerErrorRate { return (500, .internalServerError) }
        if roll < errorRates - faults.shutdownRate { return (503, .serviceUnavailable) }
        if roll < errorRates { return (503, .shutdown) }
        return nil
    }

    func reject(_ status: Int, _ reason: APNsReason, apnsID: String, token: String? = nil) -> Answer {
        Answer(status: status, apnsID: apnsID, reason: reason.rawValue, token: token)
    }

    mutating func makeID() -> String {
        let high = random.next()
        let low = random.next()
        // A version 4 UUID, as APNs makes one when the request had no apns-id.
        return APNsID(high: (high & ~0xF000) | 0x4000, low: (low & 0x3FFF_FFFF_FFFF_FFFF) | 0x8000_0000_0000_0000).lowercasedString
    }
}

/// Server-wide settings the logic reads; fixed at start.
struct LogicSettings: Sendable {
    var maxConcurrentStreams: Int
    var validator: APNsRequestValidator
    /// Set in token-auth mode.
    var tokenVerifier: ProviderTokenVerifier?
    var startAtOneStream: Bool
    /// TooManyProviderTokenUpdates window: APNs's 20 minutes unless a test shortens it.
    var providerTokenUpdateWindowSeconds: Int64 = ProviderTokenState.apnsUpdateWindowSeconds
    /// Certificate-auth mode, where location and Live Activity pushes are refused.
    var certificateMode: Bool = false
    var logsAccepted: Bool
    /// Answers carry `apns-unique-id`, as APNs's development (sandbox) server's do.
    var development: Bool = false
    /// Broadcast and channel management checks.
    var broadcastJudge = BroadcastRequestJudge()
    /// Bundle ids without the Broadcast Push capability: 400 FeatureNotEnabled to their
    /// broadcasts and channel management requests.
    var broadcastDisabledBundleIDs: Set<String> = []
    /// Bundle ids the credentials do not cover for broadcasts: 403 TopicMismatch to their
    /// broadcasts and channel management requests.
    var topicMismatchBundleIDs: Set<String> = []
    /// Shared by every connection of both listeners.
    var channels = ChannelRegistry(maximumPerApp: MockConfiguration.apnsChannelLimit)
}

/// The API a listener serves: APNs keeps channel management on its own host and port.
enum ListenerRole: Sendable {
    case notifications
    case channelManagement
}

/// A small fast generator: fault rates are rolled on every request and need no cryptographic
/// quality.
struct SplitMix64 {
    private var state: UInt64
    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    mutating func nextUnit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}
