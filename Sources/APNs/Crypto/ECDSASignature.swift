/// Conversion between the two encodings of a P-256 ECDSA signature: the DER `ECDSA-Sig-Value`
/// OpenSSL produces and consumes, and the fixed 64-byte r‖s that JWS (ES256) requires.
public enum ECDSASignature {
    public static let rawLength = 64
    static let scalarLength = 32

    /// DER `SEQUENCE { INTEGER r, INTEGER s }` to r‖s, each left-padded to 32 bytes;
    /// nil when the bytes are not such a sequence or a value does not fit in 32 bytes.
    public static func rawFromDER(_ der: [UInt8]) -> [UInt8]? {
        var i = 0
        guard der.count >= 8, der[i] == 0x30 else { return nil }
        i += 1
        guard let sequenceLength = readLength(der, &i), i + sequenceLength == der.count else { return nil }
        var raw = [UInt8]()
        raw.reserveCapacity(rawLength)
        for _ in 0..<2 {
            guard i < der.count, der[i] == 0x02 else { return nil }
            i += 1
            guard let length = readLength(der, &i), length > 0, i + length <= der.count else { return nil }
            var value = der[i..<(i + length)]
            i += length
            while value.count > 1 && value.first == 0 { value = value.dropFirst() }
            guard value.count <= scalarLength else { return nil }
            raw.append(contentsOf: repeatElement(0, count: scalarLength - value.count))
            raw.append(contentsOf: value)
        }
        guard i == der.count else { return nil }
        return raw
    }

    /// r‖s to DER; nil unless exactly 64 bytes.
    public static func derFromRaw(_ raw: [UInt8]) -> [UInt8]? {
        guard raw.count == rawLength else { return nil }
        var body = [UInt8]()
        body.reserveCapacity(70)
        for half in [raw[0..<scalarLength], raw[scalarLength..<rawLength]] {
            var value = half
            while value.count > 1 && value.first == 0 { value = value.dropFirst() }
            let needsPad = (value.first ?? 0) & 0x80 != 0
            body.append(0x02)
            body.append(UInt8(value.count + (needsPad ? 1 : 0)))
            if needsPad { body.append(0) }
            body.append(contentsOf: value)
        }
        return [0x30, UInt8(body.count)] + body
    }

    private static func readLength(_ der: [UInt8], _ i: inout Int) -> Int? {
        guard i < der.count else { return nil }
        let first = der[i]
        i += 1
        if first < 0x80 { return Int(first) }
        guard first == 0x81, i < der.count else { return nil }
        let length = Int(der[i])
        i += 1
        return length >= 0x80 ? length : nil
    }
}
