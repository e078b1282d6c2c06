/// Limits APNs enforces on request headers.
public enum NotificationLimits {
    /// `apns-collapse-id` may not exceed 64 bytes.
    public static let maxCollapseIDBytes = 64
    /// Topics are bundle ids plus a suffix; bundle ids are at most 155 characters.
    public static let maxTopicBytes = 255
}

/// `apns-topic` shape rules.
public enum TopicRules {
    /// At most `NotificationLimits.maxTopicBytes` of what a bundle id allows (letters, digits,
    /// '-' and '.'); suffixes and MDM topics ("com.apple.mgmt.External.<UUID>") are made of the
    /// same characters.
    public static func isWellFormed(_ topic: String) -> Bool {
        let utf8 = topic.utf8
        guard !utf8.isEmpty, utf8.count <= NotificationLimits.maxTopicBytes else { return false }
        return utf8.allSatisfy(isBundleIDByte)
    }

    /// A character a bundle id may hold: A–Z, a–z, 0–9, '-' and '.' (Apple's CFBundleIdentifier).
    public static func isBundleIDByte(_ byte: UInt8) -> Bool {
        (byte >= 65 && byte <= 90) || (byte >= 97 && byte <= 122) || (byte >= 48 && byte <= 57) || byte == 45 || byte == 46
    }
}

/// Header value rules shared by both sides.
public enum HeaderRules {
    /// No control characters: CR and LF would split a header line (libcurl takes headers as
    /// "name: value" lines) and HTTP/2 forbids NUL, CR and LF in field values.
    public static func isSafeValue(_ value: String) -> Bool {
        !value.utf8.contains { $0 < 0x20 || $0 == 0x7f }
    }
}

/// `apns-expiration` syntax.
public enum ExpirationRules {
    /// A non-negative decimal integer of epoch seconds (0 = do not store); nil otherwise.
    public static func parse(_ text: String) -> Int64? {
        let utf8 = text.utf8
        guard !utf8.isEmpty, utf8.count <= 19 else { return nil }
        for byte in utf8 where byte < UInt8(ascii: "0") || byte > UInt8(ascii: "9") { return nil }
        return Int64(text)
    }
}
