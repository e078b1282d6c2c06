internal import CLibPQ
import Glibc
import Posix

/// What of a libpq connection string may be shown to an operator.
///
/// libpq takes a password in four places: the URL's userinfo (`user:secret@host`), the
/// URL's query (`?password=secret`, `&sslpassword=secret`, names possibly percent-encoded),
/// the keyword form (`host=db password='se cret'`, values quoted or not) and a passfile,
/// which libpq reads itself and pushd never opens. `redacted` masks the first three in the
/// text; `scrub` removes the secret values wherever else they turn up, because libpq's own
/// error messages quote pieces of the string it could not parse.
public struct PGConnectionString: Sendable {
    /// The connection string as configured; never printed.
    private let text: String
    /// Every spelling of a secret in `text` and in what libpq made of it, longest first.
    public let secrets: [String]

    static let secretKeywords: Set<String> = ["password", "sslpassword"]
    static let mask = "***"

    public init(_ text: String) {
        self.text = text
        var found = Set<String>()
        for (_, value) in Self.secretFields(in: text) where !value.isEmpty {
            found.insert(value)
            let decoded = Self.percentDecoded(value)
            if !decoded.isEmpty { found.insert(decoded) }
        }
        for value in Self.parsedByLibpq(text) where !value.isEmpty { found.insert(value) }
        secrets = found.sorted { $0.count != $1.count ? $0.count > $1.count : $0 < $1 }
    }

    /// The connection string with every password masked, for messages.
    public var redacted: String {
        var out = Self.isURL(text) ? Self.redactedURL(text) : Self.redactedKeywords(text)
        out = scrub(out)
        return out
    }

    /// `message` with every secret of this connection string replaced by `***`.
    public func scrub(_ message: String) -> String {
        var out = message
        for secret in secrets where out.contains(text: secret) {
            out = out.replacing(text: secret, with: Self.mask)
        }
        return out
    }

    // MARK: Forms

    static func isURL(_ text: String) -> Bool {
        let trimmed = text.drop { $0.isWhitespace }
        return trimmed.hasPrefix("postgresql://") || trimmed.hasPrefix("postgres://")
    }

    /// The secret values as written in `text` (still percent-encoded in a URL).
    static func secretFields(in text: String) -> [(key: String, value: String)] {
        if isURL(text) {
            var fields = [(key: String, value: String)]()
            let (userinfoPassword, query) = urlParts(text)
            if let userinfoPassword { fields.append(("password", userinfoPassword)) }
            for pair in query.split(separator: "&", omittingEmptySubsequences: true) {
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                let key = percentDecoded(String(parts[0]))
                if isSecretKey(key), parts.count == 2 { fields.append((key, String(parts[1]))) }
            }
            return fields
        }
        return keywordPairs(text).compactMap { pair in
            isSecretKey(pair.key) ? (pair.key, String(text[pair.value])) : nil
        }
    }

    static func isSecretKey(_ key: String) -> Bool {
        let lowered = key.lowercased()
        return secretKeywords.contains(lowered) || lowered.contains(text: "password")
    }

    /// The password in the userinfo and the query string of a URL.
    ///
    /// libpq ends the userinfo at the first `@` before a `/`; the last `@` before the query
    /// is taken here instead, so that a password holding a raw `/` or `@` is masked whole.
    static func urlParts(_ text: String) -> (password: String?, query: Substring) {
        guard let schemeEnd = text.range(ofText: "://") else { return (nil, "") }
        let rest = text[schemeEnd.upperBound...]
        let beforeQuery = rest.firstIndex(of: "?").map { rest[..<$0] } ?? rest
        let query = rest.firstIndex(of: "?").map { rest[rest.index(after: $0)...] } ?? ""
        guard let at = beforeQuery.lastIndex(of: "@") else { return (nil, query) }
        let userinfo = beforeQuery[..<at]
        guard let colon = userinfo.firstIndex(of: ":") else { return (nil, query) }
        return (String(userinfo[userinfo.index(after: colon)...]), query)
    }

