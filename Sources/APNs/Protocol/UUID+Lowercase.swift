import FoundationEssentials

extension UUID {
    /// The canonical lowercase form APNs uses ("8e0a…-…"), made in one String:
    /// `uuidString.lowercased()` builds two, for every answer and every apns-id header.
    public var lowercasedString: String {
        let hexDigits: StaticString = "0123456789abcdef"
        return withUnsafeBytes(of: uuid) { bytes in
            String(unsafeUninitializedCapacity: 36) { output in
                hexDigits.withUTF8Buffer { digits in
                    var position = 0
                    for (index, byte) in bytes.enumerated() {
                        if index == 4 || index == 6 || index == 8 || index == 10 {
                            output[position] = UInt8(ascii: "-")
                            position += 1
                        }
                        output[position] = digits[Int(byte >> 4)]
                        output[position + 1] = digits[Int(byte & 0x0F)]
                        position += 2
                    }
                    return position
                }
            }
        }
    }
}
