import Posix

/// A value that can be read from a text-format result cell.
///
/// The bytes are borrowed from libpq's result buffer and are valid only during the call.
public protocol PGDecodable {
    init?(pgBytes bytes: UnsafeBufferPointer<UInt8>)
}

extension String: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) { self = String(decoding: bytes, as: UTF8.self) }
}

/// Integers are parsed straight from the bytes, without an intermediate String.
enum PGInteger {
    static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> Int64? {
        guard !bytes.isEmpty else { return nil }
        var index = 0
        var negative = false
        if bytes[0] == UInt8(ascii: "-") { negative = true; index = 1 }
        guard index < bytes.count else { return nil }
        var value: Int64 = 0
        while index < bytes.count {
            let byte = bytes[index]
            guard byte >= 48, byte <= 57 else { return nil }
            let digit = Int64(byte - 48)
            let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (next, overflow2) = negative ? times.subtractingReportingOverflow(digit) : times.addingReportingOverflow(digit)
            guard !overflow1, !overflow2 else { return nil }
            value = next
            index += 1
        }
        return value
    }
}

extension Int64: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard let value = PGInteger.parse(bytes) else { return nil }
        self = value
    }
}

extension Int: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard let value = PGInteger.parse(bytes) else { return nil }
        self = Int(value)
    }
}

extension Int32: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard let value = PGInteger.parse(bytes), let narrow = Int32(exactly: value) else { return nil }
        self = narrow
    }
}

extension Int16: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard let value = PGInteger.parse(bytes), let narrow = Int16(exactly: value) else { return nil }
        self = narrow
    }
}

extension Double: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        let text = String(decoding: bytes, as: UTF8.self)
        switch text {
        case "NaN": self = .nan
        case "Infinity": self = .infinity
        case "-Infinity": self = -.infinity
        default:
            guard let value = Double(text) else { return nil }
            self = value
        }
    }
}

extension Bool: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard bytes.count == 1 else { return nil }
        switch bytes[0] {
        case UInt8(ascii: "t"): self = true
        case UInt8(ascii: "f"): self = false
        default: return nil
        }
    }
}

extension APNsID: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard let value = APNsID(String(decoding: bytes, as: UTF8.self)) else { return nil }
        self = value
    }
}

extension Timestamp: PGDecodable {
    /// Expects the session's TimeZone to be UTC and DateStyle ISO, which `PGConnection` sets.
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard let value = Timestamp(parsing: bytes, as: .postgres) else { return nil }
        self = value
    }
}

extension PGBytes: PGDecodable {
    /// Reads `bytea` in hex output form (`\x0a1b…`), the server's default.
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard bytes.count >= 2, bytes[0] == UInt8(ascii: "\\"), bytes[1] == UInt8(ascii: "x"),
              bytes.count % 2 == 0 else { return nil }
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case 48...57: return byte - 48
            case 97...102: return byte - 87
            case 65...70: return byte - 55
            default: return nil
            }
        }
        var out = [UInt8]()
        out.reserveCapacity((bytes.count - 2) / 2)
        var index = 2
        while index < bytes.count {
            guard let high = nibble(bytes[index]), let low = nibble(bytes[index + 1]) else { return nil }
            out.append(high << 4 | low)
            index += 2
        }
        self.init(out)
    }
}

/// One-dimensional arrays of non-null elements, from the server's array output
/// (`{1,2}`, `{"a b","c\"d"}`). An array holding NULL does not decode; read it
/// as `[String?]` through `PGArrayLiteral` instead.
extension Array: PGDecodable where Element: PGDecodable {
    public init?(pgBytes bytes: UnsafeBufferPointer<UInt8>) {
        guard let items = PGArrayLiteral.parse(bytes) else { return nil }
        var out = [Element]()
        out.reserveCapacity(items.count)
        for item in items {
            guard let item else { return nil }
            let decoded: Element? = Array<UInt8>(item.utf8).withUnsafeBufferPointer { Element(pgBytes: $0) }
            guard let decoded else { return nil }
            out.append(decoded)
        }
        self = out
    }
}

public enum PGArrayLiteral {
    /// Splits a one-dimensional array literal into its elements; `nil` elements are SQL NULL.
    public static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> [String?]? {
        guard bytes.count >= 2, bytes.first == UInt8(ascii: "{"), bytes.last == UInt8(ascii: "}") else { return nil }
        var items = [String?]()
        var index = 1
        let end = bytes.count - 1
        if index == end { return [] }
        while index <= end {
            var element = [UInt8]()
            var quoted = false
            if bytes[index] == UInt8(ascii: "\"") {
                quoted = true
                index += 1
                while index < end, bytes[index] != UInt8(ascii: "\"") {
                    if bytes[index] == UInt8(ascii: "\\") { index += 1 }
                    guard index < end else { return nil }
                    element.append(bytes[index])
                    index += 1
                }
                guard index < end else { return nil }
                index += 1
            } else {
                while index < end, bytes[index] != UInt8(ascii: ",") {
                    if bytes[index] == UInt8(ascii: "{") { return nil }
                    element.append(bytes[index])
                    index += 1
                }
            }
            let text = String(decoding: element, as: UTF8.self)
            items.append(!quoted && text == "NULL" ? nil : text)
            if index == end { break }
            guard bytes[index] == UInt8(ascii: ",") else { return nil }
            index += 1
        }
        return items
    }
}
