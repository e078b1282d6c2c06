/// Searching text for text with the standard library alone. The modules that build without
/// the implicit `_StringProcessing` import (Package.swift `withoutStringProcessing`) use
/// these instead of `firstRange(of:)`, `contains(_:)` and `replacing(_:with:)` on strings,
/// which would load `_StringProcessing` and `_RegexParser` into the process for a handful of
/// searches in configuration and error text. Characters are compared as those do.
extension StringProtocol {
    /// The first occurrence of `needle`; nil when there is none or `needle` is empty.
    public func range(ofText needle: some StringProtocol) -> Range<Index>? {
        guard let first = needle.first else { return nil }
        var start = startIndex
        while let candidate = self[start...].firstIndex(of: first) {
            var here = candidate
            var matched = true
            for character in needle {
                guard here != endIndex, self[here] == character else { matched = false; break }
                formIndex(after: &here)
            }
            if matched { return candidate..<here }
            start = index(after: candidate)
        }
        return nil
    }

    /// Whether `needle` occurs; an empty `needle` occurs nowhere.
    public func contains(text needle: some StringProtocol) -> Bool {
        range(ofText: needle) != nil
    }

    /// The pieces between the occurrences of `separator`, left to right and not overlapping
    /// (one piece, the whole text, when there is none).
    public func pieces(separatedBy separator: some StringProtocol) -> [String] {
        var pieces: [String] = []
        var rest = self[...]
        while let found = rest.range(ofText: separator) {
            pieces.append(String(rest[..<found.lowerBound]))
            rest = rest[found.upperBound...]
        }
        pieces.append(String(rest))
        return pieces
    }

    /// A copy with every occurrence of `needle`, left to right and not overlapping, replaced
    /// by `replacement`.
    public func replacing(text needle: some StringProtocol, with replacement: some StringProtocol) -> String {
        var out = ""
        var rest = self[...]
        while let found = rest.range(ofText: needle) {
            out += rest[..<found.lowerBound]
            out += replacement
            rest = rest[found.upperBound...]
        }
        out += rest
        return out
    }
}
