/// Reads campaign audiences: one target per line, `token` or `token,payload`
/// (a tab works as the separator too). Blank lines and lines starting with `#`
/// are skipped; the token is checked and lower-cased here so that an error can
/// name the line.
public struct TargetLineParser: Sendable {
    public var sourceName: String

    public init(sourceName: String) { self.sourceName = sourceName }

    public struct Line: Sendable, Hashable {
        public var token: [UInt8]
        public var payload: [UInt8]?
    }

    /// Parses one line without its newline; nil for a blank or comment line.
    public func parse(_ line: ArraySlice<UInt8>, lineNumber: Int) throws -> Line? {
        var end = line.endIndex
        while end > line.startIndex, line[end - 1] == 13 || line[end - 1] == 32 { end -= 1 }
        var start = line.startIndex
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
        return Line(token: token, payload: Array(line[payloadStart..<end]))
    }

    private static func show(_ byte: UInt8) -> String {
        (32..<127).contains(byte) ? String(UnicodeScalar(byte)) : "\\x" + String(byte, radix: 16)
    }
}

/// Groups targets into chunk rows of `pushd.campaign_targets` in COPY text format:
/// `campaign_id, chunk, tokens text[], payloads text[]`.
struct ChunkRowEncoder {
    let campaignID: Int64
    let chunkSize: Int
    var nextChunk: Int
    private(set) var chunkSizes: [Int32] = []
    private var tokens: [[UInt8]] = []
    private var payloads: [[UInt8]?] = []
    private var anyPayload = false

    init(campaignID: Int64, chunkSize: Int, firstChunk: Int) {
        self.campaignID = campaignID
        self.chunkSize = chunkSize
        self.nextChunk = firstChunk
        tokens.reserveCapacity(chunkSize)
    }

    /// Adds a target; returns a complete COPY line when a chunk fills up.
    mutating func add(token: [UInt8], payload: [UInt8]?) -> [UInt8]? {
        tokens.append(token)
        payloads.append(payload)
        if payload != nil { anyPayload = true }
        return tokens.count == chunkSize ? flush() : nil
    }

    /// The last, partial chunk, if any.
    mutating func flush() -> [UInt8]? {
        guard !tokens.isEmpty else { return nil }
        var line = [UInt8]()
        line.reserveCapacity(tokens.count * (tokens[0].count + 1) + 64)
        line.append(contentsOf: "\(campaignID)\t\(nextChunk)\t{".utf8)
        for (index, token) in tokens.enumerated() {
            if index > 0 { line.append(UInt8(ascii: ",")) }
            line.append(contentsOf: token)
        }
        line.append(UInt8(ascii: "}"))
        line.append(9)
        if anyPayload {
            line.append(UInt8(ascii: "{"))
            for (index, payload) in payloads.enumerated() {
                if index > 0 { line.append(UInt8(ascii: ",")) }
                guard let payload else {
                    line.append(contentsOf: "NULL".utf8)
                    continue
                }
                line.append(UInt8(ascii: "\""))
                for byte in payload {
                    // Array-literal escaping first (quote, backslash), then COPY's (backslash, tab, newline).
                    switch byte {
                    case UInt8(ascii: "\""): line.append(contentsOf: [92, 92, 34])
                    case 92: line.append(contentsOf: [92, 92, 92, 92])
                    case 9: line.append(contentsOf: [92, 116])
                    case 10: line.append(contentsOf: [92, 110])
                    case 13: line.append(contentsOf: [92, 114])
                    default: line.append(byte)
                    }
                }
                line.append(UInt8(ascii: "\""))
            }
            line.append(UInt8(ascii: "}"))
        } else {
            line.append(contentsOf: [92, UInt8(ascii: "N")])
        }
        line.append(10)
        chunkSizes.append(Int32(tokens.count))
        nextChunk += 1
        tokens.removeAll(keepingCapacity: true)
        payloads.removeAll(keepingCapacity: true)
        anyPayload = false
        return line
    }
}
