import Synchronization

/// A family of counters sharing a name, help text and label names.
/// Bind label values once with `labels(...)` and keep the returned `Counter`.
public final class CounterFamily: Sendable {
    let descriptor: MetricDescriptor
    private let children = ChildTable<Counter>()

    init(descriptor: MetricDescriptor) {
        self.descriptor = descriptor
        if descriptor.labelNames.isEmpty {
            // A family without labels shows its zero from the first scrape on.
            _ = children.child(for: []) { Counter(labelText: "") }
        }
    }

    public var name: String { descriptor.name }
    public var labelNames: [String] { descriptor.labelNames }

    /// The counter for these label values, in the order of `labelNames`.
    public func labels(_ values: String...) throws(MetricError) -> Counter {
        try labels(values)
    }

    public func labels(_ values: [String]) throws(MetricError) -> Counter {
        let text = try descriptor.renderLabels(values)
        return children.child(for: values) { Counter(labelText: text) }
    }

    /// Binds values whose count is right by construction (the catalog's own calls).
    func bound(_ values: [String]) -> Counter {
        let text = ExpositionBuffer.renderLabels(names: descriptor.labelNames, values: values)
        return children.child(for: values) { Counter(labelText: text) }
    }
}

/// One counter time series. Updates are a single relaxed atomic add: no lock, no
/// allocation, no formatting.
public final class Counter: Sendable {
    let labelText: String
    @usableFromInline let storage = Atomic<UInt64>(0)

    init(labelText: String) {
        self.labelText = labelText
    }

    @inlinable
    public func increment(by amount: UInt64 = 1) {
        storage.wrappingAdd(amount, ordering: .relaxed)
    }

    public var value: UInt64 { storage.load(ordering: .relaxed) }
}

extension CounterFamily: RegisteredFamily {
    func write(into buffer: inout ExpositionBuffer) {
        buffer.appendHeader(name: descriptor.name, help: descriptor.help, kind: .counter)
        for (_, child) in children.sorted() {
            buffer.appendSample(name: descriptor.name, labels: child.labelText, value: String(child.value))
        }
    }
}
