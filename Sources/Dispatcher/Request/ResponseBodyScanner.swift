/// Reads top-level string and integer members of the small flat JSON objects APNs sends in
/// error bodies, without building a document: the hot path only pays for it on errors.
enum ResponseBodyScanner {
    static func stringValue(of key: String, in body: [UInt8]) -> String? {
        guard let start = valueStart(of: key, in: body), start < body.count, body[start] == UInt8(ascii: "\"") else { return nil }
        var bytes = [UInt8]()
        var index = start + 1
        while index < body.count {
            let byte = body[index]
            if byte == UInt8(ascii: "\"") { return String(decoding: bytes, as: UTF8.self) }
            if byte == UInt8(ascii: "\\") {
                index += 1
                guard index < body.count else { return nil }
                let escaped = body[index]
                switch escaped {
                case UInt8(ascii: "n"): bytes.append(0x0A)
                case UInt8(ascii: "t"): bytes.append(0x09)
                case UInt8(ascii: "r"): bytes.append(0x0D)
                default: bytes.append(escaped)
                }
            } else {
                bytes.append(byte)
            }
            index += 1
        }
        return nil
    }

    static func integerValue(of key: String, in body: [UInt8]) -> Int64? {
        guard var index = valueStart(of: key, in: body) else { return nil }
        var value: Int64 = 0
        var digits = 0
        while index < body.count, body[index] >= UInt8(ascii: "0"), body[index] <= UInt8(ascii: "9") {
            let (times, overflowA) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflowB) = times.addingReportingOverflow(Int64(body[index] - UInt8(ascii: "0")))
            guard !overflowA, !overflowB else { return nil }
            value = sum
            digits += 1
            index += 1
        }
        return digits > 0 ? value : nil
    }

    /// Index of the first byte of the value of `"key":`, skipping whitespace.
    private static func valueStart(of key: String, in body: [UInt8]) -> Int? {
        let needle = [UInt8(ascii: "\"")] + Array(key.utf8) + [UInt8(ascii: "\"")]
        guard body.count >= needle.count else { return nil }
        var index = 0
        var depth = 0
        var inString = false
        while index < body.count {
            let byte = body[index]
            if inString {
                if byte == UInt8(ascii: "\\") { index += 2; continue }
                if byte == UInt8(ascii: "\"") { inString = false }
                index += 1
                continue
            }
            switch byte {
            case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
            case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
            case UInt8(ascii: "\""):
                if depth == 1, index + needle.count <= body.count, body[index..<(index + needle.count)].elementsEqual(needle) {
                    var cursor = index + needle.count
                    while cursor < body.count, body[cursor] == 0x20 || body[cursor] == 0x09 || body[cursor] == 0x0A || body[cursor] == 0x0D { cursor += 1 }
                    if cursor < body.count, body[cursor] == UInt8(ascii: ":") {
                        cursor += 1
                        while cursor < body.count, body[cursor] == 0x20 || body[cursor] == 0x09 || body[cursor] == 0x0A || body[cursor] == 0x0D { cursor += 1 }
                        return cursor
                    }
                }
                inString = true
            default: break
            }
            index += 1
        }
        return nil
    }
}
