/// The one rule for app names. The SQL checks of `pushd.jobs`, `pushd.campaigns` and
/// `pushd.device_tokens`, the configuration and the CLI all use it, so a row the database
/// accepts names an app the configuration can define.
public enum AppName {
    /// The same rule as a PostgreSQL regular expression.
    public static let pattern = "^[a-z0-9][a-z0-9_-]{0,63}$"
    /// The rule in words, for error messages.
    public static let rule = "1 to 64 lower-case letters, digits, '-' or '_', starting with a letter or digit"

    public static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...64).contains(bytes.count), isLetterOrDigit(bytes[0]) else { return false }
        return bytes.allSatisfy { isLetterOrDigit($0) || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-") }
    }

    private static func isLetterOrDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
