@testable import QueueStore
import Testing

/// A leased chunk keeps its device tokens raw in one block; every token comes back as the
/// lowercase hex it was imported as, whatever its length, and a text that is not a token
/// comes back as it was read and is marked so that its target fails.
@Suite struct DeviceTokenBlockTests {
    private func literal(_ elements: [String]) -> [UInt8] {
        Array(("{" + elements.joined(separator: ",") + "}").utf8)
    }

    private func parse(_ text: String) -> DeviceTokenBlock? {
        Array(text.utf8).withUnsafeBufferPointer { DeviceTokenBlock(arrayLiteral: $0) }
    }

    private func bytes(_ block: DeviceTokenBlock, _ index: Int) -> [UInt8] {
        block.withBytes(at: index) { Array($0) }
    }

    @Test func thirtyTwoByteTokensRoundTripThroughOneBlockOfFixedStride() throws {
        let tokens = (0..<1000).map { String(format64: UInt64($0) &* 2_654_435_761 &+ 1) }
        let block = try #require(literal(tokens).withUnsafeBufferPointer { DeviceTokenBlock(arrayLiteral: $0) })
        #expect(block.count == 1000)
        #expect(block.stride == 32)
        for (index, token) in tokens.enumerated() {
            #expect(block.isValid(at: index))
            #expect(block.length(at: index) == 32)
            #expect(block.hex(at: index) == token)
        }
        #expect(bytes(block, 1) == [UInt8](repeating: 0, count: 24) + [0, 0, 0, 0, 0x9E, 0x37, 0x79, 0xB2])
    }

    @Test func upperCaseHexComesBackLowerCaseAsDeviceTokenSendsIt() throws {
        let block = try #require(parse("{" + String(repeating: "AbCdEf01", count: 8) + "}"))
        #expect(block.hex(at: 0) == String(repeating: "abcdef01", count: 8))
        #expect(bytes(block, 0) == Array(repeating: [0xAB, 0xCD, 0xEF, 0x01], count: 8).flatMap { $0 })
    }

    @Test func tokensOfDifferentLengthsKeepEachTheirOwnLength() throws {
        let short = String(repeating: "ab", count: 32)
        let odd = String(repeating: "cd", count: 33)
        let longest = String(repeating: "ef", count: 100)
        let block = try #require(parse("{\(short),\(longest),\(odd),\(short)}"))
        #expect(block.stride == 100)
        #expect((0..<4).map { block.length(at: $0) } == [32, 100, 33, 32])
        #expect((0..<4).map { block.hex(at: $0) } == [short, longest, odd, short])
        #expect(bytes(block, 2) == [UInt8](repeating: 0xCD, count: 33))
    }

    @Test func aTextThatIsNotATokenIsKeptAsReadAndMarkedInvalid() throws {
        let good = String(repeating: "12", count: 32)
        let texts = [String(repeating: "a", count: 65),          // odd number of digits
                     String(repeating: "ab", count: 31),         // 31 bytes: too short
                     String(repeating: "ab", count: 101),        // 101 bytes: too long
                     String(repeating: "g", count: 64)]          // not hexadecimal
        let block = try #require(parse("{\(good),\(texts.joined(separator: ",")),\(good)}"))
        #expect(block.count == 6)
        #expect(block.stride == 32)
        #expect(block.isValid(at: 0) && block.isValid(at: 5))
        #expect(block.hex(at: 0) == good && block.hex(at: 5) == good)
        for (offset, text) in texts.enumerated() {
            #expect(!block.isValid(at: offset + 1))
            #expect(block.length(at: offset + 1) == 0)
            #expect(block.hex(at: offset + 1) == text)
        }
    }

