/// Reads campaign audiences: one target per line, `token` or `token,payload`
/// (a tab works as the separator too). Blank lines and lines starting with `#`
/// are skipped; the token is checked and lower-cased here so that an error can
/// name the line.
public struct TargetLineParser: Sendable {
    /// What is wrong with a target's payload, nil when it may be sent. The notification rules
    /// (size of the campaign's push type, a valid JSON object, the `aps` dictionary) live with
    /// the sender, which this library does not know: its caller passes them in.
    public typealias PayloadCheck = @Sendable (_ payload: [UInt8]) -> String?

    public var sourceName: String
    public var checkPayload: PayloadCheck?

    public init(sourceName: String, checkPayload: PayloadCheck? = nil) {
        self.sourceName = sourceName
        self.checkPayload = checkPayload
    }

    public struct Line: Sendable, Hashable {
        public var token: [UInt8]
        public var payload: [UInt8]?
    }

    /// Parses one line without its newline; nil for a blank or comment line. A UTF-8
    /// byte order mark at the start of the first line (spreadsheet exports write one)
    /// is skipped.
    public func parse(_ line: ArraySlice<UInt8>, lineNumber: Int) throws -> Line? {
        var end = line.endIndex
        while end > line.startIndex, line[end - 1] == 13 || line[end - 1] == 32 { end -= 1 }
        var start = line.startIndex
        if lineNumber == 1, end - start >= 3, line[start] == 0xEF, line[start + 1] == 0xBB, line[start + 2] == 0xBF {
            start += 3
        }
        while start < end, line[start] == 32 { start += 1 }
        if start == end || line[start] == UInt8(ascii: "#") { return nil }
        var separator = start
        while separator < end, line[separator] != UInt8(ascii: ","), line[separator] != 9 { separator += 1 }
        var token = [UInt8]()
        token.reserveCapacity(separator - start)
        var tokenEnd = separator
        while tokenEnd > start, line[tokenEnd - 1] == 32 { tokenEnd -= 1 }
        for index in start..<tokenEnd {
            var byte = line[index]
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "a")...UInt8(ascii: "f"): break
            case UInt8(ascii: "A")...UInt8(ascii: "F"): byte += 32
            default:
                throw QueueError("\(sourceName) line \(lineNumber): the device token must be hexadecimal, found '\(Self.show(byte))' at column \(index - line.startIndex + 1)")
            }
            token.append(byte)
        }
        guard token.count >= 64, token.count <= 200, token.count % 2 == 0 else {
            throw QueueError("\(sourceName) line \(lineNumber): the device token must be an even number of hexadecimal digits from 64 to 200, got \(token.count)")
        }
        guard separator < end else { return Line(token: token, payload: nil) }
        var payloadStart = separator + 1
        while payloadStart < end, line[payloadStart] == 32 || line[payloadStart] == 9 { payloadStart += 1 }
        guard payloadStart < end else { return Line(token: token, payload: nil) }
        guard line[payloadStart] == UInt8(ascii: "{"), line[end - 1] == UInt8(ascii: "}") else {
            throw QueueError("\(sourceName) line \(lineNumber): the payload after the token must be a JSON object ({…})")
        }
        let payload = Array(line[payloadStart..<end])
        if let checkPayload, let problem = checkPayload(payload) {
            throw QueueError("\(sourceName) line \(lineNumber): \(problem)")
        }
        return Line(token: token, payload: payload)
    }

    private static func show(_ byte: UInt8) -> String {
        (32..<127).contains(byte) ? String(UnicodeScalar(byte)) : "\\x" + String(byte, radix: 16)
    }
}

/// What an import added: targets new to the campaign, the lines left out because their
/// token was listed earlier in the same import or was already in the campaign, and those
/// left out because APNs said the token is gone (pruned in `pushd.device_tokens`).
public struct TargetImportResult: Sendable, Hashable {
    public var imported: Int
    public var duplicatesDropped: Int
    public var prunedDropped: Int

    public init(imported: Int, duplicatesDropped: Int, prunedDropped: Int = 0) {
        self.imported = imported
        self.duplicatesDropped = duplicatesDropped
        self.prunedDropped = prunedDropped
    }
}

/// Writes targets as COPY text lines of the import's staging table:
/// `position, token, payload` (payload `\N` when the target uses the campaign's).
/// The staging table is grouped into chunk rows by SQL, which drops duplicate tokens.
struct StagedTargetEncoder {
    private(set) var count = 0

    /// The COPY line of the next target, newline included.
    mutating func line(token: [UInt8], payload: [UInt8]?, into line: inout [UInt8]) {
        count += 1
        line.append(contentsOf: String(count).utf8)
        line.append(9)
        line.append(contentsOf: token)
        line.append(9)
        if let payload {
            for byte in payload {
                switch byte {
                case 92: line.append(contentsOf: [92, 92])
                case 9: line.append(contentsOf: [92, 116])
                case 10: line.append(contentsOf: [92, 110])
                case 13: line.append(contentsOf: [92, 114])
                default: line.append(byte)
                }
            }
        } else {
            line.append(contentsOf: [92, UInt8(ascii: "N")])
        }
        line.append(10)
    }
}
