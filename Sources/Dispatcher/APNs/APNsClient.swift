import APNs
import Posix

/// How an `APNsClient` proves who it is.
public enum APNsAuthentication: Sendable {
    /// Provider-token auth: every request carries the cache's current JWT; an
    /// ExpiredProviderToken answer makes the cache mint a new one.
    case token(ProviderTokenCache)
    /// Provider-token auth with the `authorization` value ("bearer <jwt>") from elsewhere, for
    /// example a token shared by every instance through the database; the source handles
    /// expiry itself.
    case tokenSource(@Sendable () throws -> String)
    /// TLS client certificate (PEM or PKCS#12).
    case certificate(ClientCredential)
}

/// One notification's result, with the APNs reading of it computed only when asked.
public struct APNsResult: Sendable {
    public let dispatch: DispatchResult

    public var tag: UInt64 { dispatch.tag }
    public var latencyNanoseconds: UInt64 { dispatch.latencyNanoseconds }
    public var attempts: Int { dispatch.attempts }
    public var transportError: TransportError? { dispatch.transportError }

    /// Status, apns-id, reason and timestamp; nil when the transport failed.
    public var response: APNsResponse? {
        dispatch.response?.apns
    }

    /// What the sender should do next (a transport failure counts as reconnect-then-retry).
    public var action: ResponseAction { response?.action ?? ResponseClassifier.transportFailure }
}

public enum APNsClientError: Error, Sendable, CustomStringConvertible {
    /// The provider token could not be signed.
    case providerToken(String)
    case invalidRequest(DispatchRequestError)

    public var description: String {
        switch self {
        case .providerToken(let message): return "could not sign the provider token: \(message)"
        case .invalidRequest(let error): return "notification cannot be sent: \(error)"
        }
    }
}

/// Sends `Notification`s for one credential and environment through an `HTTP2Dispatcher`.
/// A thin mapping: the APNs module builds paths and headers, the engine moves bytes.
public final class APNsClient: Sendable {
    public let dispatcher: HTTP2Dispatcher
    public let environment: APNsEnvironment
    let authentication: APNsAuthentication

    /// - Parameters:
    ///   - port: 443 or APNs's alternative 2197.
    ///   - hostOverride: send to this host instead of the environment's (apns-mock, a test server).
    ///   - tune: adjusts the engine settings (threads, connections, timeouts, proxy, CA) before start.
    public convenience init(environment: APNsEnvironment, authentication: APNsAuthentication, port: Int = APNsEnvironment.defaultPort,
                            hostOverride: String? = nil, tune: (inout DispatcherConfiguration) -> Void = { _ in },
                            metrics: any DispatcherMetricsHook = NoDispatcherMetrics(),
                            onResult: @escaping @Sendable (APNsResult) -> Void = { _ in }) throws(DispatcherConfigurationError) {
        var configuration = DispatcherConfiguration(host: hostOverride ?? environment.host, port: port)
        if case .certificate(let credential) = authentication { configuration.credential = credential }
        tune(&configuration)
        try self.init(configuration: configuration, environment: environment, authentication: authentication,
                      metrics: metrics, onResult: onResult)
    }

    /// A client on a complete engine configuration (host, port, credential, pool sizes and
    /// timeouts), as `pushd run` and `pushd send` build it from their configuration file.
    public init(configuration: DispatcherConfiguration, environment: APNsEnvironment, authentication: APNsAuthentication,
                metrics: any DispatcherMetricsHook = NoDispatcherMetrics(),
                onResult: @escaping @Sendable (APNsResult) -> Void = { _ in }) throws(DispatcherConfigurationError) {
        self.environment = environment
        self.authentication = authentication
        let tokenCache: ProviderTokenCache?
        if case .token(let cache) = authentication { tokenCache = cache } else { tokenCache = nil }
        dispatcher = try HTTP2Dispatcher(configuration: configuration, metrics: metrics) { result in
            APNsClient.refreshTokenIfExpired(result, cache: tokenCache)
            onResult(APNsResult(dispatch: result))
        }
    }

    /// After ExpiredProviderToken the next request must carry a new token; the cache mints it
    /// once however many answers report the same expired one.
    static func refreshTokenIfExpired(_ result: DispatchResult, cache: ProviderTokenCache?) {
        guard let cache, let response = result.response, response.status == 403,
              response.apns.reason == .expiredProviderToken, let rejected = cache.current else { return }
        _ = try? cache.tokenAfterExpiredProviderToken(rejected: rejected.jwt)
    }

    /// The `authorization` value requests carry now ("bearer <jwt>"); nil with a certificate.
    public func authorization() throws(APNsClientError) -> String? {
        do {
            switch authentication {
            case .token(let cache): return try cache.token().authorizationValue
            case .tokenSource(let source): return try source()
            case .certificate: return nil
            }
        } catch {
            throw .providerToken(String(describing: error))
        }
    }

    /// The engine request for `notification`, with the current provider token for token auth.
    public func request(for notification: APNs.Notification) throws(APNsClientError) -> DispatchRequest {
        try request(for: notification, authorization: try authorization())
    }

    private func request(for notification: APNs.Notification, authorization: String?) throws(APNsClientError) -> DispatchRequest {
        do {
            return try DispatchRequest(path: notification.path,
                                       headerLines: notification.headerFields(authorization: authorization).map(\.line),
                                       body: notification.payload)
        } catch {
            throw .invalidRequest(error)
        }
    }

    /// Queues `notification`; blocks while the engine's window is full. The result reaches
    /// `onResult` with `tag`. Returns the `authorization` value the request carries (nil with a
    /// certificate): an answer about the provider token is about that one, which may have been
    /// replaced by the time the answer comes.
    @discardableResult
    public func submit(_ notification: APNs.Notification, tag: UInt64) throws(APNsClientError) -> String? {
        let authorization = try authorization()
        dispatcher.submit(try request(for: notification, authorization: authorization), tag: tag)
        return authorization
    }

    /// Sends one notification and waits for its result.
    public func send(_ notification: APNs.Notification, tag: UInt64 = 0) async throws(APNsClientError) -> APNsResult {
        let request = try request(for: notification)
        let result = await dispatcher.send(request, tag: tag)
        if case .token(let cache) = authentication { APNsClient.refreshTokenIfExpired(result, cache: cache) }
        return APNsResult(dispatch: result)
    }

    public func shutdown(drainTimeoutMilliseconds: Int = 10_000) {
        dispatcher.shutdown(drainTimeoutMilliseconds: drainTimeoutMilliseconds)
    }
}
