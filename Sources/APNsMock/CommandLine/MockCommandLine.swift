import APNs
import Posix

/// What `apns-mock` was asked to do.
public enum MockCommand: Sendable {
    case help
    case generateCertificates(directory: String)
    case serve(MockConfiguration, faultsFile: String?)
}

/// Parses `apns-mock`'s arguments; every error names the flag and what it expected.
public enum MockCommandLine {
    public static let usage = """
    apns-mock — an APNs look-alike HTTP/2 server for tests, demos and load tests

    USAGE
      apns-mock gen-certs DIR         write ca.pem, server.pem/.key (localhost, 127.0.0.1), client.pem/.key
      apns-mock [serve] --cert FILE --key FILE [options]

    SERVER
      --host ADDR                     IPv4 address to listen on (default 127.0.0.1)
      --port N                        port (default 2197; 0 picks a free one)
      --threads N                     event-loop threads, one SO_REUSEPORT listener each (default 1)
      --max-streams N                 MAX_CONCURRENT_STREAMS (default 1000)
      --topic BUNDLE_ID               allowed bundle id; repeat; none means any
      --control-port N                plain-HTTP control endpoint on 127.0.0.1 (/metrics, /stats,
                                      /accepted, /faults GET|PUT, /goaway, /reset)
      --channel-port N                channel management API (broadcast channels) on its own TLS
                                      HTTP/2 listener, as APNs's 2195/2196 (0 picks a free one)
      --max-channels N                channels per bundle id before CannotCreateChannelConfig
                                      (default 10000)
      --no-broadcast BUNDLE_ID        the bundle id lacks the Broadcast Push capability: its
                                      broadcasts and channel requests get 400 FeatureNotEnabled; repeat
      --topic-mismatch BUNDLE_ID      the key does not cover the bundle id for broadcasts: its
                                      broadcasts and channel requests get 403 TopicMismatch; repeat
      --development                   answer as APNs's development server: add apns-unique-id
      --log-accepted                  keep a log of accepted notifications (GET /accepted)
      --log-limit N                   keep at most N log entries, count the rest (default 2000000)
      --count-per-token               count answers per device token
      --read-ahead                    read as many TLS records per system call as 64 KiB hold
                                      (the benchmarks use it; see MockConfiguration.readAhead)

    AUTHENTICATION (default: none)
      --provider-key KID:TEAM:FILE[:ENV]
                                      trust this ES256 public key (PEM) for token auth; repeat.
                                      ENV (production or sandbox) restricts the key to one
                                      environment: a mock of the other one (--development is
                                      sandbox) answers its tokens 403 BadEnvironmentKeyInToken
      --no-start-at-one-stream        with token auth, announce --max-streams from the start
      --token-update-window S         answer 429 TooManyProviderTokenUpdates to a token change
                                      within S seconds of the previous one (default 1200, APNs's rule)
      --client-ca FILE                certificate auth: require a client certificate from this CA
      --refused-certificate-reset     with --client-ca: refuse a certificate by resetting the TCP
                                      connection right after the handshake, with no TLS alert (as
                                      a server under load can), instead of sending the alert
      --refused-certificate-handshake-reset
                                      with --client-ca: refuse a certificate by resetting the TCP
                                      connection inside the handshake, when it fails verification,
                                      with no TLS alert (with --tls-max 1.2: before the handshake
                                      is done on the client's side)
      --tls-max 1.2|1.3               the newest TLS version accepted (default 1.3)

    FAULTS (also from --faults FILE, a JSON object with the same names; SIGHUP reloads it)
      --faults FILE                   JSON fault configuration
      --unregistered TOKEN[:MS]       answer 410 Unregistered (timestamp MS, default now)
      --bad-device-token TOKEN        answer 400 BadDeviceToken
      --not-for-topic TOKEN           answer 400 DeviceTokenNotForTopic
      --forbidden-token TOKEN         answer 403 Forbidden (the other tokens are accepted)
      --forbidden-channel ID          answer 403 Forbidden to broadcasts to channel ID
      --token-topic TOKEN=TOPIC       the token was issued for TOPIC: a notification to any other
                                      topic answers 400 DeviceTokenNotForTopic
      --rate-429 R, --rate-500 R, --rate-503 R
                                      share (0…1) answered TooManyRequests / InternalServerError /
                                      ServiceUnavailable
      --rate-shutdown R               share (0…1) answered 503 Shutdown
      --forbidden-reason R            answer every valid notification 403 with reason R ("" for none)
      --forbidden-connections N       --forbidden-reason only on the first N connections accepted
      --goaway-after-streams N        GOAWAY once a connection has begun N streams
      --goaway-after-seconds S        GOAWAY S seconds after a connection starts
      --reset-after-streams N         TCP reset when a connection completes N streams
      --refuse-after-streams N        answer N streams per connection, refuse the rest (REFUSED_STREAM)
      --reset-rate R                  share (0…1) of requests answered with a TCP reset
      --stream-reset-rate R           share (0…1) of requests whose stream is reset (RST_STREAM)
      --stream-reset-code N           HTTP/2 error code of those resets (2 INTERNAL_ERROR, default;
                                      7 REFUSED_STREAM)
      --delay-ms N                    fixed delay before each answer
      --random-delay-ms N             extra uniform random delay 0…N
      --lower-concurrency-after-error drop MAX_CONCURRENT_STREAMS to 1 after an error answer
      --ignore-pings                  leave clients' HTTP/2 PINGs unanswered
    """

