/// Why a metric could not be registered, bound or served. Every case names the metric
/// (and the label or value) at fault, so the message is enough to fix the call site.
public enum MetricError: Error, Equatable, Sendable, CustomStringConvertible {
    case invalidMetricName(String)
    case invalidLabelName(metric: String, label: String)
    case duplicateLabelName(metric: String, label: String)
    case reservedLabelName(metric: String, label: String)
    case missingTotalSuffix(metric: String)
    case unitNotInName(metric: String, unit: String)
    case emptyHelp(metric: String)
    case invalidBuckets(metric: String, detail: String)
    case conflictingRegistration(metric: String, existing: String, requested: String)
    case labelCountMismatch(metric: String, expected: [String], got: [String])

    public var description: String {
        switch self {
        case .invalidMetricName(let name):
            return "metric name \"\(name)\" is invalid: it must match [a-zA-Z_:][a-zA-Z0-9_:]*"
        case .invalidLabelName(let metric, let label):
            return "metric \(metric): label name \"\(label)\" is invalid: it must match [a-zA-Z_][a-zA-Z0-9_]*"
        case .duplicateLabelName(let metric, let label):
            return "metric \(metric): label name \"\(label)\" appears more than once"
        case .reservedLabelName(let metric, let label):
            return "metric \(metric): label name \"\(label)\" is reserved (names starting with __, and le on histograms)"
        case .missingTotalSuffix(let metric):
            return "counter \(metric): counter names must end in _total"
        case .unitNotInName(let metric, let unit):
            return "metric \(metric): the name must end in _\(unit) (before _total on counters) to carry its unit \(unit)"
        case .emptyHelp(let metric):
            return "metric \(metric): help text must not be empty"
        case .invalidBuckets(let metric, let detail):
            return "histogram \(metric): invalid buckets: \(detail)"
        case .conflictingRegistration(let metric, let existing, let requested):
            return "metric \(metric) is already registered as \(existing); cannot register it again as \(requested)"
        case .labelCountMismatch(let metric, let expected, let got):
            return "metric \(metric): expected values for labels [\(expected.joined(separator: ", "))], got \(got.count) value(s) \(got)"
        }
    }
}
