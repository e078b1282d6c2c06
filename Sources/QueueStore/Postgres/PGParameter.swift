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

/// The text form of `timestamptz` in UTC, both ways.
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

    /// Parses `YYYY-MM-DD HH:MM:SS[.ffffff]±HH[:MM[:SS]]`, the server's output with DateStyle ISO.
    static func parse(_ bytes: UnsafeBufferPointer<UInt8>) -> Timestamp? {
        var index = 0
        func number(_ width: Int) -> Int? {
            guard index + width <= bytes.count else { return nil }
            var value = 0
            for _ in 0..<width {
                let byte = bytes[index]
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
                index += 1
            }
            return value
        }
        func expect(_ character: Character) -> Bool {
            guard index < bytes.count, bytes[index] == character.asciiValue else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2),
              expect(" "), let hour = number(2), expect(":"), let minute = number(2), expect(":"),
              let second = number(2) else { return nil }
        var micros = 0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            index += 1
            var digits = 0
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                if digits < 6 { micros = micros * 10 + Int(bytes[index] - 48); digits += 1 }
                index += 1
            }
            while digits < 6 { micros *= 10; digits += 1 }
        }
        var offsetSeconds = 0
        if index < bytes.count {
            let sign = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            guard bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") else { return nil }
            index += 1
            guard let offsetHours = number(2) else { return nil }
            offsetSeconds = offsetHours * 3600
            if expect(":"), let offsetMinutes = number(2) {
                offsetSeconds += offsetMinutes * 60
                if expect(":"), let extra = number(2) { offsetSeconds += extra }
            }
            offsetSeconds *= sign
        }
        guard index == bytes.count else { return nil }
        let days = daysFromCivil(year: year, month: month, day: day)
        let epochSeconds = days * 86_400 + hour * 3600 + minute * 60 + second - offsetSeconds
        return Timestamp(timeIntervalSince1970: Double(epochSeconds) + Double(micros) / 1_000_000)
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
