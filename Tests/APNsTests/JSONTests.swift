import APNs
import Testing

@Suite struct JSONTests {
    @Test(arguments: [
        "{}", "[]", "0", "-0", "1.5e10", "-1E-2", "\"\"", "true", "false", "null", " \t\r\n{ \"a\" : [ 1 , { } ] } ",
        #""\u00e9\ud83d\ude00\/\b\f\n\r\t\"\\""#, "\"推送\"", "[[[[[[[[[[1]]]]]]]]]]",
    ])
    func acceptsValidJSON(text: String) throws {
        let value = try JSONValue.parse(Array(text.utf8))
        #expect(try JSONValue.parse(value.compactBytes) == value, "render and parse again gives the same value")
    }

    @Test(arguments: [
        "", " ", "{", "}", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "{a:1}", "01", "1.", ".5", "-", "1e", "+1", "NaN", "Infinity",
        "tru", "nul", "\"abc", "\"\\x\"", "\"\\u12\"", "\"\\ud800\"", "\"\\udc00\"", "\"\\ud800\\u0041\"", "\"a\u{1}b\"",
        "{} {}", "[1] x", "'a'", "{\"a\":1,\"a\":2}",
    ])
    func rejectsInvalidJSON(text: String) {
        #expect(throws: JSONError.self) { try JSONValue.parse(Array(text.utf8)) }
    }

    @Test(arguments: [[0xC0, 0x80], [0xED, 0xA0, 0x80], [0xF4, 0x90, 0x80, 0x80], [0xE4, 0xB8], [0x80], [0xFF], [0xF0, 0x9F, 0x98]])
    func rejectsInvalidUTF8InStrings(bad: [UInt8]) {
        let bytes = [UInt8(ascii: "\"")] + bad + [UInt8(ascii: "\"")]
        #expect(throws: JSONError.self) { try JSONValue.parse(bytes) }
        #expect(JSONParser.checkObject(Array("{\"k\":".utf8) + bytes + [UInt8(ascii: "}")]) != nil)
    }

    @Test func nestingIsLimitedInsteadOfExhaustingTheStack() {
        let deep = Array(repeating: UInt8(ascii: "["), count: 100_000) + Array(repeating: UInt8(ascii: "]"), count: 100_000)
        #expect(throws: JSONError.self) { try JSONValue.parse(deep) }
        let deepObject = Array(String(repeating: "{\"a\":", count: 50_000).utf8)
        #expect(JSONParser.checkObject(deepObject) != nil)
        let ok = Array(repeating: UInt8(ascii: "["), count: 64) + Array(repeating: UInt8(ascii: "]"), count: 64)
        #expect(throws: Never.self) { try JSONValue.parse(ok) }
    }

    @Test func numbersKeepTheirText() throws {
        let value = try JSONValue.parse(Array("[12345678901234567890123,1.50,-0,1e2]".utf8))
        #expect(value.compactBytes == Array("[12345678901234567890123,1.50,-0,1e2]".utf8))
        #expect(value.arrayValue?[0].numberValue?.int64Value == nil)
        #expect(value.arrayValue?[3].numberValue?.isIntegral == true)
        #expect(JSONNumber(0.1).text == "0.1")
        #expect(JSONNumber(3.0).text == "3")
        #expect(JSONNumber(Double.nan).text == "0")
    }

    @Test func errorsSayWhereAndWhat() {
        do {
            _ = try JSONValue.parse(Array("{\"a\":tru}".utf8))
            Issue.record("accepted")
        } catch {
            #expect(error.offset == 5)
            #expect(error.description.contains("byte 5"))
            #expect(error.description.contains("true"))
        }
    }
}