    @Test func anArrayThatIsNotOneOfTokensIsRefused() {
        let token = String(repeating: "ab", count: 32)
        #expect(parse("{}")?.count == 0)
        #expect(parse("") == nil)
        #expect(parse("{\(token)") == nil)
        #expect(parse("{\(token),,\(token)}") == nil)
        #expect(parse("{\(token),NULL}") == nil)
        #expect(parse("{\"\(token)\"}") == nil)
    }

    @Test func aBlockBuiltFromStringsEqualsTheOneReadFromTheDatabaseText() throws {
        let tokens = [String(repeating: "0f", count: 32), String(repeating: "F0", count: 40), "not a token"]
        let built = DeviceTokenBlock(hex: tokens)
        #expect(built.count == 3)
        #expect(built.hex(at: 0) == tokens[0])
        #expect(built.hex(at: 1) == tokens[1].lowercased())
        #expect(built.hex(at: 2) == "not a token" && !built.isValid(at: 2))
        let read = try #require(parse("{\(tokens[0]),\(tokens[1])}"))
        #expect(DeviceTokenBlock(hex: Array(tokens.prefix(2))) == read)
    }

    /// The database text is read by its own table-driven parser; the block built from the
    /// same texts as strings is the reference, for every mix of lengths, cases and non-tokens.
    @Test func theDatabaseTextReadsAsTheBlockBuiltFromTheSameTexts() throws {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        func next(_ bound: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int((state >> 33) % UInt64(bound))
        }
        let alphabet = Array("0123456789abcdefABCDEF".utf8)
        func element() -> String {
            switch next(10) {
            case 0: return String(repeating: "g", count: 64)                          // not hexadecimal
            case 1: return String(repeating: "a", count: 63 + 2 * next(3))            // odd
            case 2: return String(repeating: "ab", count: [1, 31, 101, 150][next(4)]) // too short or long
            case 3: return String(repeating: "c", count: 63) + "x"                    // last digit bad
            default:
                let bytes = [32, 32, 32, 33, 64, 100][next(6)]
                return String(decoding: (0..<bytes * 2).map { _ in alphabet[next(alphabet.count)] }, as: UTF8.self)
            }
        }
        for _ in 0..<300 {
            let texts = (0..<(1 + next(12))).map { _ in element() }
            let read = try #require(parse(String(decoding: literal(texts), as: UTF8.self)))
            #expect(read == DeviceTokenBlock(hex: texts), "\(texts)")
            for index in texts.indices {
                #expect(read.hex(at: index) == (read.isValid(at: index) ? texts[index].lowercased() : texts[index]))
            }
        }
    }

    @Test func anEmptyElementAnywhereRefusesTheArray() {
        let token = String(repeating: "ab", count: 32)
        #expect(parse("{\(token),}") == nil)
        #expect(parse("{,\(token)}") == nil)
        #expect(parse("{,}") == nil)
        #expect(parse("{N\(token)}") == nil)
    }

    @Test func campaignTargetsReadBackAsTheTargetsTheyWereMadeOf() {
        let targets = [
            CampaignTarget(index: 300, token: String(repeating: "01", count: 32), payload: nil),
            CampaignTarget(index: 301, token: String(repeating: "02", count: 32), payload: #"{"aps":{}}"#, environment: "sandbox"),
            CampaignTarget(index: 302, token: String(repeating: "03", count: 32), payload: nil),
        ]
        let block = CampaignTargets(targets)
        #expect(Array(block) == targets)
        #expect(block.first?.index == 300)
        let plain = CampaignTargets([targets[0], CampaignTarget(index: 301, token: targets[2].token, payload: nil)])
        #expect(plain.payloads.isEmpty && plain.environments.isEmpty)
        #expect(plain.payload(at: 1) == nil && plain.environment(at: 1) == nil)
    }
}

private extension String {
    /// 64 hex digits: `value` in the last 16, zeros before, as DaemonBench writes its targets.
    init(format64 value: UInt64) {
        let digits = String(value, radix: 16)
        self = String(repeating: "0", count: 64 - digits.count) + digits
    }
}
