internal import COpenSSL

/// SHA-256 of accepted payloads, so a log entry identifies its payload without storing it.
enum PayloadDigest {
    private static let hex = Array("0123456789abcdef".utf8)

    static func sha256Hex(_ bytes: [UInt8]) -> String {
        var digest = [UInt8](repeating: 0, count: 32)
        bytes.withUnsafeBufferPointer { source in
            digest.withUnsafeMutableBufferPointer { out in _ = SHA256(source.baseAddress, source.count, out.baseAddress) }
        }
        var text = [UInt8]()
        text.reserveCapacity(64)
        for byte in digest {
            text.append(hex[Int(byte >> 4)])
            text.append(hex[Int(byte & 0xF)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
