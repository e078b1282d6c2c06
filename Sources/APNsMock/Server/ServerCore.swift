import APNs
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// What every loop and connection of one server shares.
final class ServerCore: Sendable {
    let configuration: MockConfiguration
    let tls: TLSServerContext
    let faultStore: FaultStore
    let accounting: Accounting
    private let connectionCounter = Atomic<UInt64>(0)
    private let settings: LogicSettings

    init(configuration: MockConfiguration) throws(MockServerError) {
        self.configuration = configuration
        var clientCA: String?
        if case .certificate(let file) = configuration.authentication { clientCA = file }
        tls = try TLSServerContext(
            certificateChainFile: configuration.certificateChainFile,
            privateKeyFile: configuration.privateKeyFile, clientCAFile: clientCA, readAhead: configuration.readAhead,
            checksClientCertificateAfterHandshake: configuration.refusedCertificateReset,
            resetsOnRefusedCertificate: configuration.refusedCertificateHandshakeReset,
            maximumTLSVersion: configuration.maximumTLSVersion)
        faultStore = FaultStore(configuration.faults)
        accounting = Accounting(countsPerToken: configuration.countsPerToken, logLimit: configuration.acceptedLogLimit)
        var verifier: ProviderTokenVerifier?
        var startAtOne = false
        if case .token(let keys, let startAtOneStream) = configuration.authentication {
            var trusted: [String: ProviderTokenVerifier.TrustedKey] = [:]
            for key in keys {
                do {
                    trusted[key.keyID] = .init(teamID: key.teamID, publicKey: try ES256PublicKey(pem: key.publicKeyPEM),
                                               environment: key.environment)
                } catch {
                    throw .configuration("provider key \(key.keyID) (team \(key.teamID)): \(error)")
                }
            }
            verifier = ProviderTokenVerifier(keys: trusted, maximumAgeSeconds: Int64(configuration.providerTokenMaximumAgeSeconds),
                                             environment: configuration.development ? .sandbox : .production)
            startAtOne = startAtOneStream
        }
        var settings = LogicSettings(
            maxConcurrentStreams: configuration.maxConcurrentStreams,
            validator: Self.validator(configuration),
            tokenVerifier: verifier, startAtOneStream: startAtOne,
            providerTokenUpdateWindowSeconds: Int64(configuration.providerTokenUpdateWindowSeconds),
            certificateMode: clientCA != nil, logsAccepted: configuration.logsAccepted,
            development: configuration.development,
            broadcastJudge: BroadcastRequestJudge(
                allowedBundleIDs: configuration.allowedBundleIDs.isEmpty ? nil : Set(configuration.allowedBundleIDs)),
            channels: ChannelRegistry(maximumPerApp: configuration.maxChannelsPerApp))
        settings.broadcastDisabledBundleIDs = Set(configuration.broadcastDisabledBundleIDs)
        settings.topicMismatchBundleIDs = Set(configuration.topicMismatchBundleIDs)
        self.settings = settings
    }

    private static func validator(_ configuration: MockConfiguration) -> APNsRequestValidator {
        var validator = APNsRequestValidator(
            allowedBundleIDs: configuration.allowedBundleIDs.isEmpty ? nil : Set(configuration.allowedBundleIDs))
        validator.disallowedTopics = Set(configuration.disallowedTopics)
        return validator
    }

    func nextConnectionID() -> UInt64 { connectionCounter.add(1, ordering: .relaxed).newValue }

    func makeLogic(connectionID: UInt64, role: ListenerRole = .notifications) -> ConnectionLogic {
        ConnectionLogic(connectionID: connectionID, settings: settings, seed: UInt64.random(in: 0...UInt64.max), role: role)
    }

    var channels: ChannelRegistry { settings.channels }

    static func wallClockSeconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME_COARSE, &spec)
        return Int64(spec.tv_sec)
    }
}
