/// A device token as APNs addresses it in `/3/device/<hex>`: lowercase hexadecimal.
///
/// Tokens are 32 bytes today; Apple warns they may grow, so up to 100 bytes are accepted.
public struct DeviceToken: Sendable, Hashable, CustomStringConvertible, Comparable {
    public static let minimumHexLength = 64
    public static let maximumHexLength = 200

    /// Lowercase hexadecimal, as sent to APNs.
    public let hex: String

    /// Accepts hexadecimal in any case (surrounding whitespace is not accepted: it usually means
    /// the value was cut from somewhere wrong, and APNs would reject it anyway).
    public init(_ text: String) throws(DeviceTokenError) {
        let utf8 = text.utf8
        guard !utf8.isEmpty else { throw .empty }
        // Tokens come lowercase from the queue (a campaign's chunk holds thousands): such a
        // token is its own text, with no copy.
        // The bytes are read in place (a native string's are contiguous), not through the
        // string's index: that took about 2,300 instructions per token of a campaign.
        if (DeviceToken.minimumHexLength...DeviceToken.maximumHexLength).contains(utf8.count), utf8.count % 2 == 0,
           utf8.withContiguousStorageIfAvailable({ $0.allSatisfy(DeviceToken.isLowercaseHex) }) ?? utf8.allSatisfy(DeviceToken.isLowercaseHex) {
            hex = text
            return
        }
        var lowered = [UInt8]()
        lowered.reserveCapacity(utf8.count)
        var offset = 0
        for byte in utf8 {
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"):
                lowered.append(byte)
            case UInt8(ascii: "A")...UInt8(ascii: "F"):
                lowered.append(byte | 0x20)
            default:
                throw .invalidCharacter(DeviceToken.describe(byte: byte, in: text, at: offset), offset: offset)
            }
            offset += 1
        }
        guard lowered.count >= DeviceToken.minimumHexLength else { throw .tooShort(length: lowered.count) }
        guard lowered.count <= DeviceToken.maximumHexLength else { throw .tooLong(length: lowered.count) }
        guard lowered.count % 2 == 0 else { throw .oddLength(length: lowered.count) }
        hex = String(decoding: lowered, as: UTF8.self)
    }

    private static func isLowercaseHex(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")) || (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "f"))
    }

    /// Builds the token from the raw bytes an app receives from
    /// `didRegisterForRemoteNotificationsWithDeviceToken`.
    public init(bytes: [UInt8]) throws(DeviceTokenError) {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        try self.init(String(decoding: out, as: UTF8.self))
    }

    /// The token's raw bytes.
    public var bytes: [UInt8] {
        var out = [UInt8]()
        out.reserveCapacity(hex.utf8.count / 2)
        var high: UInt8 = 0
        var isHigh = true
        for byte in hex.utf8 {
            let nibble = byte <= UInt8(ascii: "9") ? byte - UInt8(ascii: "0") : byte - UInt8(ascii: "a") + 10
            if isHigh { high = nibble } else { out.append(high << 4 | nibble) }
            isHigh.toggle()
        }
        return out
    }

    public var description: String { hex }

    /// The first eight hex digits followed by an ellipsis, for logs: a full token identifies a
    /// person's device and does not belong in log files.
    public var redacted: String { String(hex.prefix(8)) + "…" }

    public static func < (lhs: DeviceToken, rhs: DeviceToken) -> Bool { lhs.hex < rhs.hex }

    private static func describe(byte: UInt8, in text: String, at offset: Int) -> String {
        if byte >= 0x21 && byte < 0x7f { return "'\(Character(Unicode.Scalar(byte)))'" }
        if byte == 0x20 { return "a space" }
        return "byte 0x" + String(byte, radix: 16, uppercase: true)
    }
}

/// Why a string is not a device token.
public enum DeviceTokenError: Error, Sendable, Hashable, CustomStringConvertible {
    case empty
    case invalidCharacter(String, offset: Int)
    case oddLength(length: Int)
    case tooShort(length: Int)
    case tooLong(length: Int)

    public var description: String {
        switch self {
        case .empty:
            return "device token is empty"
        case .invalidCharacter(let what, let offset):
            return "device token has \(what) at offset \(offset); only hexadecimal digits are allowed"
        case .oddLength(let length):
            return "device token has \(length) hex digits; an even number is required (two per byte)"
        case .tooShort(let length):
            return "device token has \(length) hex digits; at least \(DeviceToken.minimumHexLength) are required"
        case .tooLong(let length):
            return "device token has \(length) hex digits; at most \(DeviceToken.maximumHexLength) are allowed"
        }
    }
}
