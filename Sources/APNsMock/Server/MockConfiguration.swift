import APNs

/// A provider key the mock trusts for token authentication: the `kid` of the JWT, the team
/// that must be its `iss`, the P-256 public key (PEM) its signature must verify with, and the
/// one environment the key may be used in, if it is restricted to one (Apple's environment-
/// specific keys): a mock of the other environment (`MockConfiguration.development`) answers
/// its valid tokens 403 BadEnvironmentKeyInToken.
public struct ProviderKey: Sendable, Equatable, Codable {
    public var keyID: String
    public var teamID: String
    public var publicKeyPEM: String
    public var environment: APNsEnvironment?

    public init(keyID: String, teamID: String, publicKeyPEM: String, environment: APNsEnvironment? = nil) {
        self.keyID = keyID
        self.teamID = teamID
        self.publicKeyPEM = publicKeyPEM
        self.environment = environment
    }
}

/// How clients prove who they are, as in APNs's two modes.
public enum MockAuthentication: Sendable, Equatable {
    /// No check at all, for load tests that only want the transport.
    case none
    /// `authorization: bearer <JWT>` signed by one of `keys`. With `startAtOneStream`, a
    /// connection starts at MAX_CONCURRENT_STREAMS 1 and is raised after the first valid token.
    case token(keys: [ProviderKey], startAtOneStream: Bool)
    /// A TLS client certificate that chains to the CA in `clientCAFile`.
    case certificate(clientCAFile: String)
}

/// Everything the mock needs to start.
/// The newest TLS version a mock accepts (it always accepts TLS 1.2).
public enum MockTLSVersion: String, Sendable, Equatable {
    case tls12 = "1.2"
    case tls13 = "1.3"
}

public struct MockConfiguration: Sendable {
    /// Address to listen on; loopback unless told otherwise.
    public var host: String = "127.0.0.1"
    /// 0 picks a free port; read it back from `APNsMockServer.port`.
    public var port: UInt16 = 0
    public var certificateChainFile: String
    public var privateKeyFile: String
    public var authentication: MockAuthentication = .none
    /// MAX_CONCURRENT_STREAMS announced once a connection is trusted.
    public var maxConcurrentStreams: Int = 1000
    /// Bundle ids a client may post to (a topic is allowed when its bundle id, the topic
    /// without the push type's suffix, is listed); empty means any (TopicDisallowed otherwise).
    public var allowedBundleIDs: [String] = []
    /// Topics answered TopicDisallowed although their bundle id is allowed (`com.example.app.voip`
    /// for a certificate that covers the app but not its VoIP topic).
    public var disallowedTopics: [String] = []
    /// Event-loop threads, each with its own SO_REUSEPORT listener.
    public var loopThreads: Int = 1
    public var faults: FaultConfiguration = .none
    /// Certificate mode: refuse a client certificate that does not chain to the CA (or its
    /// absence) by resetting the TCP connection right after the handshake (SO_LINGER 0), with
    /// no TLS alert, instead of sending the alert. With TLS 1.3 the client considers the
    /// handshake done before the server has checked its certificate, so it sees a completed
    /// handshake and then only "Connection reset by peer": what a real server that closes the
    /// connection before the client reads its alert (under load, say) leaves a client.
    public var refusedCertificateReset: Bool = false
    /// Certificate mode: refuse a client certificate that does not chain to the CA by
    /// resetting the TCP connection at the moment the certificate fails verification, inside
    /// the handshake, instead of sending the TLS alert. With TLS 1.2 (`maximumTLSVersion`) the
    /// server checks the client's certificate before it sends its own Finished, so the client
    /// sees "Connection reset by peer" during its handshake, after it sent its certificate. A
    /// client that sends no certificate still gets the alert.
    public var refusedCertificateHandshakeReset: Bool = false
    /// The newest TLS version the mock accepts: `.tls12` plays a server that does not speak
    /// TLS 1.3, which checks a client certificate inside the handshake.
    public var maximumTLSVersion: MockTLSVersion = .tls13
    public var countsPerToken: Bool = false
    public var logsAccepted: Bool = false
    /// The accepted log keeps the first this many entries and counts the rest
    /// (`MockStats.acceptedNotLogged`): a long load test must not grow without bound.
    public var acceptedLogLimit: Int = 2_000_000
    /// A provider token changed on a connection sooner than this after the previous change is
    /// answered 429 TooManyProviderTokenUpdates. APNs's rule is 20 minutes; tests shorten it.
    public var providerTokenUpdateWindowSeconds: Int = 20 * 60
    /// Tokens whose `iat` is older than this are answered 403 ExpiredProviderToken. APNs's
    /// rule is an hour; tests shorten it to see the answer without waiting.
    public var providerTokenMaximumAgeSeconds: Int = 60 * 60
    /// OpenSSL reads as many TLS records per system call as a 64 KiB buffer holds, as a server
    /// with large socket reads does, instead of two reads per record. A sender that writes a
    /// record per request (libcurl) then costs the mock about a tenth of the reads. Off by
    /// default: more of a client's requests arrive in one read, so more of them come after a
    /// GOAWAY decided within that read and are refused, which tests of a client's GOAWAY
    /// accounting were not written for. The benchmarks turn it on.
    public var readAhead: Bool = false
    /// Stand in for APNs's development (sandbox) server, which adds `apns-unique-id` to its
    /// answers (the id Delivery Log queries take); the production server does not.
    public var development: Bool = false
    /// Connections that have not completed TLS within this time are closed.
    public var handshakeTimeoutMilliseconds: Int = 10_000
    /// Port of the plain-HTTP control endpoint on 127.0.0.1 (0 picks one); nil disables it.
    public var controlPort: UInt16? = nil
    /// Port of the channel management listener (TLS HTTP/2, like APNs's own host on 2195 or
    /// 2196; 0 picks one); nil leaves the channel management API out.
    public var channelManagementPort: UInt16? = nil
    /// Bundle ids whose Broadcast Push capability is off: their broadcasts and channel
    /// management requests are answered 400 FeatureNotEnabled.
    public var broadcastDisabledBundleIDs: [String] = []
    /// Bundle ids the credentials do not cover for broadcasts (another team's, or registered
    /// with different letter case): their broadcasts and channel management requests are
    /// answered 403 TopicMismatch. Device pushes are not affected.
    public var topicMismatchBundleIDs: [String] = []
    /// Channels one bundle id may have; one more is answered 400 CannotCreateChannelConfig.
    public var maxChannelsPerApp: Int = MockConfiguration.apnsChannelLimit

