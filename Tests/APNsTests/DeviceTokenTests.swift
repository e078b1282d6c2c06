import APNs
import Testing

@Suite struct DeviceTokenTests {
    @Test func uppercaseHexIsLowercased() throws {
        let token = try DeviceToken(TestSupport.token64.uppercased())
        #expect(token.hex == TestSupport.token64)
    }

    @Test func bytesRoundTrip() throws {
        let token = try DeviceToken(TestSupport.token64)
        #expect(token.bytes.count == 32)
        #expect(try DeviceToken(bytes: token.bytes) == token)
    }

    static let malformed: [(String, DeviceTokenError)] = [
        ("", .empty),
        (String(repeating: "a", count: 62), .tooShort(length: 62)),
        (String(repeating: "a", count: 202), .tooLong(length: 202)),
        (String(repeating: "a", count: 65), .oddLength(length: 65)),
        (String(repeating: "a", count: 63) + "g", .invalidCharacter("'g'", offset: 63)),
        (" " + String(repeating: "a", count: 64), .invalidCharacter("a space", offset: 0)),
        (String(repeating: "a", count: 32) + "é" + String(repeating: "a", count: 31), .invalidCharacter("byte 0xC3", offset: 32)),
    ]

    @Test(arguments: DeviceTokenTests.malformed)
    func malformedTokensAreRejectedWithTheirReason(input: String, expected: DeviceTokenError) {
        #expect(throws: expected) { try DeviceToken(input) }
    }

    @Test func errorMessagesSayWhatIsWrong() {
        #expect(DeviceTokenError.invalidCharacter("'g'", offset: 3).description.contains("offset 3"))
        #expect(DeviceTokenError.tooShort(length: 10).description.contains("at least 64"))
    }

    @Test func longerTokensUpTo100BytesAreAccepted() throws {
        let token = try DeviceToken(String(repeating: "AB", count: 100))
        #expect(token.hex.count == 200)
    }

    @Test func redactedFormHidesTheToken() throws {
        #expect(try DeviceToken(TestSupport.token64).redacted == "00fc13ad…")
    }
}
