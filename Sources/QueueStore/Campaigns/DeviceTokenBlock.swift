/// The device tokens of one leased chunk as raw bytes in one contiguous block: a chunk of a
/// thousand 32-byte tokens is one 32 KB array instead of a thousand strings of 64 hex digits
/// (each its own allocation of about 100 bytes). Hex is written only when a request is built
/// (`/3/device/<hex>`, straight into the request's path), or when a token is logged, parked
/// or pruned.
///
/// Every slot is `stride` bytes, the longest token of the block. APNs tokens are 32 bytes
/// today and all equal, so the per-token lengths are kept only when they differ (tokens of
/// 32 to 100 bytes are accepted, as `DeviceToken` does). A text that is not such a token
/// (not hexadecimal, an odd number of digits, too short or too long) keeps its text, so that
/// its target fails as `BadDeviceToken` as it did when every token was a string.
public struct DeviceTokenBlock: Sendable, Hashable {
    /// Hex digits of the shortest and longest token accepted (32 and 100 bytes), as `DeviceToken`.
    public static let minimumHexLength = 64
    public static let maximumHexLength = 200

    /// Bytes per slot: the longest valid token of the block.
    public private(set) var stride: Int
    public private(set) var count: Int
    private var storage: [UInt8]
    /// Each token's byte count when they differ; empty when every valid token is `stride` bytes.
    private var lengths: [UInt8]
    /// The texts that are not tokens, by index; their slots are zero.
    private var invalid: [Int: String]

    public init() {
        stride = 0
        count = 0
        storage = []
        lengths = []
        invalid = [:]
    }

    /// The block of `tokens`, hex texts in any case.
    public init(hex tokens: [String]) {
        self.init()
        let valid = tokens.compactMap { Self.byteLength(ofHex: $0.utf8) }
        stride = valid.max() ?? 0
        let uniform = valid.allSatisfy { $0 == stride }
        storage = [UInt8](repeating: 0, count: stride * tokens.count)
        for (index, token) in tokens.enumerated() { put(token.utf8, at: index, uniform: uniform, text: token) }
        count = tokens.count
    }

