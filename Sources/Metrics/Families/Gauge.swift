import Synchronization

/// A family of gauges sharing a name, help text and label names.
public final class GaugeFamily: Sendable {
    let descriptor: MetricDescriptor
    private let children = ChildTable<Gauge>()

    init(descriptor: MetricDescriptor) {
        self.descriptor = descriptor
        if descriptor.labelNames.isEmpty {
            _ = children.child(for: []) { Gauge(labelText: "") }
        }
    }

    public var name: String { descriptor.name }
    public var labelNames: [String] { descriptor.labelNames }

    public func labels(_ values: String...) throws(MetricError) -> Gauge {
        try labels(values)
    }

    public func labels(_ values: [String]) throws(MetricError) -> Gauge {
        let text = try descriptor.renderLabels(values)
        return children.child(for: values) { Gauge(labelText: text) }
    }

    /// Binds values whose count is right by construction (the catalog's own calls).
    func bound(_ values: [String]) -> Gauge {
        let text = ExpositionBuffer.renderLabels(names: descriptor.labelNames, values: values)
        return children.child(for: values) { Gauge(labelText: text) }
    }
}

/// One gauge time series, a double kept as its bit pattern in an atomic word so that
/// `set` is one store and `add` one compare-and-swap loop; never a lock.
public final class Gauge: Sendable {
    let labelText: String
    @usableFromInline let bits = Atomic<UInt64>(0)

    init(labelText: String) {
        self.labelText = labelText
    }

    @inlinable
    public func set(_ value: Double) {
        bits.store(value.bitPattern, ordering: .relaxed)
    }

    @inlinable
    public func add(_ delta: Double) {
        AtomicDouble.add(delta, to: bits)
    }

    @inlinable
    public func increment() { add(1) }

    @inlinable
    public func decrement() { add(-1) }

    public var value: Double { Double(bitPattern: bits.load(ordering: .relaxed)) }
}

/// Double arithmetic on an `Atomic<UInt64>` holding a bit pattern.
@usableFromInline
enum AtomicDouble {
    @inlinable
    static func add(_ delta: Double, to bits: borrowing Atomic<UInt64>) {
        var current = bits.load(ordering: .relaxed)
        while true {
            let desired = (Double(bitPattern: current) + delta).bitPattern
            let (exchanged, original) = bits.weakCompareExchange(
                expected: current, desired: desired, successOrdering: .relaxed, failureOrdering: .relaxed)
            if exchanged { return }
            current = original
        }
    }
}

extension GaugeFamily: RegisteredFamily {
    func write(into buffer: inout ExpositionBuffer) {
        buffer.appendHeader(name: descriptor.name, help: descriptor.help, kind: .gauge)
        for (_, child) in children.sorted() {
            buffer.appendSample(name: descriptor.name, labels: child.labelText, value: ExpositionBuffer.format(child.value))
        }
    }
}
