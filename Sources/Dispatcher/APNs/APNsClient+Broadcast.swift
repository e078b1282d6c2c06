import APNs
import Posix

/// Broadcast sends and channel management through the same client and engine. APNs takes
/// both with a provider token or on a connection that presents the app's certificate (then
/// with no `authorization` header).
extension APNsClient {
    /// A client for the channel management API: its own host and port per environment
    /// (2195 development, 2196 production), unless a test server stands in.
    public static func channelManagement(environment: APNsEnvironment, authentication: APNsAuthentication,
                                         hostOverride: String? = nil, portOverride: Int? = nil,
                                         tune: (inout DispatcherConfiguration) -> Void = { _ in },
                                         metrics: any DispatcherMetricsHook = NoDispatcherMetrics()) throws(DispatcherConfigurationError) -> APNsClient {
        try APNsClient(environment: environment, authentication: authentication,
                       port: portOverride ?? environment.channelManagementPort,
                       hostOverride: hostOverride ?? environment.channelManagementHost, tune: tune, metrics: metrics)
    }

    public func request(for broadcast: BroadcastNotification) throws(APNsClientError) -> DispatchRequest {
        let authorization = try authorization()
        do {
            return try DispatchRequest(path: broadcast.path, headerLines: broadcast.headerFields(authorization: authorization).map(\.line),
                                       body: broadcast.payload)
        } catch {
            throw .invalidRequest(error)
        }
    }

    public func request(for channelRequest: ChannelRequest) throws(APNsClientError) -> DispatchRequest {
        let authorization = try authorization()
        do {
            return try DispatchRequest(method: DispatchRequest.Method(rawValue: channelRequest.method) ?? .post, path: channelRequest.path,
                                       headerLines: channelRequest.headerFields(authorization: authorization).map(\.line),
                                       body: channelRequest.body)
        } catch {
            throw .invalidRequest(error)
        }
    }

    /// Queues a broadcast; its result reaches `onResult` with `tag`.
    public func submit(_ broadcast: BroadcastNotification, tag: UInt64) throws(APNsClientError) {
        dispatcher.submit(try request(for: broadcast), tag: tag)
    }

    public func send(_ broadcast: BroadcastNotification, tag: UInt64 = 0) async throws(APNsClientError) -> APNsResult {
        await sendAndRefresh(try request(for: broadcast), tag: tag)
    }

    public func send(_ channelRequest: ChannelRequest, tag: UInt64 = 0) async throws(APNsClientError) -> APNsResult {
        await sendAndRefresh(try request(for: channelRequest), tag: tag)
    }

    private func sendAndRefresh(_ request: DispatchRequest, tag: UInt64) async -> APNsResult {
        let result = await dispatcher.send(request, tag: tag)
        if case .token(let cache) = authentication { APNsClient.refreshTokenIfExpired(result, cache: cache) }
        return APNsResult(dispatch: result)
    }
}

extension APNsResult {
    /// The id of a channel just created (201 with `apns-channel-id`).
    public var createdChannelID: String? { dispatch.response?.channelID }

    /// The body of a successful channel read or list.
    public var successBody: [UInt8] { dispatch.response.map { (200..<300).contains($0.status) ? $0.body : [] } ?? [] }
}
