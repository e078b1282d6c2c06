import Glibc

/// Numbers as the CLI prints them, by the C library's printf like Foundation's
/// `String(format:)` did, so every figure reads exactly as before.
extension Double {
    /// The value with `places` digits after the point (`%.Nf`), at least `width` characters,
    /// padded with spaces on the left.
    public func fixed(_ places: Int, width: Int = 0) -> String {
        Self.printf("%\(width).\(places)f", self)
    }

    private static func printf(_ format: String, _ value: Double) -> String {
        var buffer = [CChar](repeating: 0, count: 64)
        let length = withVaList([value]) { arguments in
            buffer.withUnsafeMutableBufferPointer { vsnprintf($0.baseAddress, $0.count, format, arguments) }
        }
        guard length >= buffer.count else { return text(buffer) }
        // Beyond 63 characters only for values near Double's range: print it in full.
        buffer = [CChar](repeating: 0, count: Int(length) + 1)
        _ = withVaList([value]) { arguments in
            buffer.withUnsafeMutableBufferPointer { vsnprintf($0.baseAddress, $0.count, format, arguments) }
        }
        return text(buffer)
    }

    /// The characters before the terminating zero.
    private static func text(_ buffer: [CChar]) -> String {
        let end = buffer.firstIndex(of: 0) ?? buffer.endIndex
        return String(decoding: buffer[..<end].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

extension BinaryInteger {
    /// The value in decimal, at least `width` characters with zeros after the sign (`%0Nd`).
    public func zeroPadded(_ width: Int) -> String {
        let sign = self < 0 ? "-" : ""
        let digits = String(self.magnitude)
        return sign + String(repeating: "0", count: max(0, width - sign.count - digits.count)) + digits
    }
}
