/// A JSON document as plain values, with object members kept in order so that rendering a
/// parsed payload reproduces the member order the application chose.
public enum JSONValue: Sendable, Hashable {
    case null
    case bool(Bool)
    case number(JSONNumber)
    case string(String)
    case array([JSONValue])
    case object(JSONObject)

    public static func int(_ value: Int) -> JSONValue { .number(JSONNumber(value)) }
    public static func double(_ value: Double) -> JSONValue { .number(JSONNumber(value)) }

    public var stringValue: String? { if case .string(let s) = self { return s } else { return nil } }
    public var numberValue: JSONNumber? { if case .number(let n) = self { return n } else { return nil } }
    public var objectValue: JSONObject? { if case .object(let o) = self { return o } else { return nil } }
    public var arrayValue: [JSONValue]? { if case .array(let a) = self { return a } else { return nil } }
    public var boolValue: Bool? { if case .bool(let b) = self { return b } else { return nil } }
    public var isNull: Bool { if case .null = self { return true } else { return false } }

    /// The JSON type name, for error messages ("expected a number, found a string").
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number: return "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }

    /// Parses a complete JSON text (RFC 8259, UTF-8, no trailing content).
    public static func parse(_ bytes: [UInt8], maxDepth: Int = JSONParser.defaultMaxDepth) throws(JSONError) -> JSONValue {
        var parser = JSONParser(bytes, maxDepth: maxDepth)
        return try parser.parseDocument()
    }

    /// Compact JSON (no insignificant whitespace).
    public var compactBytes: [UInt8] {
        var writer = JSONWriter()
        writer.write(self)
        return writer.bytes
    }
}

/// A JSON number kept as its text, so integers of any size survive a parse/render round trip.
public struct JSONNumber: Sendable, Hashable, CustomStringConvertible {
    /// The number as JSON text, always valid JSON number syntax.
    public let text: String

    public init(_ value: Int) { text = String(value) }
    public init(_ value: Int64) { text = String(value) }

    /// Non-finite values have no JSON form and become 0; a payload builder that accepts
    /// user input should check `isFinite` first.
    public init(_ value: Double) {
        if !value.isFinite {
            text = "0"
        } else if value == value.rounded(.towardZero) && abs(value) < 1e15 {
            text = String(Int64(value))
        } else {
            text = "\(value)"
        }
    }

    /// Only for text the parser has already checked against the JSON number grammar.
    init(validatedText: String) { text = validatedText }

    public var doubleValue: Double { Double(text) ?? .nan }

    /// The value when the text is an integer that fits; nil for fractions, exponents and overflow.
    public var int64Value: Int64? { Int64(text) }

    /// True when the value is integral even if written with a fraction or exponent ("1.0", "1e0").
    public var isIntegral: Bool {
        let d = doubleValue
        return d.isFinite && d == d.rounded(.towardZero)
    }

    public var description: String { text }
}

/// Object members in document order.
public struct JSONObject: Sendable, Hashable {
    public var members: [JSONMember]

    public init(_ members: [JSONMember] = []) { self.members = members }

    public init(_ pairs: KeyValuePairs<String, JSONValue>) {
        members = pairs.map { JSONMember(key: $0.key, value: $0.value) }
    }

    /// The first member with this key.
    public subscript(key: String) -> JSONValue? {
        for member in members where member.key == key { return member.value }
        return nil
    }

    public var keys: [String] { members.map(\.key) }
    public var count: Int { members.count }
    public var isEmpty: Bool { members.isEmpty }

    /// Replaces the member with this key in place, or appends it.
    public mutating func set(_ key: String, _ value: JSONValue) {
        if let i = members.firstIndex(where: { $0.key == key }) {
            members[i].value = value
        } else {
            members.append(JSONMember(key: key, value: value))
        }
    }

    public mutating func remove(_ key: String) {
        members.removeAll { $0.key == key }
    }
}

public struct JSONMember: Sendable, Hashable {
    public var key: String
    public var value: JSONValue

    public init(key: String, value: JSONValue) {
        self.key = key
        self.value = value
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral,
    ExpressibleByBooleanLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral, ExpressibleByNilLiteral
{
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(JSONObject(elements.map { JSONMember(key: $0.0, value: $0.1) }))
    }
    public init(nilLiteral: ()) { self = .null }
}

/// Why bytes are not the JSON expected, with the byte offset where reading stopped.
public struct JSONError: Error, Sendable, Hashable, CustomStringConvertible {
    public var offset: Int
    public var message: String

    public init(offset: Int, message: String) {
        self.offset = offset
        self.message = message
    }

    public var description: String { "invalid JSON at byte \(offset): \(message)" }
}