    /// Reads PostgreSQL's text form of a `text[]` of tokens, `{hex,hex,…}`; nil when it is not
    /// one (tokens are checked hex when imported, so no element is quoted or NULL).
    ///
    /// Every leased chunk's tokens pass through here, about a thousand at a time: the digits
    /// are looked up in one table and read twice in all (checked and measured, then decoded),
    /// not through generic slices, which cost about 3,200 instructions per token of 64 digits
    /// (docs/dispatcher-measurements.md).
    public init?(arrayLiteral bytes: UnsafeBufferPointer<UInt8>) {
        self.init()
        guard bytes.count >= 2, bytes.first == UInt8(ascii: "{"), bytes.last == UInt8(ascii: "}") else { return nil }
        if bytes.count == 2 { return }
        let end = bytes.count - 1
        // First where each element starts and how many bytes its token has (0: not a token),
        // and the longest, so the block is allocated once.
        var starts: [Int] = []
        var byteCounts: [UInt8] = []
        var longest = 0
        var shortest = Int.max
        let parsed: Bool = Self.nibbles.withUnsafeBufferPointer { table in
            var start = 1
            while start <= end {
                var index = start
                var hexOnly = true
                while index < end, bytes[index] != UInt8(ascii: ",") {
                    hexOnly = hexOnly && table[Int(bytes[index])] != 0xFF
                    index += 1
                }
                guard index > start, bytes[start] != UInt8(ascii: "\""), bytes[start] != UInt8(ascii: "N") else { return false }
                let digits = index - start
                var length = 0
                if hexOnly, digits >= Self.minimumHexLength, digits <= Self.maximumHexLength, digits % 2 == 0 {
                    length = digits / 2
                    longest = max(longest, length)
                    shortest = min(shortest, length)
                }
                starts.append(start)
                byteCounts.append(UInt8(length))
                start = index + 1
            }
            return true
        }
        guard parsed else { return nil }
        let elements = starts.count
        stride = longest
        let uniform = shortest == Int.max || shortest == longest
        if !uniform { lengths = byteCounts }
        storage = [UInt8](repeating: 0, count: stride * elements)
        Self.nibbles.withUnsafeBufferPointer { table in
            storage.withUnsafeMutableBufferPointer { slots in
                for element in 0..<elements {
                    let start = starts[element]
                    let length = Int(byteCounts[element])
                    guard length > 0 else {
                        let stop = element + 1 < elements ? starts[element + 1] - 1 : end
                        invalid[element] = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<stop]), as: UTF8.self)
                        continue
                    }
                    var out = element * stride
                    var digit = start
                    for _ in 0..<length {
                        slots[out] = table[Int(bytes[digit])] << 4 | table[Int(bytes[digit + 1])]
                        out += 1
                        digit += 2
                    }
                }
            }
        }
        count = elements
    }

    /// Each byte's value as a hex digit in either case, 0xFF for a byte that is not one.
    private static let nibbles: [UInt8] = (0...255).map { nibble(UInt8($0)) }

    /// Decodes one token's hex into slot `index`, or keeps its text when it is not a token.
    private mutating func put<Digits: Collection<UInt8>>(_ digits: Digits, at index: Int, uniform: Bool, text: String?) {
        let length = Self.byteLength(ofHex: digits)
        if !uniform { lengths.append(UInt8(length ?? 0)) }
        guard length != nil else {
            invalid[index] = text ?? String(decoding: digits, as: UTF8.self)
            return
        }
        storage.withUnsafeMutableBufferPointer { slots in
            var out = index * stride
            var high: UInt8 = 0
            var isHigh = true
            for digit in digits {
                let nibble = Self.nibble(digit)
                if isHigh { high = nibble } else { slots[out] = high << 4 | nibble; out += 1 }
                isHigh.toggle()
            }
        }
    }

    /// The byte count of a token given as hex digits in any case, nil when it is not a token.
    static func byteLength<Digits: Collection<UInt8>>(ofHex digits: Digits) -> Int? {
        let length = digits.count
        guard length >= minimumHexLength, length <= maximumHexLength, length % 2 == 0 else { return nil }
        for digit in digits where nibble(digit) == 0xFF { return nil }
        return length / 2
    }

    @inline(__always)
    private static func nibble(_ digit: UInt8) -> UInt8 {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: 0xFF
        }
    }

    /// Whether the text at `index` is a token; one that is not fails as `BadDeviceToken`.
    public func isValid(at index: Int) -> Bool {
        invalid.isEmpty || invalid[index] == nil
    }

    /// The token's byte count (0 for a text that is not a token).
    public func length(at index: Int) -> Int {
        if !isValid(at: index) { return 0 }
        return lengths.isEmpty ? stride : Int(lengths[index])
    }

    /// The raw bytes of the token at `index` (empty for a text that is not a token), in place.
    public func withBytes<Result>(at index: Int, _ body: (UnsafeRawBufferPointer) throws -> Result) rethrows -> Result {
        precondition(index >= 0 && index < count, "token \(index) is outside a block of \(count)")
        let length = length(at: index)
        return try storage.withUnsafeBytes { try body(UnsafeRawBufferPointer(rebasing: $0[index * stride ..< index * stride + length])) }
    }

    /// The token at `index` as lowercase hex, or the text as read when it is not a token.
    public func hex(at index: Int) -> String {
        if let text = invalid.isEmpty ? nil : invalid[index] { return text }
        return withBytes(at: index) { bytes in
            String(unsafeUninitializedCapacity: bytes.count * 2) { out in
                Self.writeHex(bytes, into: UnsafeMutableRawPointer(out.baseAddress!))
                return bytes.count * 2
            }
        }
    }

    private static let digits: (UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8, UInt8) =
        (0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66)

    /// Writes `bytes` as lowercase hex, two digits per byte, at `out`.
    @inline(__always)
    static func writeHex(_ bytes: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer) {
        withUnsafeBytes(of: digits) { table in
            var position = 0
            for byte in bytes {
                out.storeBytes(of: table[Int(byte >> 4)], toByteOffset: position, as: UInt8.self)
                out.storeBytes(of: table[Int(byte & 0x0F)], toByteOffset: position + 1, as: UInt8.self)
                position += 2
            }
        }
    }
}
