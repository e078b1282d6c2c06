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
        var text = text
        guard let parsed = text.withUTF8({ Timestamp(parsing: $0, as: .iso8601) }) else { return nil }
        self = parsed
    }

    /// The text forms of a moment the project reads.
    public enum TextForm: Sendable {
        /// `2026-12-01T09:00:00[.fff](Z|±hh[:]mm)`: a zone is required.
        case iso8601
        /// PostgreSQL's `timestamptz` output with DateStyle ISO:
        /// `2026-12-01 09:00:00[.ffffff][±hh[:mm[:ss]]]`.
        case postgres
    }

    /// Parses `bytes` in `form`, to the microsecond; nil for anything else, including an
    /// impossible date such as February 30.
    public init?(parsing bytes: UnsafeBufferPointer<UInt8>, as form: TextForm) {
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
        let separated = form == .iso8601 ? { expect("T") || expect("t") } : { expect(" ") }
        guard let year = number(4), expect("-"), let month = number(2), expect("-"), let day = number(2),
              separated(), let hour = number(2), expect(":"), let minute = number(2), expect(":"),
              let second = number(2) else { return nil }
        var micros = 0
        if expect(".") || (form == .iso8601 && expect(",")) {
            var digits = 0
            while index < bytes.count, bytes[index] >= 48, bytes[index] <= 57 {
                if digits < 6 { micros = micros * 10 + Int(bytes[index] - 48) }
                digits += 1
                index += 1
            }
            guard digits > 0 else { return nil }
            for _ in min(digits, 6)..<6 { micros *= 10 }
        }
        var offset = 0
        if form == .iso8601, expect("Z") || expect("z") {
        } else if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
            let sign = bytes[index] == UInt8(ascii: "-") ? -1 : 1
            index += 1
            guard let hours = number(2), hours < 24 else { return nil }
            offset = hours * 3600
            let colon = expect(":")
            if colon || (form == .iso8601 && index < bytes.count) {
                guard let minutes = number(2), minutes < 60 else { return nil }
                offset += minutes * 60
                if form == .postgres, colon, expect(":") {
                    guard let extra = number(2), extra < 60 else { return nil }
                    offset += extra
                }
            } else if form == .iso8601 {
                return nil
            }
            offset *= sign
        } else if form == .iso8601 {
            return nil
        }
        guard index == bytes.count, (1...12).contains(month), day >= 1, day <= Self.daysIn(month: month, year: year),
              hour < 24, minute < 60, second < 61 else { return nil }
        let days = Self.daysFromCivil(year: year, month: month, day: day)
        let seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset
        self.init(timeIntervalSince1970: Double(seconds) + Double(micros) / 1_000_000)
    }

    private static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 in the proleptic Gregorian calendar (Howard Hinnant's algorithm).
    private static func daysFromCivil(year: Int, month: Int, day: Int) -> Int {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }
}
