import APNs
import Foundation
import Testing

/// `JSONValueEncoder`/`JSONValueDecoder` read and write what Foundation's coders do, for the
/// mock's control answers and fault files and the CLI's `--json` reports.
@Suite struct JSONCodingTests {
    struct Inner: Codable, Equatable {
        var count: UInt64
        var ratio: Double
    }

    struct Sample: Codable, Equatable {
        var name: String
        var flag: Bool
        var small: Int32
        var big: Int64
        var optional: Int?
        var list: [Inner]
        var byKey: [String: Int]
        var names: Set<String>
        var nested: [[String]]
    }

    static let sample = Sample(name: "a \"quoted\" é\n", flag: true, small: -7, big: 9_007_199_254_740_993, optional: nil,
                               list: [Inner(count: UInt64.max, ratio: 0.25), Inner(count: 0, ratio: -1e-9)],
                               byKey: ["410 Unregistered": 3, "200": 1], names: ["x", "y"], nested: [[], ["p", "q"]])

    @Test func foundationDecodesWhatTheEncoderWrites() throws {
        var encoder = JSONValueEncoder()
        encoder.sortedKeys = true
        let value = try encoder.encode(Self.sample)
        #expect(value.objectValue?.keys == ["big", "byKey", "flag", "list", "name", "names", "nested", "small"])
        #expect(try JSONDecoder().decode(Sample.self, from: Data(value.compactBytes)) == Self.sample)
        #expect(try JSONDecoder().decode(Sample.self, from: Data(value.prettyText.utf8)) == Self.sample)
    }

    @Test func theDecoderReadsWhatFoundationWrites() throws {
        var sample = Self.sample
        sample.optional = 12
        let bytes = [UInt8](try JSONEncoder().encode(sample))
        #expect(try JSONValueDecoder().decode(Sample.self, from: bytes) == sample)
    }

    @Test func decodingErrorsNameTheKeyAndTheTypeFound() throws {
        let bytes = Array(#"{"name":"n","flag":true,"small":1,"big":1,"list":[{"count":"many","ratio":1}],"byKey":{},"names":[],"nested":[]}"#.utf8)
        do {
            _ = try JSONValueDecoder().decode(Sample.self, from: bytes)
            Issue.record("decoded a string as a number")
        } catch let DecodingError.typeMismatch(_, context) {
            #expect(context.codingPath.map(\.stringValue) == ["list", "0", "count"])
            #expect(context.debugDescription.contains("found a string"))
        }
        #expect(throws: DecodingError.self) { try JSONValueDecoder().decode(Sample.self, from: Array(#"{"name":"n"}"#.utf8)) }
        #expect(throws: DecodingError.self) { try JSONValueDecoder().decode(Inner.self, from: Array(#"{"count":1.5,"ratio":1}"#.utf8)) }
        #expect(throws: DecodingError.self) { try JSONValueDecoder().decode(Inner.self, from: Array(#"{"count":-1,"ratio":1}"#.utf8)) }
        #expect(throws: JSONError.self) { try JSONValueDecoder().decode(Inner.self, from: Array("{".utf8)) }
    }
}
