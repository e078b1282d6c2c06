import Synchronization

/// Bucket layouts for histograms.
public enum HistogramBuckets {
    /// Upper bounds in seconds from 1 ms to 10 s: an APNs round trip is a few ms on a warm
    /// connection and seconds when the service is struggling or a TLS handshake is in it.
    public static let apnsLatency: [Double] = [
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
    ]

    /// `apnsLatency` with finer steps below 25 ms, where a transactional push's INSERT → accepted
    /// lies and its 5 ms target sits; every bound of `apnsLatency` is kept, so queries on them hold.
    public static let transactionalLatency: [Double] = [
        0.001, 0.002, 0.0025, 0.003, 0.004, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
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
/// at scrape time) and the sum as the bit pattern of a double, all of it repeated in a
/// few stripes on separate cache lines. Each thread writes to the stripe of its
/// `ThreadStripe` number, so threads observing the same series at once do not fight
/// over one line (the sum is a compare-and-swap loop, which contention makes retry);
/// a scrape adds the stripes up.
///
/// `@unchecked Sendable`: the two buffers are allocated and filled in `init`, never
/// reallocated, and freed in `deinit`; after `init` the bounds are only read and the
/// cells are only touched through their atomics, from any thread.
public final class Histogram: @unchecked Sendable {
    let labelText: String
    private let boundCount: Int
    private let upperBounds: UnsafeMutablePointer<Double>
    /// Cells of one stripe: `boundCount + 1` bucket counts (the last one is +Inf), then
    /// the sum; padded to whole pairs of cache lines, which is also the alignment.
    private let stripeStride: Int
    private let stripeMask: Int
    private let threadStripe = ThreadStripe.shared
    private let cells: UnsafeMutablePointer<Atomic<UInt64>>
    private static let stripeAlignment = 128

    init(labelText: String, upperBounds bounds: [Double]) {
        self.labelText = labelText
        boundCount = bounds.count
        upperBounds = .allocate(capacity: max(bounds.count, 1))
        upperBounds.initialize(from: bounds, count: bounds.count)
        let cellsPerLinePair = Histogram.stripeAlignment / MemoryLayout<UInt64>.stride
        stripeStride = (bounds.count + 2 + cellsPerLinePair - 1) / cellsPerLinePair * cellsPerLinePair
        stripeMask = ThreadStripe.stripeCount - 1
        let cellCount = stripeStride * ThreadStripe.stripeCount
        cells = UnsafeMutableRawPointer
            .allocate(byteCount: cellCount * MemoryLayout<Atomic<UInt64>>.stride, alignment: Histogram.stripeAlignment)
            .bindMemory(to: Atomic<UInt64>.self, capacity: cellCount)
        for index in 0..<cellCount {
            (cells + index).initialize(to: Atomic<UInt64>(0))
        }
    }

    deinit {
        cells.deinitialize(count: stripeStride * (stripeMask + 1))
        UnsafeMutableRawPointer(cells).deallocate()
        upperBounds.deinitialize(count: boundCount)
        upperBounds.deallocate()
    }

    /// Records one observation. NaN is ignored: it would turn the sum into NaN for good.
    public func observe(_ value: Double) {
        guard !value.isNaN else { return }
        var index = 0
        while index < boundCount && value > upperBounds[index] { index += 1 }
        let stripe = cells + Int(threadStripe.current() & UInt(stripeMask)) * stripeStride
        stripe[index].wrappingAdd(1, ordering: .relaxed)
        AtomicDouble.add(value, to: stripe[boundCount + 1])
    }

    /// Records a duration in seconds.
    public func observe(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        observe(Double(seconds) + Double(attoseconds) * 1e-18)
    }

    /// Cumulative counts per bucket, the last one being +Inf (which equals the count).
    public var cumulativeCounts: [UInt64] {
        var running: UInt64 = 0
        return (0...boundCount).map { index in
            for stripe in 0...stripeMask {
                running &+= cells[stripe * stripeStride + index].load(ordering: .relaxed)
            }
            return running
        }
    }

    public var count: UInt64 { cumulativeCounts.last ?? 0 }

    public var sum: Double {
        (0...stripeMask).reduce(0) { total, stripe in
            total + Double(bitPattern: cells[stripe * stripeStride + boundCount + 1].load(ordering: .relaxed))
        }
    }
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
