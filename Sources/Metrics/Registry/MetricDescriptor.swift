/// The kind of a metric family, as written on its `# TYPE` line.
public enum MetricKind: String, Sendable {
    case counter
    case gauge
    case histogram
}

/// What identifies a family: registering the same name again must agree on all of it
/// except the help text, which is documentation and may be reworded between releases.
struct MetricDescriptor: Sendable, Equatable {
    let name: String
    let help: String
    let kind: MetricKind
    let labelNames: [String]
    let buckets: [Double]?

    /// Validates everything a caller passes when registering, so that exposition never
    /// has to check anything again.
    init(name: String, help: String, unit: String?, kind: MetricKind, labelNames: [String],
         buckets: [Double]? = nil) throws(MetricError) {
        guard MetricDescriptor.isValidMetricName(name) else { throw .invalidMetricName(name) }
        guard !help.isEmpty else { throw .emptyHelp(metric: name) }
        if kind == .counter, !name.hasSuffix("_total") { throw .missingTotalSuffix(metric: name) }
        if let unit {
            let stem = kind == .counter ? String(name.dropLast("_total".count)) : name
            guard !unit.isEmpty, stem.hasSuffix("_" + unit) else { throw .unitNotInName(metric: name, unit: unit) }
        }
        var seen = Set<String>()
        for label in labelNames {
            guard MetricDescriptor.isValidLabelName(label) else { throw .invalidLabelName(metric: name, label: label) }
            guard !label.hasPrefix("__"), !(kind == .histogram && label == "le") else {
                throw .reservedLabelName(metric: name, label: label)
            }
            guard seen.insert(label).inserted else { throw .duplicateLabelName(metric: name, label: label) }
        }
        self.name = name
        self.help = help
        self.kind = kind
        self.labelNames = labelNames
        self.buckets = buckets
    }

    /// Compares what matters for a second registration of the same name.
    func isCompatible(with other: MetricDescriptor) -> Bool {
        kind == other.kind && labelNames == other.labelNames && buckets == other.buckets
    }

    var summary: String {
        var text = "\(kind.rawValue) with labels [\(labelNames.joined(separator: ", "))]"
        if let buckets { text += " and buckets \(buckets.map(ExpositionBuffer.format))" }
        return text
    }

    static func isValidMetricName(_ name: String) -> Bool {
        var first = true
        for byte in name.utf8 {
            let ok = isLetter(byte) || byte == UInt8(ascii: "_") || byte == UInt8(ascii: ":") || (!first && isDigit(byte))
            if !ok { return false }
            first = false
        }
        return !first
    }

    static func isValidLabelName(_ name: String) -> Bool {
        var first = true
        for byte in name.utf8 {
            let ok = isLetter(byte) || byte == UInt8(ascii: "_") || (!first && isDigit(byte))
            if !ok { return false }
            first = false
        }
        return !first
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
