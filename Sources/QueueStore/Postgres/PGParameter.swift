import Posix
import Glibc

/// A value that can be sent as a text-format query parameter.
///
/// `pgText` returns the PostgreSQL text representation, or `nil` for SQL NULL.
public protocol PGParameter {
    var pgText: String? { get }
}

extension String: PGParameter { public var pgText: String? { self } }
extension Substring: PGParameter { public var pgText: String? { String(self) } }
extension Int: PGParameter { public var pgText: String? { String(self) } }
extension Int64: PGParameter { public var pgText: String? { String(self) } }
extension Int32: PGParameter { public var pgText: String? { String(self) } }
extension Int16: PGParameter { public var pgText: String? { String(self) } }
extension Bool: PGParameter { public var pgText: String? { self ? "t" : "f" } }

extension Double: PGParameter {
    public var pgText: String? {
        if isNaN { return "NaN" }
        if isInfinite { return self < 0 ? "-Infinity" : "Infinity" }
        return String(self)
    }
}

extension APNsID: PGParameter { public var pgText: String? { lowercasedString } }

extension Timestamp: PGParameter {
    /// Rendered in UTC with microseconds, the precision of `timestamptz`.
    public var pgText: String? { PGTimestamp.render(self) }
}

extension Optional: PGParameter where Wrapped: PGParameter {
    public var pgText: String? { self?.pgText }
}

/// Raw bytes, sent as `bytea` in hex form.
public struct PGBytes: PGParameter, Hashable, Sendable {
    public var bytes: [UInt8]
    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    public var pgText: String? {
        let digits: [UInt8] = Array("0123456789abcdef".utf8)
        var out = [UInt8]()
        out.reserveCapacity(2 + bytes.count * 2)
        out.append(UInt8(ascii: "\\"))
        out.append(UInt8(ascii: "x"))
        for byte in bytes {
            out.append(digits[Int(byte >> 4)])
            out.append(digits[Int(byte & 0x0f)])
        }
        return String(decoding: out, as: UTF8.self)
    }
}

/// A one-dimensional array, rendered as a PostgreSQL array literal with every
/// element quoted, so any text (commas, braces, quotes) survives the trip.
extension Array: PGParameter where Element: PGParameter {
    public var pgText: String? {
        var out = "{"
        out.reserveCapacity(count * 8 + 2)
        for (index, element) in enumerated() {
            if index > 0 { out.append(",") }
            guard let text = element.pgText else {
                out.append("NULL")
                continue
            }
            out.append("\"")
            for character in text.unicodeScalars {
                if character == "\"" || character == "\\" { out.append("\\") }
                out.unicodeScalars.append(character)
            }
            out.append("\"")
        }
        out.append("}")
        return out
    }
}

/// The text form of `timestamptz` in UTC that the server reads (`Timestamp(parsing:as: .postgres)` reads its output).
enum PGTimestamp {
    static func render(_ date: Timestamp) -> String {
        let totalMicros = (date.timeIntervalSince1970 * 1_000_000).rounded()
        var seconds = Int(floor(totalMicros / 1_000_000))
        let micros = Int(totalMicros - Double(seconds) * 1_000_000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let text = String(value)
            return String(repeating: "0", count: max(0, width - text.count)) + text
        }
        let fraction = String(micros)
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2)) "
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))."
            + String(repeating: "0", count: 6 - fraction.count) + fraction + "+00"
    }
}
