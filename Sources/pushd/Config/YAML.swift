internal import CYAML

/// A parsed YAML node with the position it came from, so configuration errors can
/// point at a line. Only what a configuration file needs: scalars, sequences and
/// mappings with scalar keys. Anchors and aliases are resolved by libyaml.
indirect enum YAMLNode: Sendable {
    case scalar(String, quoted: Bool, line: Int)
    case sequence([YAMLNode], line: Int)
    case mapping([(key: String, value: YAMLNode)], line: Int)
    case empty

    var line: Int {
        switch self {
        case .scalar(_, _, let line), .sequence(_, let line), .mapping(_, let line): return line
        case .empty: return 0
        }
    }

    var kindName: String {
        switch self {
        case .scalar: return "a value"
        case .sequence: return "a list"
        case .mapping: return "a mapping"
        case .empty: return "nothing"
        }
    }
}

struct YAMLError: Error, CustomStringConvertible {
    var message: String
    var line: Int
    var description: String { line > 0 ? "line \(line): \(message)" : message }
}

enum YAMLLibrary {
    /// libyaml's version, for example "0.2.5".
    static var version: String { String(cString: pushd_yaml_version_string()) }

    /// Parses the first document of `text`. An empty text is `.empty`.
    static func parse(_ text: String) throws(YAMLError) -> YAMLNode {
        var parser = yaml_parser_t()
        guard yaml_parser_initialize(&parser) == 1 else {
            throw YAMLError(message: "libyaml could not start a parser", line: 0)
        }
        defer { yaml_parser_delete(&parser) }
        let bytes = Array(text.utf8)
        var document = yaml_document_t()
        let loaded: Int32 = bytes.withUnsafeBufferPointer { buffer in
            yaml_parser_set_input_string(&parser, buffer.baseAddress, buffer.count)
            return yaml_parser_load(&parser, &document)
        }
        guard loaded == 1 else {
            let problem = parser.problem.map { String(cString: $0) } ?? "malformed YAML"
            let context = parser.context.map { String(cString: $0) + ": " } ?? ""
            throw YAMLError(message: context + problem, line: Int(parser.problem_mark.line) + 1)
        }
        defer { yaml_document_delete(&document) }
        guard let root = yaml_document_get_root_node(&document) else { return .empty }
        return try convert(root, in: &document, depth: 0)
    }

    private static func convert(_ node: UnsafeMutablePointer<yaml_node_t>, in document: inout yaml_document_t,
                                depth: Int) throws(YAMLError) -> YAMLNode {
        let line = Int(node.pointee.start_mark.line) + 1
        guard depth < 64 else { throw YAMLError(message: "nesting deeper than 64 levels", line: line) }
        switch node.pointee.type {
        case YAML_SCALAR_NODE:
            let scalar = node.pointee.data.scalar
            let text = String(decoding: UnsafeBufferPointer(start: scalar.value, count: scalar.length), as: UTF8.self)
            return .scalar(text, quoted: scalar.style != YAML_PLAIN_SCALAR_STYLE, line: line)
        case YAML_SEQUENCE_NODE:
            var items = [YAMLNode]()
            var item = node.pointee.data.sequence.items.start
            let top = node.pointee.data.sequence.items.top
            while let current = item, current != top {
                guard let child = yaml_document_get_node(&document, current.pointee) else { break }
                items.append(try convert(child, in: &document, depth: depth + 1))
                item = current + 1
            }
            return .sequence(items, line: line)
        case YAML_MAPPING_NODE:
            var pairs = [(key: String, value: YAMLNode)]()
            var pair = node.pointee.data.mapping.pairs.start
            let top = node.pointee.data.mapping.pairs.top
            while let current = pair, current != top {
                guard let keyNode = yaml_document_get_node(&document, current.pointee.key),
                      let valueNode = yaml_document_get_node(&document, current.pointee.value) else { break }
                guard case .scalar(let key, _, let keyLine) = try convert(keyNode, in: &document, depth: depth + 1) else {
                    throw YAMLError(message: "mapping keys must be plain values", line: line)
                }
                if pairs.contains(where: { $0.key == key }) {
                    throw YAMLError(message: "key '\(key)' appears twice", line: keyLine)
                }
                pairs.append((key, try convert(valueNode, in: &document, depth: depth + 1)))
                pair = current + 1
            }
            return .mapping(pairs, line: line)
        default:
            return .empty
        }
    }
}
