/// A 128-bit identifier in the canonical 8-4-4-4-12 hexadecimal form: APNs's `apns-id`
/// and `apns-request-id`, and the ids the queue stores for them.
///
/// The daemon's own type, so that neither it nor the engine maps FoundationEssentials for
/// `UUID`. It is printed lowercase, as APNs prints it; parsing takes either case.
public struct APNsID: Sendable, Hashable, CustomStringConvertible {
    /// The sixteen bytes, first in the high 64 bits.
    public let high: UInt64
    public let low: UInt64

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A random (version 4, RFC 9562) id.
    public init() {
        var generator = SystemRandomNumberGenerator()
        high = (generator.next() & ~0xF000) | 0x4000
        low = (generator.next() & ~(0xC000 << 48)) | (0x8000 << 48)
    }

    /// Parses `8-4-4-4-12` hexadecimal digits, either case; nil for anything else.
    public init?(_ text: some StringProtocol) {
        var parsed: APNsID?
        if let direct = text.utf8.withContiguousStorageIfAvailable({ APNsID(utf8: UnsafeRawBufferPointer($0)) }) {
            parsed = direct
        } else {
            var copy = String(text)
            copy.withUTF8 { parsed = APNsID(utf8: UnsafeRawBufferPointer($0)) }
        }
        guard let parsed else { return nil }
        self = parsed
    }

    /// Whether `text` is in the canonical form APNs asks for in `apns-id`: "32 lowercase
    /// hexadecimal digits" in 8-4-4-4-12 groups. Parsing (`init?`) still takes either case.
    public static func isCanonical(_ text: String) -> Bool {
        APNsID(text) != nil && !text.utf8.contains { $0 >= UInt8(ascii: "A") && $0 <= UInt8(ascii: "F") }
    }

    /// Parses the canonical form from raw bytes (a header value), without making a String.
    public init?(utf8 text: UnsafeRawBufferPointer) {
        guard text.count == 36 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        var digits = 0
        for (position, byte) in text.enumerated() {
            if position == 8 || position == 13 || position == 18 || position == 23 {
                guard byte == UInt8(ascii: "-") else { return nil }
                continue
            }
            let nibble: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            if digits < 16 { high = high << 4 | UInt64(nibble) } else { low = low << 4 | UInt64(nibble) }
            digits += 1
        }
        self.init(high: high, low: low)
    }

    /// The canonical lowercase form, made in one String (this runs for every answer).
    public var lowercasedString: String {
        let hexDigits: StaticString = "0123456789abcdef"
        return String(unsafeUninitializedCapacity: 36) { output in
            hexDigits.withUTF8Buffer { digits in
                var position = 0
                for index in 0..<32 {
                    if index == 8 || index == 12 || index == 16 || index == 20 {
                        output[position] = UInt8(ascii: "-")
                        position += 1
                    }
                    let word = index < 16 ? high : low
                    let shift = UInt64(60 - (index % 16) * 4)
                    output[position] = digits[Int((word >> shift) & 0xF)]
                    position += 1
                }
                return position
            }
        }
    }

    public var description: String { lowercasedString }
}
