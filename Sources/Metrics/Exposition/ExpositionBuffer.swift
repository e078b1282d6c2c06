/// The Prometheus text format 0.0.4, written into one growing byte buffer per scrape.
struct ExpositionBuffer {
    private(set) var bytes: [UInt8] = []

    init(capacity: Int = 16 * 1024) {
        bytes.reserveCapacity(capacity)
    }

    mutating func append(_ text: String) {
        bytes.append(contentsOf: text.utf8)
    }

    mutating func append(_ byte: UInt8) {
        bytes.append(byte)
    }

    /// Writes the `# HELP` and `# TYPE` lines that open every family, once.
    mutating func appendHeader(name: String, help: String, kind: MetricKind) {
        append("# HELP ")
        append(name)
        append(UInt8(ascii: " "))
        for byte in help.utf8 {
            switch byte {
            case UInt8(ascii: "\\"): append("\\\\")
            case UInt8(ascii: "\n"): append("\\n")
            default: append(byte)
            }
        }
        append("\n# TYPE ")
        append(name)
        append(UInt8(ascii: " "))
        append(kind.rawValue)
        append(UInt8(ascii: "\n"))
    }

    /// Writes one sample line. `labels` is the pre-rendered `a="x",b="y"` text (empty for
    /// none); `extraLabel` is appended after it, for a histogram's `le`.
    mutating func appendSample(name: String, suffix: String = "", labels: String, extraLabel: String = "", value: String) {
        append(name)
        append(suffix)
        if !labels.isEmpty || !extraLabel.isEmpty {
            append(UInt8(ascii: "{"))
            append(labels)
            if !labels.isEmpty && !extraLabel.isEmpty { append(UInt8(ascii: ",")) }
            append(extraLabel)
            append(UInt8(ascii: "}"))
        }
        append(UInt8(ascii: " "))
        append(value)
        append(UInt8(ascii: "\n"))
    }

    /// Renders `name="value"` pairs with the value escaped as the text format requires.
    /// Done once when a child is bound, never per update.
    static func renderLabels(names: [String], values: [String]) -> String {
        var text = ""
        for (index, (name, value)) in zip(names, values).enumerated() {
            if index > 0 { text += "," }
            text += name
            text += "=\""
            text += escapeLabelValue(value)
            text += "\""
        }
        return text
    }

    static func escapeLabelValue(_ value: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(value.utf8.count)
        for character in value.unicodeScalars {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"": escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }

    /// Formats a sample value the way Prometheus parses it: integral values without a
    /// fraction, `+Inf`, `-Inf` and `NaN` spelled out, everything else in the shortest
    /// form that reads back to the same double.
    static func format(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value == .infinity { return "+Inf" }
        if value == -.infinity { return "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return value.description
    }
}
