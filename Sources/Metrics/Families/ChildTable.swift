import Locking

/// The children of one family, keyed by their label values. Binding a child takes the
/// lock; updating a bound child never does, which is why callers bind once and keep it.
final class ChildTable<Child: AnyObject & Sendable>: Sendable {
    private let children = Lock<[[String]: Child]>([:])

    func child(for values: [String], make: () -> Child) -> Child {
        children.withLock { table in
            if let existing = table[values] { return existing }
            let created = make()
            table[values] = created
            return created
        }
    }

    /// The children in a stable order (by label values), so that two scrapes of the same
    /// state are byte for byte equal.
    func sorted() -> [(values: [String], child: Child)] {
        let entries = children.withLock { table in table.map { (values: $0.key, child: $0.value) } }
        return entries.sorted { $0.values.lexicographicallyPrecedes($1.values) }
    }
}

extension MetricDescriptor {
    /// Checks a bind call and renders its label text, once per child.
    func renderLabels(_ values: [String]) throws(MetricError) -> String {
        guard values.count == labelNames.count else {
            throw .labelCountMismatch(metric: name, expected: labelNames, got: values)
        }
        return ExpositionBuffer.renderLabels(names: labelNames, values: values)
    }
}
