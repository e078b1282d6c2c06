/// `Codable` types to and from `JSONValue`, so that the mock's control answers, its fault
/// files and the CLI's `--json` reports need no Foundation `JSONEncoder`/`JSONDecoder`
/// (the daemon links the mock for `pushd demo`, and Foundation would be mapped into it).
public struct JSONValueEncoder {
    /// Object members by key, as operators and tests compare them; in coding order otherwise.
    public var sortedKeys = false

    public init() {}

    public func encode<T: Encodable>(_ value: T) throws -> JSONValue {
        let value = try EncodingNode.encode(value, codingPath: [])
        return sortedKeys ? value.sortingKeys() : value
    }
}

public struct JSONValueDecoder {
    public init() {}

    public func decode<T: Decodable>(_ type: T.Type, from value: JSONValue) throws -> T {
        try DecodingNode.decode(type, from: value, codingPath: [])
    }

    /// Parses the bytes and decodes them; parse errors come as `JSONError`.
    public func decode<T: Decodable>(_ type: T.Type, from bytes: [UInt8]) throws -> T {
        try decode(type, from: try JSONValue.parse(bytes))
    }
}

extension JSONValue {
    /// The same value with every object's members sorted by key.
    public func sortingKeys() -> JSONValue {
        switch self {
        case .array(let elements): return .array(elements.map { $0.sortingKeys() })
        case .object(let object):
            return .object(JSONObject(object.members.map { JSONMember(key: $0.key, value: $0.value.sortingKeys()) }
                .sorted { $0.key < $1.key }))
        default: return self
        }
    }

    /// Indented by two spaces per level, `"key" : value`, for people to read.
    public var prettyText: String {
        var text = ""
        appendPretty(to: &text, indent: "")
        return text
    }

    private func appendPretty(to text: inout String, indent: String) {
        let inner = indent + "  "
        switch self {
        case .array(let elements) where !elements.isEmpty:
            text += "[\n"
            for (index, element) in elements.enumerated() {
                text += inner
                element.appendPretty(to: &text, indent: inner)
                text += index == elements.count - 1 ? "\n" : ",\n"
            }
            text += indent + "]"
        case .object(let object) where !object.isEmpty:
            text += "{\n"
            for (index, member) in object.members.enumerated() {
                var writer = JSONWriter(capacity: member.key.utf8.count + 2)
                writer.writeString(member.key)
                text += inner + String(decoding: writer.bytes, as: UTF8.self) + " : "
                member.value.appendPretty(to: &text, indent: inner)
                text += index == object.members.count - 1 ? "\n" : ",\n"
            }
            text += indent + "}"
        default:
            text += String(decoding: compactBytes, as: UTF8.self)
        }
    }
}

/// What an encoder wrote into one place: a plain value, an object or an array. Containers
/// hand out child nodes and the tree becomes a `JSONValue` at the end.
private final class EncodingNode {
    var value: JSONValue = .null
    var members: [(String, EncodingNode)]?
    var elements: [EncodingNode]?

    var resolved: JSONValue {
        if let members { return .object(JSONObject(members.map { JSONMember(key: $0.0, value: $0.1.resolved) })) }
        if let elements { return .array(elements.map(\.resolved)) }
        return value
    }

    static func encode<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws -> JSONValue {
        let node = EncodingNode()
        try node.store(value, codingPath: codingPath)
        return node.resolved
    }

    func store<T: Encodable>(_ value: T, codingPath: [any CodingKey]) throws {
        switch value {
        case let v as String: self.value = .string(v)
        case let v as Bool: self.value = .bool(v)
        case let v as Int: self.value = .int(v)
        case let v as Int64: self.value = .number(JSONNumber(v))
        case let v as Int32: self.value = .int(Int(v))
        case let v as Int16: self.value = .int(Int(v))
        case let v as Int8: self.value = .int(Int(v))
        case let v as UInt64: self.value = .number(JSONNumber(validatedText: String(v)))
        case let v as UInt: self.value = .number(JSONNumber(validatedText: String(v)))
        case let v as UInt32: self.value = .int(Int(v))
        case let v as UInt16: self.value = .int(Int(v))
        case let v as UInt8: self.value = .int(Int(v))
        case let v as Double:
            guard v.isFinite else {
                throw EncodingError.invalidValue(v, .init(codingPath: codingPath, debugDescription: "\(v) has no JSON form"))
            }
            self.value = .double(v)
        case let v as Float:
            guard v.isFinite else {
                throw EncodingError.invalidValue(v, .init(codingPath: codingPath, debugDescription: "\(v) has no JSON form"))
            }
            self.value = .double(Double(v))
        default: try value.encode(to: NodeEncoder(node: self, codingPath: codingPath))
        }
    }
}

