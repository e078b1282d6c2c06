/// One HTTP/2 request header, name in lowercase as HTTP/2 requires.
public struct HeaderField: Sendable, Hashable, CustomStringConvertible {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// "name: value", the form libcurl's header list takes.
    public var line: String { name + ": " + value }
    public var description: String { line }

    /// HTTP/2 requires lowercase names; checking first avoids an allocation per header.
    static func hasUppercase(_ name: String) -> Bool {
        name.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "Z") }
    }
}

/// The request header names APNs reads.
public enum APNsHeader {
    public static let authorization = "authorization"
    public static let topic = "apns-topic"
    public static let pushType = "apns-push-type"
    public static let id = "apns-id"
    public static let expiration = "apns-expiration"
    public static let priority = "apns-priority"
    public static let collapseID = "apns-collapse-id"
    /// The channel of a broadcast or of a channel read or delete (`ChannelID`), and in the
    /// answer to a channel creation.
    public static let channelID = "apns-channel-id"
    /// The id of a channel management request, echoed in its answer.
    public static let requestID = "apns-request-id"
    /// Response header carrying the notification's id.
    public static let uniqueID = "apns-unique-id"
}