    static func redactedURL(_ text: String) -> String {
        guard let schemeEnd = text.range(ofText: "://") else { return text }
        let rest = text[schemeEnd.upperBound...]
        let queryStart = rest.firstIndex(of: "?")
        var authorityAndPath = String(queryStart.map { rest[..<$0] } ?? rest)
        if let at = authorityAndPath.lastIndex(of: "@"),
           let colon = authorityAndPath[..<at].firstIndex(of: ":") {
            authorityAndPath = String(authorityAndPath[...colon]) + mask + String(authorityAndPath[at...])
        }
        var out = String(text[..<schemeEnd.upperBound]) + authorityAndPath
        if let queryStart {
            let query = rest[rest.index(after: queryStart)...]
            let pairs = query.split(separator: "&", omittingEmptySubsequences: false).map { pair -> String in
                let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
                guard parts.count == 2, isSecretKey(percentDecoded(String(parts[0]))) else { return String(pair) }
                return String(parts[0]) + "=" + mask
            }
            out += "?" + pairs.joined(separator: "&")
        }
        return out
    }

    static func redactedKeywords(_ text: String) -> String {
        var out = ""
        var copied = text.startIndex
        for pair in keywordPairs(text) where isSecretKey(pair.key) {
            out += text[copied..<pair.value.lowerBound]
            out += mask
            copied = pair.value.upperBound
        }
        out += text[copied...]
        return out
    }

    /// `key = value` pairs of libpq's keyword form. A value is the text up to the next
    /// whitespace, or a single-quoted string in which a backslash escapes the next character.
    /// A quote left open runs to the end of the text, so nothing after it can leak.
    static func keywordPairs(_ text: String) -> [(key: String, value: Range<String.Index>)] {
        var pairs = [(key: String, value: Range<String.Index>)]()
        var index = text.startIndex
        func skipSpace() { while index < text.endIndex, text[index].isWhitespace { index = text.index(after: index) } }
        while true {
            skipSpace()
            guard index < text.endIndex else { break }
            let keyStart = index
            while index < text.endIndex, text[index] != "=", !text[index].isWhitespace { index = text.index(after: index) }
            let key = String(text[keyStart..<index])
            skipSpace()
            guard index < text.endIndex, text[index] == "=" else {
                // Not a keyword string libpq accepts; whatever follows may be a secret.
                if isSecretKey(key) { pairs.append((key, index..<text.endIndex)) }
                break
            }
            index = text.index(after: index)
            skipSpace()
            let valueStart = index
            if index < text.endIndex, text[index] == "'" {
                index = text.index(after: index)
                while index < text.endIndex, text[index] != "'" {
                    if text[index] == "\\" { index = text.index(after: index); if index == text.endIndex { break } }
                    index = text.index(after: index)
                }
                if index < text.endIndex { index = text.index(after: index) }
            } else {
                while index < text.endIndex, !text[index].isWhitespace {
                    if text[index] == "\\" { index = text.index(after: index); if index == text.endIndex { break } }
                    index = text.index(after: index)
                }
            }
            pairs.append((key, valueStart..<index))
        }
        return pairs
    }

    static func percentDecoded(_ text: String) -> String {
        var bytes = [UInt8]()
        var utf8 = Array(text.utf8)[...]
        while let byte = utf8.popFirst() {
            if byte == UInt8(ascii: "%"), utf8.count >= 2,
               let value = UInt8(String(decoding: utf8.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(value)
                utf8 = utf8.dropFirst(2)
            } else {
                bytes.append(byte)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// The secrets as libpq itself reads them (unquoted, unescaped, decoded).
    static func parsedByLibpq(_ text: String) -> [String] {
        var errorMessage: UnsafeMutablePointer<CChar>?
        guard let options = PQconninfoParse(text, &errorMessage) else {
            // The message may quote the secret; it is not needed here.
            if let errorMessage { PQfreemem(errorMessage) }
            return []
        }
        defer { PQconninfoFree(options) }
        var values = [String]()
        var option = options
        while let keyword = option.pointee.keyword {
            if secretKeywords.contains(String(cString: keyword)), let value = option.pointee.val {
                values.append(String(cString: value))
            }
            option += 1
        }
        return values
    }
}