private struct NodeEncoder: Encoder {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) -> KeyedEncodingContainer<Key> {
        if node.members == nil { node.members = [] }
        return KeyedEncodingContainer(KeyedNodeEncoder(node: node, codingPath: codingPath))
    }

    func unkeyedContainer() -> any UnkeyedEncodingContainer {
        if node.elements == nil { node.elements = [] }
        return UnkeyedNodeEncoder(node: node, codingPath: codingPath)
    }

    func singleValueContainer() -> any SingleValueEncodingContainer { SingleNodeEncoder(node: node, codingPath: codingPath) }
}

private struct KeyedNodeEncoder<Key: CodingKey>: KeyedEncodingContainerProtocol {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    private func child(_ key: Key) -> EncodingNode {
        let child = EncodingNode()
        node.members!.append((key.stringValue, child))
        return child
    }

    mutating func encodeNil(forKey key: Key) throws { child(key).value = .null }
    mutating func encode<T: Encodable>(_ value: T, forKey key: Key) throws {
        try child(key).store(value, codingPath: codingPath + [key])
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type, forKey key: Key) -> KeyedEncodingContainer<NestedKey> {
        NodeEncoder(node: child(key), codingPath: codingPath + [key]).container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer(forKey key: Key) -> any UnkeyedEncodingContainer {
        NodeEncoder(node: child(key), codingPath: codingPath + [key]).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder { NodeEncoder(node: node, codingPath: codingPath) }
    mutating func superEncoder(forKey key: Key) -> any Encoder { NodeEncoder(node: child(key), codingPath: codingPath + [key]) }
}

private struct IndexKey: CodingKey {
    let intValue: Int?
    let stringValue: String
    init(_ index: Int) { intValue = index; stringValue = "\(index)" }
    init?(intValue: Int) { self.init(intValue) }
    init?(stringValue: String) { return nil }
}

private struct UnkeyedNodeEncoder: UnkeyedEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]
    var count: Int { node.elements!.count }

    private func child() -> EncodingNode {
        let child = EncodingNode()
        node.elements!.append(child)
        return child
    }

    mutating func encodeNil() throws { child().value = .null }
    mutating func encode<T: Encodable>(_ value: T) throws {
        let path = codingPath + [IndexKey(count)]
        try child().store(value, codingPath: path)
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy keyType: NestedKey.Type) -> KeyedEncodingContainer<NestedKey> {
        let path = codingPath + [IndexKey(count)]
        return NodeEncoder(node: child(), codingPath: path).container(keyedBy: keyType)
    }
    mutating func nestedUnkeyedContainer() -> any UnkeyedEncodingContainer {
        let path = codingPath + [IndexKey(count)]
        return NodeEncoder(node: child(), codingPath: path).unkeyedContainer()
    }
    mutating func superEncoder() -> any Encoder {
        let path = codingPath + [IndexKey(count)]
        return NodeEncoder(node: child(), codingPath: path)
    }
}

private struct SingleNodeEncoder: SingleValueEncodingContainer {
    let node: EncodingNode
    let codingPath: [any CodingKey]

    mutating func encodeNil() throws { node.value = .null }
    mutating func encode<T: Encodable>(_ value: T) throws { try node.store(value, codingPath: codingPath) }
}

/// Reading side: a value and where it sits, for error messages that name the key.
private enum DecodingNode {
    static func decode<T: Decodable>(_ type: T.Type, from value: JSONValue, codingPath: [any CodingKey]) throws -> T {
        func mismatch(_ expected: String) -> DecodingError {
            .typeMismatch(type, .init(codingPath: codingPath, debugDescription: "expected \(expected), found \(value.typeName)"))
        }
        func integer<I: FixedWidthInteger>(_ kind: I.Type) throws -> I {
            guard let number = value.numberValue else { throw mismatch("a whole number") }
            if let exact = I(number.text) { return exact }
            let double = number.doubleValue
            guard number.isIntegral, let converted = I(exactly: double) else {
                throw DecodingError.dataCorrupted(.init(codingPath: codingPath,
                                                        debugDescription: "\(number.text) is not a whole number that fits \(kind)"))
            }
            return converted
        }
        if type == String.self {
            guard let string = value.stringValue else { throw mismatch("a string") }
            return string as! T
        }
        if type == Bool.self {
            guard let bool = value.boolValue else { throw mismatch("a boolean") }
            return bool as! T
        }
        if type == Double.self {
            guard let number = value.numberValue else { throw mismatch("a number") }
            return number.doubleValue as! T
        }
        if type == Float.self {
            guard let number = value.numberValue else { throw mismatch("a number") }
            return Float(number.doubleValue) as! T
        }
        if type == Int.self { return try integer(Int.self) as! T }
        if type == Int64.self { return try integer(Int64.self) as! T }
        if type == Int32.self { return try integer(Int32.self) as! T }
        if type == UInt64.self { return try integer(UInt64.self) as! T }
        if type == UInt32.self { return try integer(UInt32.self) as! T }
        if type == UInt.self { return try integer(UInt.self) as! T }
        return try T(from: NodeDecoder(value: value, codingPath: codingPath))
    }
}

