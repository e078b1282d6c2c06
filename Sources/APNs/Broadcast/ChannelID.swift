/// The identifier APNs gives a broadcast channel (`apns-channel-id`): standard base64 text.
///
/// APNs makes the id; pushd only carries it. The check is about form (the alphabet, padding
/// and a length bound) so that a mistyped id is refused where it was written, not after a
/// round trip that ends in BadChannelId.
public struct ChannelID: Sendable, Hashable, CustomStringConvertible {
    public let value: String

    /// Longer than any id APNs hands out, short enough to keep a header and a row small.
    public static let maximumLength = 128

    public init(_ text: String) throws(ChannelIDError) {
        let bytes = Array(text.utf8)
        if bytes.isEmpty { throw .empty }
        if bytes.count > ChannelID.maximumLength { throw .tooLong(bytes.count) }
        if bytes.count % 4 != 0 { throw .badLength(bytes.count) }
        var padding = 0
        for (offset, byte) in bytes.enumerated() {
            if byte == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            guard padding == 0 else { throw .paddingInside(offset: offset - padding) }
            guard ChannelID.isAlphabet(byte) else { throw .badCharacter(offset: offset) }
        }
        if padding > 2 { throw .paddingInside(offset: bytes.count - padding) }
        value = text
    }

    public var description: String { value }

    static func isAlphabet(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
             UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "+"), UInt8(ascii: "/"):
            return true
        default:
            return false
        }
    }
}

public enum ChannelIDError: Error, Sendable, Hashable, CustomStringConvertible {
    case empty
    case tooLong(Int)
    case badLength(Int)
    case badCharacter(offset: Int)
    case paddingInside(offset: Int)

    public var description: String {
        switch self {
        case .empty: return "the channel id is empty"
        case .tooLong(let n): return "the channel id has \(n) characters; at most \(ChannelID.maximumLength) are allowed"
        case .badLength(let n): return "the channel id has \(n) characters; base64 text comes in groups of 4"
        case .badCharacter(let offset): return "the channel id has a character at offset \(offset) that is not standard base64 (A-Z a-z 0-9 + /)"
        case .paddingInside(let offset): return "the channel id has '=' padding at offset \(offset) that is not at its end (at most two)"
        }
    }
}
