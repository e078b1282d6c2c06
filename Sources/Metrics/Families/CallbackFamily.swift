import Locking

/// One sample produced at scrape time: label values in the order of the family's label
/// names, and the value.
public struct MetricSample: Sendable, Equatable {
    public var labelValues: [String]
    public var value: Double

    public init(labelValues: [String] = [], value: Double) {
        self.labelValues = labelValues
        self.value = value
    }
}

/// A gauge or counter family whose samples are computed when scraped, for values that
/// live elsewhere (queue depth in the database, /proc). The result is cached for a short
/// while, and concurrent scrapes wait for one computation instead of each running it, so
/// that scrapes never hammer the source.
public final class CallbackFamily: Sendable {
    public typealias Source = @Sendable () throws -> [MetricSample]

    private struct State {
        var source: Source?
        var cacheDuration: Duration = .zero
        var cached: [MetricSample] = []
        var computedAt: ContinuousClock.Instant?
        var lastError: String?
    }

    let descriptor: MetricDescriptor
    private let state = Lock(State())

    init(descriptor: MetricDescriptor) {
        self.descriptor = descriptor
    }

    public var name: String { descriptor.name }
    public var labelNames: [String] { descriptor.labelNames }

    /// Sets (or replaces) what computes the samples. Until a source is set the family is
    /// exposed with its HELP and TYPE lines and no samples.
    public func setSource(cacheFor cacheDuration: Duration = .zero, _ source: @escaping Source) {
        state.withLock { state in
            state.source = source
            state.cacheDuration = cacheDuration
            state.cached = []
            state.computedAt = nil
            state.lastError = nil
        }
    }

    /// Convenience for a family without labels.
    public func setValueSource(cacheFor cacheDuration: Duration = .zero, _ value: @escaping @Sendable () throws -> Double) {
        setSource(cacheFor: cacheDuration) { [MetricSample(value: try value())] }
    }

    /// Why the last computation failed or returned a malformed sample, for logging;
    /// nil after a clean one.
    public var lastError: String? { state.withLock { $0.lastError } }

    /// The samples a scrape would show now, computing them if the cache is stale.
    /// A source that throws yields no samples (a stale value could hide an outage);
    /// a sample with the wrong number of label values is dropped.
    public func samples() -> [MetricSample] {
        state.withLock { state in
            guard let source = state.source else { return [] }
            let now = ContinuousClock.now
            if let computedAt = state.computedAt, now - computedAt < state.cacheDuration {
                return state.cached
            }
            var problem: String?
            var result: [MetricSample]
            do {
                result = try source()
            } catch {
                problem = "metric \(descriptor.name): source failed: \(error)"
                result = []
            }
            let expected = descriptor.labelNames.count
            if let bad = result.first(where: { $0.labelValues.count != expected }) {
                problem = MetricError.labelCountMismatch(metric: descriptor.name, expected: descriptor.labelNames, got: bad.labelValues).description
                result.removeAll { $0.labelValues.count != expected }
            }
            result.sort { $0.labelValues.lexicographicallyPrecedes($1.labelValues) }
            state.cached = result
            state.computedAt = now
            state.lastError = problem
            return result
        }
    }
}

extension CallbackFamily: RegisteredFamily {
    func write(into buffer: inout ExpositionBuffer) {
        buffer.appendHeader(name: descriptor.name, help: descriptor.help, kind: descriptor.kind)
        var previous: [String]?
        for sample in samples() {
            // Two samples with the same labels would make the scrape invalid.
            if sample.labelValues == previous { continue }
            previous = sample.labelValues
            let labels = ExpositionBuffer.renderLabels(names: descriptor.labelNames, values: sample.labelValues)
            buffer.appendSample(name: descriptor.name, labels: labels, value: ExpositionBuffer.format(sample.value))
        }
    }
}
