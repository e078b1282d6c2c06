import Glibc

/// A moment of wall-clock time: seconds since 1970-01-01T00:00:00Z, read with
/// `clock_gettime(CLOCK_REALTIME)`.
///
/// The daemon stores, compares and prints moments; this is all of what it needs, so that
/// neither it nor the engine maps FoundationEssentials (about 2 MB of resident memory) for
/// its `Date`. Intervals are plain `Double` seconds.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var timeIntervalSince1970: Double

    public init(timeIntervalSince1970 seconds: Double) { timeIntervalSince1970 = seconds }

    /// Now.
    public init() {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        timeIntervalSince1970 = Double(spec.tv_sec) + Double(spec.tv_nsec) / 1_000_000_000
    }

    public static var now: Timestamp { Timestamp() }
    /// Earlier than any real moment: "never happened" for throttles and last-seen times.
    public static let distantPast = Timestamp(timeIntervalSince1970: -62_135_769_600)
    public static let distantFuture = Timestamp(timeIntervalSince1970: 64_092_211_200)

    public func timeIntervalSince(_ other: Timestamp) -> Double { timeIntervalSince1970 - other.timeIntervalSince1970 }
    public var timeIntervalSinceNow: Double { timeIntervalSince(Timestamp()) }
    public func addingTimeInterval(_ seconds: Double) -> Timestamp {
        Timestamp(timeIntervalSince1970: timeIntervalSince1970 + seconds)
    }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.timeIntervalSince1970 < rhs.timeIntervalSince1970 }
    public static func + (lhs: Timestamp, rhs: Double) -> Timestamp { lhs.addingTimeInterval(rhs) }
    public static func - (lhs: Timestamp, rhs: Double) -> Timestamp { lhs.addingTimeInterval(-rhs) }
    public static func += (lhs: inout Timestamp, rhs: Double) { lhs = lhs + rhs }

    public var description: String { iso8601 }

    /// The UTC calendar fields of this moment (whole seconds, rounded down).
    private var utc: tm {
        var seconds = time_t((timeIntervalSince1970).rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return parts
    }

    /// `2026-12-01`, the UTC day.
    public var iso8601Day: String {
        let parts = utc
        return "\(Self.digits(Int(parts.tm_year) + 1900, 4))-\(Self.digits(Int(parts.tm_mon) + 1, 2))-\(Self.digits(Int(parts.tm_mday), 2))"
    }

    /// `2026-12-01T09:00:00Z` (whole seconds, UTC); `separator` " " gives what operators
    /// compare with logs.
    public func iso8601(separator: String) -> String {
        let parts = utc
        return iso8601Day + separator
            + "\(Self.digits(Int(parts.tm_hour), 2)):\(Self.digits(Int(parts.tm_min), 2)):\(Self.digits(Int(parts.tm_sec), 2))Z"
    }

    public var iso8601: String { iso8601(separator: "T") }

    private static func digits(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
    }

    /// Parses ISO 8601 with a zone: `2026-12-01T09:00:00Z`, `2026-12-01T09:00:00.250+01:00`
    /// (`+0100` too); nil for anything else, including a time without a zone or an
    /// impossible date such as February 30.
    public init?(iso8601 text: String) {
        let bytes = Array(text.utf8)
        var index = 0
        func number(_ width: Int) -> Int? {
            guard index + width <= bytes.count else { return nil }
            var value = 0
            for byte in bytes[index..<index + width] {
                guard byte >= 48, byte <= 57 else { return nil }
                value = value * 10 + Int(byte - 48)
            }
            index += width
            return value
        }
        func expect(_ character: Character) -> Bool {
            guard index < bytes.count, bytes[index] == character.asciiValue else { return false }
            index += 1
            return true
        }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2),
              expect("T") || expect("t"), let hour = number(2), expect(":"), let minute = number(2), expect(":"),
              let second = number(2) else { return nil }
        var fraction = 0.0
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") || bytes[index] == UInt8(ascii: ",") {
            index += 1
            var scale = 0.1
            let start = index
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                fraction += Double(bytes[index] - 48) * scale
                scale /= 10
                index += 1
            }
            guard index > start else { return nil }
        }
        var offset = 0
        if expect("Z") || expect("z") {
        } else if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
            let sign = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            index += 1
            guard let hours = number(2) else { return nil }
            _ = expect(":")
            guard let minutes = number(2), hours < 24, minutes < 60 else { return nil }
            offset = sign * (hours * 3600 + minutes * 60)
        } else {
            return nil
        }
        guard index == bytes.count, (1...12).contains(month), day >= 1, hour < 24, minute < 60, second < 61 else { return nil }
        var parts = tm()
        parts.tm_year = Int32(year - 1900)
        parts.tm_mon = Int32(month - 1)
        parts.tm_mday = Int32(day)
        parts.tm_hour = Int32(hour)
        parts.tm_min = Int32(minute)
        parts.tm_sec = Int32(second)
        let seconds = timegm(&parts)
        // timegm normalises February 30 to March 2; a date that moved was not a real one.
        guard parts.tm_mday == Int32(day), parts.tm_mon == Int32(month - 1) else { return nil }
        self.init(timeIntervalSince1970: Double(seconds - offset) + fraction)
    }
}
