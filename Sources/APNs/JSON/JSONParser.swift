/// A strict RFC 8259 reader over UTF-8 bytes.
///
/// Built for untrusted input on the send path: every read is bounds-checked, nesting is
/// limited (so a payload of 4,000 `[` cannot exhaust the stack), strings must be valid UTF-8
/// with no raw control characters or lone surrogates, and nothing follows the document.
/// `skipValue` checks a value without building it, so custom payload keys cost no allocation.
public struct JSONParser {
    public static let defaultMaxDepth = 64

    let bytes: [UInt8]
    let maxDepth: Int
    var index: Int = 0

    public init(_ bytes: [UInt8], maxDepth: Int = JSONParser.defaultMaxDepth) {
        self.bytes = bytes
        self.maxDepth = max(1, maxDepth)
    }

    public mutating func parseDocument() throws(JSONError) -> JSONValue {
        skipWhitespace()
        let value = try parseValue(depth: 1)
        try expectEnd()
        return value
    }

    // MARK: Structure

    mutating func expectEnd() throws(JSONError) {
        skipWhitespace()
        if index < bytes.count { throw fail("unexpected \(describeCurrent()) after the end of the document") }
    }

    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x09, 0x0A, 0x0D: index += 1
            default: return
            }
        }
    }

    func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

    func fail(_ message: String) -> JSONError { JSONError(offset: index, message: message) }

    func describeCurrent() -> String {
        guard let byte = peek() else { return "end of input" }
        if byte >= 0x21 && byte < 0x7f { return "'\(Character(Unicode.Scalar(byte)))'" }
        return "byte 0x" + String(byte, radix: 16, uppercase: true)
    }

    mutating func parseValue(depth: Int) throws(JSONError) -> JSONValue {
        guard let byte = peek() else { throw fail("expected a value, found end of input") }
        switch byte {
        case UInt8(ascii: "{"):
            return .object(try parseObject(depth: depth))
        case UInt8(ascii: "["):
            return .array(try parseArray(depth: depth))
        case UInt8(ascii: "\""):
            return .string(try parseString())
        case UInt8(ascii: "t"):
            try expectLiteral("true"); return .bool(true)
        case UInt8(ascii: "f"):
            try expectLiteral("false"); return .bool(false)
        case UInt8(ascii: "n"):
            try expectLiteral("null"); return .null
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            let start = index
            try scanNumber()
            return .number(JSONNumber(validatedText: String(decoding: bytes[start..<index], as: UTF8.self)))
        default:
            throw fail("expected a value, found \(describeCurrent())")
        }
    }

    /// Checks one value without building it.
    mutating func skipValue(depth: Int) throws(JSONError) {
        guard let byte = peek() else { throw fail("expected a value, found end of input") }
        switch byte {
        case UInt8(ascii: "{"):
            try enterContainer(depth: depth)
            if try beginObject() { return }
            repeat {
                try skipString()
                try expectColon()
                try skipValue(depth: depth + 1)
            } while try nextObjectMember()
        case UInt8(ascii: "["):
            try enterContainer(depth: depth)
            index += 1
            skipWhitespace()
            if peek() == UInt8(ascii: "]") { index += 1; return }
            while true {
                try skipValue(depth: depth + 1)
                skipWhitespace()
                guard let next = peek() else { throw fail("unterminated array") }
                index += 1
                if next == UInt8(ascii: "]") { return }
                if next != UInt8(ascii: ",") { index -= 1; throw fail("expected ',' or ']' in an array, found \(describeCurrent())") }
                skipWhitespace()
            }
        case UInt8(ascii: "\""):
            try skipString()
        case UInt8(ascii: "t"):
            try expectLiteral("true")
        case UInt8(ascii: "f"):
            try expectLiteral("false")
        case UInt8(ascii: "n"):
            try expectLiteral("null")
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
            try scanNumber()
        default:
            throw fail("expected a value, found \(describeCurrent())")
        }
    }

    func enterContainer(depth: Int) throws(JSONError) {
        if depth > maxDepth { throw fail("nesting deeper than \(maxDepth) levels") }
    }

    /// Consumes "{" and whitespace; true when the object is empty (and its "}" consumed),
    /// otherwise leaves the reader at the first key.
    mutating func beginObject() throws(JSONError) -> Bool {
        index += 1
        skipWhitespace()
        if peek() == UInt8(ascii: "}") { index += 1; return true }
        if peek() != UInt8(ascii: "\"") { throw fail("expected a string key, found \(describeCurrent())") }
        return false
    }

    mutating func expectColon() throws(JSONError) {
        skipWhitespace()
        guard peek() == UInt8(ascii: ":") else { throw fail("expected ':' after an object key, found \(describeCurrent())") }
        index += 1
        skipWhitespace()
    }

    /// After a member's value: true when another member follows (reader at its key),
    /// false when the object ended (its "}" consumed).
    mutating func nextObjectMember() throws(JSONError) -> Bool {
        skipWhitespace()
        guard let next = peek() else { throw fail("unterminated object") }
        if next == UInt8(ascii: "}") { index += 1; return false }
        guard next == UInt8(ascii: ",") else { throw fail("expected ',' or '}' in an object, found \(describeCurrent())") }
        index += 1
        skipWhitespace()
        guard peek() == UInt8(ascii: "\"") else { throw fail("expected a string key, found \(describeCurrent())") }
        return true
    }

    mutating func parseObject(depth: Int) throws(JSONError) -> JSONObject {
        try enterContainer(depth: depth)
        var members = [JSONMember]()
        if try beginObject() { return JSONObject(members) }
        repeat {
            let keyOffset = index
            let key = try parseString()
            for member in members where member.key == key {
                throw JSONError(offset: keyOffset, message: "duplicate key \"\(key)\"")
            }
            try expectColon()
            let value = try parseValue(depth: depth + 1)
            members.append(JSONMember(key: key, value: value))
        } while try nextObjectMember()
        return JSONObject(members)
    }

    mutating func parseArray(depth: Int) throws(JSONError) -> [JSONValue] {
        try enterContainer(depth: depth)
        index += 1
        skipWhitespace()
        var elements = [JSONValue]()
        if peek() == UInt8(ascii: "]") { index += 1; return elements }
        while true {
            elements.append(try parseValue(depth: depth + 1))
            skipWhitespace()
            guard let next = peek() else { throw fail("unterminated array") }
            if next == UInt8(ascii: "]") { index += 1; return elements }
            guard next == UInt8(ascii: ",") else { throw fail("expected ',' or ']' in an array, found \(describeCurrent())") }
            index += 1
            skipWhitespace()
        }
    }

    mutating func expectLiteral(_ literal: StaticString) throws(JSONError) {
        let count = literal.utf8CodeUnitCount
        let matches: Bool = literal.withUTF8Buffer { expected in
            guard index + count <= bytes.count else { return false }
            for i in 0..<count where bytes[index + i] != expected[i] { return false }
            return true
        }
        guard matches else { throw fail("expected \(literal), found \(describeCurrent())") }
        index += count
    }

    // MARK: Numbers

    mutating func scanNumber() throws(JSONError) {
        if peek() == UInt8(ascii: "-") { index += 1 }
        guard let first = peek(), isDigit(first) else { throw fail("expected a digit in a number, found \(describeCurrent())") }
        index += 1
        if first != UInt8(ascii: "0") {
            while let d = peek(), isDigit(d) { index += 1 }
        } else if let d = peek(), isDigit(d) {
            throw fail("a number must not have leading zeros")
        }
        if peek() == UInt8(ascii: ".") {
            index += 1
            guard let d = peek(), isDigit(d) else { throw fail("expected a digit after '.', found \(describeCurrent())") }
            while let d = peek(), isDigit(d) { index += 1 }
        }
        if let e = peek(), e == UInt8(ascii: "e") || e == UInt8(ascii: "E") {
            index += 1
            if let s = peek(), s == UInt8(ascii: "+") || s == UInt8(ascii: "-") { index += 1 }
            guard let d = peek(), isDigit(d) else { throw fail("expected a digit in an exponent, found \(describeCurrent())") }
            while let d = peek(), isDigit(d) { index += 1 }
        }
    }

    func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }

    // MARK: Strings

    /// Reads a string; the common case (no escapes) decodes straight from the input bytes.
    mutating func parseString() throws(JSONError) -> String {
        let start = index + 1
        if try scanString() {
            return String(decoding: bytes[start..<(index - 1)], as: UTF8.self)
        }
        return try unescape(from: start, to: index - 1)
    }

    mutating func skipString() throws(JSONError) {
        _ = try scanString()
    }

    /// Moves past a string (reader on its opening quote), checking UTF-8 and escapes.
    /// Returns true when it contained no escapes.
    mutating func scanString() throws(JSONError) -> Bool {
        guard peek() == UInt8(ascii: "\"") else { throw fail("expected a string, found \(describeCurrent())") }
        let openQuote = index
        index += 1
        var plain = true
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "\"") {
                index += 1
                return plain
            } else if byte == UInt8(ascii: "\\") {
                plain = false
                try scanEscape()
            } else if byte < 0x20 {
                throw fail("raw control character 0x\(String(byte, radix: 16, uppercase: true)) in a string (must be escaped)")
            } else if byte < 0x80 {
                index += 1
            } else {
                try scanUTF8Sequence()
            }
        }
        throw JSONError(offset: openQuote, message: "unterminated string")
    }

    mutating func scanEscape() throws(JSONError) {
        guard index + 1 < bytes.count else { throw fail("unterminated escape in a string") }
        switch bytes[index + 1] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
             UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            index += 2
        case UInt8(ascii: "u"):
            let unit = try hexQuad(at: index + 2)
            index += 6
            if unit >= 0xD800 && unit <= 0xDBFF {
                guard index + 1 < bytes.count, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else {
                    throw fail("high surrogate \\u\(String(unit, radix: 16)) not followed by a low surrogate")
                }
                let low = try hexQuad(at: index + 2)
                guard low >= 0xDC00 && low <= 0xDFFF else { throw fail("high surrogate followed by \\u\(String(low, radix: 16)), not a low surrogate") }
                index += 6
            } else if unit >= 0xDC00 && unit <= 0xDFFF {
                throw fail("lone low surrogate \\u\(String(unit, radix: 16))")
            }
        default:
            index += 1
            throw fail("invalid escape \\\(describeCurrent())")
        }
    }

    func hexQuad(at position: Int) throws(JSONError) -> UInt32 {
        guard position + 4 <= bytes.count else { throw JSONError(offset: position, message: "truncated \\u escape") }
        var value: UInt32 = 0
        for i in position..<(position + 4) {
            let b = bytes[i]
            let nibble: UInt32
            switch b {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = UInt32(b - UInt8(ascii: "0"))
            case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = UInt32(b - UInt8(ascii: "a") + 10)
            case UInt8(ascii: "A")...UInt8(ascii: "F"): nibble = UInt32(b - UInt8(ascii: "A") + 10)
            default: throw JSONError(offset: i, message: "non-hex digit in a \\u escape")
            }
            value = value << 4 | nibble
        }
        return value
    }

    /// Checks one multi-byte UTF-8 sequence: no overlong forms, no surrogates, nothing above U+10FFFF.
    mutating func scanUTF8Sequence() throws(JSONError) {
        let lead = bytes[index]
        let length: Int
        var lowerBound: UInt8 = 0x80
        var upperBound: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; lowerBound = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; upperBound = 0x9F
        case 0xF0: length = 4; lowerBound = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; upperBound = 0x8F
        default: throw fail("invalid UTF-8 lead byte 0x\(String(lead, radix: 16, uppercase: true))")
        }
        guard index + length <= bytes.count else { throw fail("truncated UTF-8 sequence") }
        let second = bytes[index + 1]
        guard second >= lowerBound && second <= upperBound else {
            throw JSONError(offset: index + 1, message: "invalid UTF-8 continuation byte 0x\(String(second, radix: 16, uppercase: true))")
        }
        var i = 2
        while i < length {
            let b = bytes[index + i]
            guard b & 0xC0 == 0x80 else {
                throw JSONError(offset: index + i, message: "invalid UTF-8 continuation byte 0x\(String(b, radix: 16, uppercase: true))")
            }
            i += 1
        }
        index += length
    }

    /// Decodes a string already checked by `scanString`.
    func unescape(from start: Int, to end: Int) throws(JSONError) -> String {
        var out = [UInt8]()
        out.reserveCapacity(end - start)
        var i = start
        while i < end {
            let byte = bytes[i]
            guard byte == UInt8(ascii: "\\") else { out.append(byte); i += 1; continue }
            let kind = bytes[i + 1]
            i += 2
            switch kind {
            case UInt8(ascii: "b"): out.append(0x08)
            case UInt8(ascii: "f"): out.append(0x0C)
            case UInt8(ascii: "n"): out.append(0x0A)
            case UInt8(ascii: "r"): out.append(0x0D)
            case UInt8(ascii: "t"): out.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = try hexQuad(at: i)
                i += 4
                if scalar >= 0xD800 && scalar <= 0xDBFF {
                    let low = try hexQuad(at: i + 2)
                    i += 6
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                appendUTF8(scalar, to: &out)
            default: out.append(kind)
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    func appendUTF8(_ scalar: UInt32, to out: inout [UInt8]) {
        switch scalar {
        case 0..<0x80:
            out.append(UInt8(scalar))
        case 0x80..<0x800:
            out.append(UInt8(0xC0 | (scalar >> 6)))
            out.append(UInt8(0x80 | (scalar & 0x3F)))
        case 0x800..<0x10000:
            out.append(UInt8(0xE0 | (scalar >> 12)))
            out.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            out.append(UInt8(0x80 | (scalar & 0x3F)))
        default:
            out.append(UInt8(0xF0 | (scalar >> 18)))
            out.append(UInt8(0x80 | ((scalar >> 12) & 0x3F)))
            out.append(UInt8(0x80 | ((scalar >> 6) & 0x3F)))
            out.append(UInt8(0x80 | (scalar & 0x3F)))
        }
    }
}

extension JSONParser {
    /// Checks that `bytes` are one complete JSON object without building it; nil when they are.
    public static func checkObject(_ bytes: [UInt8], maxDepth: Int = JSONParser.defaultMaxDepth) -> JSONError? {
        var parser = JSONParser(bytes, maxDepth: maxDepth)
        parser.skipWhitespace()
        guard parser.peek() == UInt8(ascii: "{") else {
            return parser.fail("the payload must be a JSON object, found \(parser.describeCurrent())")
        }
        do {
            try parser.skipValue(depth: 1)
            try parser.expectEnd()
            return nil
        } catch {
            return error
        }
    }
}