    public static func parse(_ arguments: [String], now: Timestamp = Timestamp()) throws(MockServerError) -> MockCommand {
        var remaining = arguments[...]
        if remaining.first == "--help" || remaining.first == "-h" || remaining.first == "help" { return .help }
        if remaining.first == "gen-certs" {
            remaining.removeFirst()
            guard let directory = remaining.first, remaining.count == 1 else {
                throw .configuration("gen-certs takes exactly one argument, the output directory")
            }
            return .generateCertificates(directory: directory)
        }
        if remaining.first == "serve" { remaining.removeFirst() }

        var certificate: String?
        var key: String?
        var host = "127.0.0.1"
        var port: UInt16 = 2197
        var threads = 1
        var maxStreams = 1000
        var topics: [String] = []
        var controlPort: UInt16?
        var channelPort: UInt16?
        var maxChannels = MockConfiguration.apnsChannelLimit
        var broadcastDisabled: [String] = []
        var topicMismatch: [String] = []
        var logAccepted = false
        var development = false
        var logLimit: Int?
        var perToken = false
        var readAhead = false
        var providerKeys: [ProviderKey] = []
        var startAtOne = true
        var tokenUpdateWindow: Int?
        var clientCA: String?
        var refusedCertificateReset = false
        var refusedCertificateHandshakeReset = false
        var maximumTLSVersion = MockTLSVersion.tls13
        var faultsFile: String?
        var faults = FaultConfiguration()

        while let flag = remaining.popFirst() {
            func value() throws(MockServerError) -> String {
                guard let next = remaining.popFirst() else { throw .configuration("\(flag) needs a value") }
                return next
            }
            func integer<T: FixedWidthInteger>(_: T.Type) throws(MockServerError) -> T {
                let text = try value()
                guard let parsed = T(text) else { throw .configuration("\(flag) expects an integer, got \(text)") }
                return parsed
            }
            func rate() throws(MockServerError) -> Double {
                let text = try value()
                guard let parsed = Double(text), (0...1).contains(parsed) else {
                    throw .configuration("\(flag) expects a share between 0 and 1, got \(text)")
                }
                return parsed
            }
            switch flag {
            case "--help", "-h": return .help
            case "--cert": certificate = try value()
            case "--key": key = try value()
            case "--host": host = try value()
            case "--port": port = try integer(UInt16.self)
            case "--threads": threads = try integer(Int.self)
            case "--max-streams": maxStreams = try integer(Int.self)
            case "--topic": topics.append(try value())
            case "--control-port": controlPort = try integer(UInt16.self)
            case "--channel-port": channelPort = try integer(UInt16.self)
            case "--max-channels": maxChannels = try integer(Int.self)
            case "--no-broadcast": broadcastDisabled.append(try value())
            case "--topic-mismatch": topicMismatch.append(try value())
            case "--log-accepted": logAccepted = true
            case "--development": development = true
            case "--log-limit": logLimit = try integer(Int.self)
            case "--count-per-token": perToken = true
            case "--read-ahead": readAhead = true
            case "--provider-key":
                let text = try value()
                var parts = text.split(separator: ":", maxSplits: 2).map(String.init)
                guard parts.count == 3 else { throw .configuration("--provider-key expects KEY_ID:TEAM_ID:PEM_FILE[:ENV], got \(text)") }
                // A trailing ":production" or ":sandbox" binds the key; any other colon is the file's.
                var environment: APNsEnvironment?
                if let colon = parts[2].lastIndex(of: ":"),
                   let bound = APNsEnvironment(rawValue: String(parts[2][parts[2].index(after: colon)...])) {
                    environment = bound
                    parts[2] = String(parts[2][..<colon])
                }
                guard let pem = try? FileSystem.readText(parts[2]) else {
                    throw .configuration("--provider-key: cannot read the public key file \(parts[2])")
                }
                providerKeys.append(ProviderKey(keyID: parts[0], teamID: parts[1], publicKeyPEM: pem, environment: environment))
            case "--no-start-at-one-stream": startAtOne = false
            case "--token-update-window": tokenUpdateWindow = try integer(Int.self)
            case "--client-ca": clientCA = try value()
            case "--refused-certificate-reset": refusedCertificateReset = true
            case "--refused-certificate-handshake-reset": refusedCertificateHandshakeReset = true
            case "--tls-max":
                let text = try value()
                guard let version = MockTLSVersion(rawValue: text) else { throw .configuration("--tls-max expects 1.2 or 1.3, got \(text)") }
                maximumTLSVersion = version
            case "--faults":
                let file = try value()
                faultsFile = file
                faults = try loadFaults(file)
            case "--unregistered":
                let text = try value()
                let parts = text.split(separator: ":", maxSplits: 1).map(String.init)
                var timestamp = Int64(now.timeIntervalSince1970 * 1000)
                if parts.count == 2 {
                    guard let parsed = Int64(parts[1]) else { throw .configuration("--unregistered expects TOKEN[:MILLISECONDS], got \(text)") }
                    timestamp = parsed
                }
                faults.unregisteredTokens[parts[0].lowercased()] = timestamp
            case "--bad-device-token": faults.badDeviceTokens.insert(try value().lowercased())
            case "--not-for-topic": faults.tokensNotForTopic.insert(try value().lowercased())
            case "--forbidden-token": faults.forbiddenTokens.insert(try value().lowercased())
            case "--forbidden-channel": faults.forbiddenChannels.insert(try value())
            case "--token-topic":
                let text = try value()
                let parts = text.split(separator: "=", maxSplits: 1).map(String.init)
                guard parts.count == 2, !parts[0].isEmpty, !parts[1].isEmpty else {
                    throw .configuration("--token-topic expects TOKEN=TOPIC, got \(text)")
                }
                faults.tokenTopics[parts[0].lowercased()] = parts[1]
            case "--rate-429": faults.tooManyRequestsRate = try rate()
            case "--rate-500": faults.internalServerErrorRate = try rate()
            case "--rate-503": faults.serviceUnavailableRate = try rate()
            case "--rate-shutdown": faults.shutdownRate = try rate()
            case "--forbidden-reason": faults.forbiddenReason = try value()
            case "--forbidden-connections": faults.forbiddenConnections = try integer(Int.self)
            case "--goaway-after-streams": faults.goawayAfterStreams = try integer(Int.self)
            case "--goaway-after-seconds":
                let text = try value()
                guard let seconds = Double(text), seconds > 0 else { throw .configuration("--goaway-after-seconds expects a positive number, got \(text)") }
                faults.goawayAfterSeconds = seconds
            case "--reset-after-streams": faults.resetAfterStreams = try integer(Int.self)
            case "--refuse-after-streams": faults.refuseAfterStreams = try integer(Int.self)
            case "--reset-rate": faults.resetRate = try rate()
            case "--stream-reset-rate": faults.streamResetRate = try rate()
            case "--stream-reset-code": faults.streamResetErrorCode = try integer(Int.self)
            case "--delay-ms": faults.delayMilliseconds = try integer(Int.self)
            case "--random-delay-ms": faults.randomDelayMilliseconds = try integer(Int.self)
            case "--lower-concurrency-after-error": faults.lowerConcurrencyAfterError = true
            case "--ignore-pings": faults.ignorePings = true
            default: throw .configuration("unknown option \(flag); see apns-mock --help")
            }
        }
        guard let certificate, let key else {
            throw .configuration("serving needs --cert FILE and --key FILE (make a pair with: apns-mock gen-certs DIR)")
        }
        if clientCA != nil && !providerKeys.isEmpty {
            throw .configuration("--client-ca and --provider-key are exclusive: a connection uses certificate or token auth")
        }
        var configuration = MockConfiguration(certificateChainFile: certificate, privateKeyFile: key)
        configuration.host = host
        configuration.port = port
        configuration.loopThreads = threads
        configuration.maxConcurrentStreams = maxStreams
        configuration.allowedBundleIDs = topics
        configuration.controlPort = controlPort
        configuration.channelManagementPort = channelPort
        configuration.maxChannelsPerApp = maxChannels
        configuration.broadcastDisabledBundleIDs = broadcastDisabled
        configuration.topicMismatchBundleIDs = topicMismatch
        configuration.logsAccepted = logAccepted
        configuration.development = development
        if let logLimit {
            guard logLimit >= 1 else { throw MockServerError.configuration("--log-limit must be at least 1, got \(logLimit)") }
            configuration.acceptedLogLimit = logLimit
        }
        configuration.countsPerToken = perToken
        configuration.readAhead = readAhead
        if let tokenUpdateWindow {
            guard tokenUpdateWindow >= 1 else {
                throw MockServerError.configuration("--token-update-window must be at least 1 second, got \(tokenUpdateWindow)")
            }
            configuration.providerTokenUpdateWindowSeconds = tokenUpdateWindow
        }
        configuration.faults = try faults.validated()
        if refusedCertificateReset && clientCA == nil {
            throw .configuration("--refused-certificate-reset needs --client-ca: it changes how a client certificate is refused")
        }
        configuration.refusedCertificateReset = refusedCertificateReset
        if refusedCertificateHandshakeReset && clientCA == nil {
            throw .configuration("--refused-certificate-handshake-reset needs --client-ca: it changes how a client certificate is refused")
        }
        configuration.refusedCertificateHandshakeReset = refusedCertificateHandshakeReset
        configuration.maximumTLSVersion = maximumTLSVersion
        if let clientCA {
            configuration.authentication = .certificate(clientCAFile: clientCA)
        } else if !providerKeys.isEmpty {
            configuration.authentication = .token(keys: providerKeys, startAtOneStream: startAtOne)
        }
        return .serve(try configuration.validated(), faultsFile: faultsFile)
    }

    /// Reads a fault file (JSON); the error names the file and what was wrong.
    public static func loadFaults(_ file: String) throws(MockServerError) -> FaultConfiguration {
        let data: [UInt8]
        do {
            data = try FileSystem.read(file)
        } catch {
            throw .configuration("cannot read the faults file \(file): \(error.reason)")
        }
        do {
            return try JSONValueDecoder().decode(FaultConfiguration.self, from: data).validated()
        } catch let error as MockServerError {
            throw .configuration("faults file \(file): \(error)")
        } catch {
            throw .configuration("faults file \(file) is not a valid fault JSON object: \(error)")
        }
    }
}
