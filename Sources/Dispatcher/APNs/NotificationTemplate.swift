import APNs

/// Requests for notifications that differ only in their device token, as a campaign chunk's
/// do: the headers are checked and packed once (again only when the provider token
/// changes) and every request shares them and the payload bytes, so each one costs its
/// path alone.
///
/// Thread rule: one thread at a time (a campaign worker keeps one per chunk and host).
public final class NotificationTemplate {
    public let client: APNsClient
    /// The notification every request repeats, its token aside; checked by the caller.
    public let notification: APNs.Notification
    /// The `authorization` value of the requests it builds now (nil with a certificate).
    public private(set) var authorization: String?
    /// The header lines and the payload, laid out once for all the requests.
    private var shared: RequestBytes

    public init(client: APNsClient, notification: APNs.Notification) throws(APNsClientError) {
        self.client = client
        self.notification = notification
        authorization = try client.authorization()
        shared = DispatchRequest.sharedPart(headers: try Self.headers(of: notification, authorization: authorization),
                                            body: notification.payload)
    }

    private static func headers(of notification: APNs.Notification, authorization: String?) throws(APNsClientError) -> DispatchRequest.HeaderBlock {
        do {
            return try DispatchRequest.HeaderBlock(lines: notification.headerFields(authorization: authorization).map(\.line))
        } catch {
            throw .invalidRequest(error)
        }
    }

    /// The request for `token`, with the provider token current now.
    public func request(for token: DeviceToken) throws(APNsClientError) -> DispatchRequest {
        try refreshAuthorization()
        return try requestWithCurrentHeaders(for: token)
    }

    /// Takes the provider token current now into the headers, when it changed.
    public func refreshAuthorization() throws(APNsClientError) {
        let current = try client.authorization()
        if current != authorization {
            shared = DispatchRequest.sharedPart(headers: try Self.headers(of: notification, authorization: current),
                                                body: notification.payload)
            authorization = current
        }
    }

    /// The request for `token` with the provider token of the last `refreshAuthorization`: a
    /// batch asks for the token once (a lock and a lookup by key in pushd) instead of per request.
    public func requestWithCurrentHeaders(for token: DeviceToken) throws(APNsClientError) -> DispatchRequest {
        do {
            return try DispatchRequest(path: "/3/device/" + token.hex, shared: shared)
        } catch {
            throw .invalidRequest(error)
        }
    }

    /// The request for the token whose raw bytes are `token` (32 to 100, as `DeviceToken`
    /// accepts), with the provider token of the last `refreshAuthorization`. The hex digits
    /// are written straight into the request's path: no string is made for the token.
    public func requestWithCurrentHeaders(forTokenBytes token: UnsafeRawBufferPointer) -> DispatchRequest {
        precondition((DeviceToken.minimumHexLength / 2...DeviceToken.maximumHexLength / 2).contains(token.count),
                     "a device token of \(token.count) bytes")
        let prefix = Self.devicePathPrefix
        return DispatchRequest(pathLength: prefix.count + token.count * 2, shared: shared) { out in
            prefix.withUnsafeBytes { out.copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
            withUnsafeBytes(of: Self.hexDigits) { digits in
                var position = prefix.count
                for byte in token {
                    out.storeBytes(of: digits[Int(byte >> 4)], toByteOffset: position, as: UInt8.self)
                    out.storeBytes(of: digits[Int(byte & 0x0F)], toByteOffset: position + 1, as: UInt8.self)
                    position += 2
                }
            }
        }
    }

    private static let devicePathPrefix: [UInt8] = Array("/3/device/".utf8)
    private static let hexDigits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
        (0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66)

    /// Queues the notification for `token`; blocks while the engine's window is full.
    public func submit(to token: DeviceToken, tag: UInt64) throws(APNsClientError) {
        client.dispatcher.submit(try request(for: token), tag: tag)
    }
}