    /// APNs's limit per app and environment.
    public static let apnsChannelLimit = 10_000

    public init(certificateChainFile: String, privateKeyFile: String) {
        self.certificateChainFile = certificateChainFile
        self.privateKeyFile = privateKeyFile
    }

    func validated() throws(MockServerError) -> MockConfiguration {
        if maxConcurrentStreams < 1 || maxConcurrentStreams > Int(Int32.max) {
            throw .configuration("maxConcurrentStreams must be between 1 and \(Int32.max), got \(maxConcurrentStreams)")
        }
        if loopThreads < 1 || loopThreads > 64 {
            throw .configuration("loopThreads must be between 1 and 64, got \(loopThreads)")
        }
        if providerTokenUpdateWindowSeconds < 1 {
            throw .configuration("providerTokenUpdateWindowSeconds must be at least 1, got \(providerTokenUpdateWindowSeconds)")
        }
        if providerTokenMaximumAgeSeconds < 1 {
            throw .configuration("providerTokenMaximumAgeSeconds must be at least 1, got \(providerTokenMaximumAgeSeconds)")
        }
        if handshakeTimeoutMilliseconds < 1 {
            throw .configuration("handshakeTimeoutMilliseconds must be positive, got \(handshakeTimeoutMilliseconds)")
        }
        if refusedCertificateReset {
            guard case .certificate = authentication else {
                throw .configuration("refusedCertificateReset needs certificate authentication (a client CA)")
            }
        }
        if refusedCertificateHandshakeReset {
            guard case .certificate = authentication else {
                throw .configuration("refusedCertificateHandshakeReset needs certificate authentication (a client CA)")
            }
            if refusedCertificateReset {
                throw .configuration("refusedCertificateReset and refusedCertificateHandshakeReset are exclusive: a certificate is refused one way")
            }
        }
        if maxChannelsPerApp < 0 {
            throw .configuration("maxChannelsPerApp must not be negative, got \(maxChannelsPerApp)")
        }
        // The faults as the server uses them: tokens lowercased, as `setFaults` and the faults file have them.
        var validated = self
        validated.faults = try faults.validated()
        return validated
    }
}