private struct NodeDecoder: Decoder {
    let value: JSONValue
    let codingPath: [any CodingKey]
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard let object = value.objectValue else {
            throw DecodingError.typeMismatch([String: Any].self,
                                             .init(codingPath: codingPath, debugDescription: "expected an object, found \(value.typeName)"))
        }
        return KeyedDecodingContainer(KeyedNodeDecoder<Key>(object: object, codingPath: codingPath))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        guard let array = value.arrayValue else {
            throw DecodingError.typeMismatch([Any].self,
                                             .init(codingPath: codingPath, debugDescription: "expected an array, found \(value.typeName)"))
        }
        return UnkeyedNodeDecoder(elements: array, codingPath: codingPath)
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleNodeDecoder(value: value, codingPath: codingPath) }
}

private struct KeyedNodeDecoder<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let object: JSONObject
    let codingPath: [any CodingKey]

    var allKeys: [Key] { object.keys.compactMap { Key(stringValue: $0) } }
    func contains(_ key: Key) -> Bool { object[key.stringValue] != nil }

    private func member(_ key: Key) throws -> JSONValue {
        guard let value = object[key.stringValue] else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "no member \"\(key.stringValue)\""))
        }
        return value
    }

    func decodeNil(forKey key: Key) throws -> Bool { try member(key).isNull }
    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        try DecodingNode.decode(type, from: try member(key), codingPath: codingPath + [key])
    }
    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try NodeDecoder(value: try member(key), codingPath: codingPath + [key]).container(keyedBy: type)
    }
    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try NodeDecoder(value: try member(key), codingPath: codingPath + [key]).unkeyedContainer()
    }
    func superDecoder() throws -> any Decoder { NodeDecoder(value: .object(object), codingPath: codingPath) }
    func superDecoder(forKey key: Key) throws -> any Decoder { NodeDecoder(value: try member(key), codingPath: codingPath + [key]) }
}

private struct UnkeyedNodeDecoder: UnkeyedDecodingContainer {
    let elements: [JSONValue]
    let codingPath: [any CodingKey]
    private(set) var currentIndex = 0

    init(elements: [JSONValue], codingPath: [any CodingKey]) {
        self.elements = elements
        self.codingPath = codingPath
    }

    var count: Int? { elements.count }
    var isAtEnd: Bool { currentIndex >= elements.count }

    private mutating func next<T>(_ type: T.Type) throws -> (JSONValue, [any CodingKey]) {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(type, .init(codingPath: codingPath, debugDescription: "the array has no element \(currentIndex)"))
        }
        defer { currentIndex += 1 }
        return (elements[currentIndex], codingPath + [IndexKey(currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        guard !isAtEnd, elements[currentIndex].isNull else { return false }
        currentIndex += 1
        return true
    }
    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (value, path) = try next(type)
        return try DecodingNode.decode(type, from: value, codingPath: path)
    }
    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let (value, path) = try next([String: Any].self)
        return try NodeDecoder(value: value, codingPath: path).container(keyedBy: type)
    }
    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (value, path) = try next([Any].self)
        return try NodeDecoder(value: value, codingPath: path).unkeyedContainer()
    }
    mutating func superDecoder() throws -> any Decoder {
        let (value, path) = try next(JSONValue.self)
        return NodeDecoder(value: value, codingPath: path)
    }
}

private struct SingleNodeDecoder: SingleValueDecodingContainer {
    let value: JSONValue
    let codingPath: [any CodingKey]

    func decodeNil() -> Bool { value.isNull }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try DecodingNode.decode(type, from: value, codingPath: codingPath) }
}
