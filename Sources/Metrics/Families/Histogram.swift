import Synchronization

/// Bucket layouts for histograms.
public enum HistogramBuckets {
    /// Upper bounds in seconds from 1 ms to 10 s: an APNs round trip is a few ms on a warm
    /// connection and seconds when the service is struggling or a TLS handshake is in it.
    public static let apnsLatency: [Double] = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]

    /// Upper bounds start, start·factor, start·factor², … (`count` of them).
    public static func exponential(start: Double, factor: Double, count: Int) -> [Double] {
        guard count > 0 else { return [] }
        var bounds: [Double] = [start]
        for _ in 1..<count { bounds.append(bounds[bounds.count - 1] * factor) }
        return bounds
    }

    /// Checks that bounds are finite and strictly increasing; a trailing +Inf is dropped
    /// since every histogram has that bucket anyway.
    static func validated(_ bounds: [Double], metric: String) throws(MetricError) -> [Double] {
        var bounds = bounds
        if bounds.last == .infinity { bounds.removeLast() }
        guard !bounds.isEmpty else { throw .invalidBuckets(metric: metric, detail: "no finite upper bound given") }
        for (index, bound) in bounds.enumerated() {
            guard bound.isFinite else {
                throw .invalidBuckets(metric: metric, detail: "bound #\(index + 1) is \(ExpositionBuffer.format(bound)); only the implicit last bucket may be +Inf")
            }
            if index > 0, bound <= bounds[index - 1] {
                throw .invalidBuckets(metric: metric, detail: "bounds must increase strictly, but \(ExpositionBuffer.format(bound)) follows \(ExpositionBuffer.format(bounds[index - 1]))")
            }
        }
        return bounds
    }
}

/// A family of histograms sharing a name, help text, label names and buckets.
public final class HistogramFamily: Sendable {
    let descriptor: MetricDescriptor
    private let children = ChildTable<Histogram>()
    /// Rendered once: `le="0.005"` for each finite bound, then `le="+Inf"`.
    private let leLabels: [String]

    init(descriptor: MetricDescriptor) {
        self.descriptor = descriptor
        let bounds = descriptor.buckets ?? []
        leLabels = bounds.map { "le=\"\(ExpositionBuffer.format($0))\"" } + ["le=\"+Inf\""]
        if descriptor.labelNames.isEmpty {
            _ = children.child(for: []) { Histogram(labelText: "", upperBounds: bounds) }
        }
    }

    public var name: String { descriptor.name }
    public var labelNames: [String] { descriptor.labelNames }
    public var upperBounds: [Double] { descriptor.buckets ?? [] }

    public func labels(_ values: String...) throws(MetricError) -> Histogram {
        try labels(values)
    }

    public func labels(_ values: [String]) throws(MetricError) -> Histogram {
        let text = try descriptor.renderLabels(values)
        let bounds = upperBounds
        return children.child(for: values) { Histogram(labelText: text, upperBounds: bounds) }
    }

    /// Binds values whose count is right by construction (the catalog's own calls).
    func bound(_ values: [String]) -> Histogram {
        let text = ExpositionBuffer.renderLabels(names: descriptor.labelNames, values: values)
        let bounds = upperBounds
        return children.child(for: values) { Histogram(labelText: text, upperBounds: bounds) }
    }
}

/// One histogram time series: a relaxed atomic count per bucket (not cumulative; summed
/// at scrape time) and the sum as the bit pattern of a double.
///
/// `@unchecked Sendable`: the two buffers are allocated and filled in `init`, never
/// reallocated, and freed in `deinit`; after `init` the bounds are only read and the
/// counts are only touched through their atomics, from any thread.
public final class Histogram: @unchecked Sendable {
    let labelText: String
    @usableFromInline let boundCount: Int
    @usableFromInline let upperBounds: UnsafeMutablePointer<Double>
    /// `boundCount + 1` cells; the last one is the +Inf bucket.
    @usableFromInline let bucketCounts: UnsafeMutablePointer<Atomic<UInt64>>
    @usableFromInline let sumBits = Atomic<UInt64>(0)

    init(labelText: String, upperBounds bounds: [Double]) {
        self.labelText = labelText
        boundCount = bounds.count
        upperBounds = .allocate(capacity: max(bounds.count, 1))
        upperBounds.initialize(from: bounds, count: bounds.count)
        bucketCounts = .allocate(capacity: bounds.count + 1)
        for index in 0...bounds.count {
            (bucketCounts + index).initialize(to: Atomic<UInt64>(0))
        }
    }

    deinit {
        bucketCounts.deinitialize(count: boundCount + 1)
        bucketCounts.deallocate()
        upperBounds.deinitialize(count: boundCount)
        upperBounds.deallocate()
    }

    /// Records one observation. NaN is ignored: it would turn the sum into NaN for good.
    @inlinable
    public func observe(_ value: Double) {
        guard !value.isNaN else { return }
        var index = 0
        while index < boundCount && value > upperBounds[index] { index += 1 }
        bucketCounts[index].wrappingAdd(1, ordering: .relaxed)
        AtomicDouble.add(value, to: sumBits)
    }

    /// Records a duration in seconds.
    @inlinable
    public func observe(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        observe(Double(seconds) + Double(attoseconds) * 1e-18)
    }

    /// Cumulative counts per bucket, the last one being +Inf (which equals the count).
    public var cumulativeCounts: [UInt64] {
        var running: UInt64 = 0
        return (0...boundCount).map { index in
            running &+= bucketCounts[index].load(ordering: .relaxed)
            return running
        }
    }

    public var count: UInt64 { cumulativeCounts.last ?? 0 }
    public var sum: Double { Double(bitPattern: sumBits.load(ordering: .relaxed)) }
}

extension HistogramFamily: RegisteredFamily {
    func write(into buffer: inout ExpositionBuffer) {
        let name = descriptor.name
        buffer.appendHeader(name: name, help: descriptor.help, kind: .histogram)
        for (_, child) in children.sorted() {
            let counts = child.cumulativeCounts
            // Buckets and sum are read one after the other, not as one snapshot: an
            // observation racing this scrape may show in one before the other.
            let sum = child.sum
            for (le, count) in zip(leLabels, counts) {
                buffer.appendSample(name: name, suffix: "_bucket", labels: child.labelText, extraLabel: le, value: String(count))
            }
            buffer.appendSample(name: name, suffix: "_sum", labels: child.labelText, value: ExpositionBuffer.format(sum))
            buffer.appendSample(name: name, suffix: "_count", labels: child.labelText, value: String(counts.last ?? 0))
        }
    }
}
