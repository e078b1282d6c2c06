import Locking

/// What the registry needs from every family: its identity and how to write itself.
protocol RegisteredFamily: AnyObject, Sendable {
    var descriptor: MetricDescriptor { get }
    func write(into buffer: inout ExpositionBuffer)
}

/// Holds every metric family of a process and renders them in the Prometheus text
/// format 0.0.4. Registering a name that is taken returns the existing family when it
/// agrees on type, label names and buckets, and throws otherwise.
public final class MetricRegistry: Sendable {
    private let families = Lock<[String: any RegisteredFamily]>([:])

    public init() {}

    public func counter(_ name: String, help: String, unit: String? = nil, labels: [String] = []) throws(MetricError) -> CounterFamily {
        let descriptor = try MetricDescriptor(name: name, help: help, unit: unit, kind: .counter, labelNames: labels)
        return try register(descriptor) { CounterFamily(descriptor: descriptor) }
    }

    public func gauge(_ name: String, help: String, unit: String? = nil, labels: [String] = []) throws(MetricError) -> GaugeFamily {
        let descriptor = try MetricDescriptor(name: name, help: help, unit: unit, kind: .gauge, labelNames: labels)
        return try register(descriptor) { GaugeFamily(descriptor: descriptor) }
    }

    public func histogram(_ name: String, help: String, unit: String? = nil, labels: [String] = [],
                          buckets: [Double] = HistogramBuckets.apnsLatency) throws(MetricError) -> HistogramFamily {
        let bounds = try HistogramBuckets.validated(buckets, metric: name)
        let descriptor = try MetricDescriptor(name: name, help: help, unit: unit, kind: .histogram, labelNames: labels, buckets: bounds)
        return try register(descriptor) { HistogramFamily(descriptor: descriptor) }
    }

    /// A gauge computed at scrape time; give it a source with `setSource`.
    public func callbackGauge(_ name: String, help: String, unit: String? = nil, labels: [String] = []) throws(MetricError) -> CallbackFamily {
        let descriptor = try MetricDescriptor(name: name, help: help, unit: unit, kind: .gauge, labelNames: labels)
        return try register(descriptor) { CallbackFamily(descriptor: descriptor) }
    }

    /// A counter computed at scrape time (for totals kept by something else, like the
    /// kernel's CPU time); give it a source with `setSource`.
    public func callbackCounter(_ name: String, help: String, unit: String? = nil, labels: [String] = []) throws(MetricError) -> CallbackFamily {
        let descriptor = try MetricDescriptor(name: name, help: help, unit: unit, kind: .counter, labelNames: labels)
        return try register(descriptor) { CallbackFamily(descriptor: descriptor) }
    }

    /// Names of all registered families, sorted.
    public var names: [String] {
        families.withLock { Array($0.keys) }.sorted()
    }

    /// The whole registry in the text format, families sorted by name and series by
    /// label values, so equal states give equal bytes.
    public func exposition() -> [UInt8] {
        let snapshot = families.withLock { table in Array(table.values) }
        var buffer = ExpositionBuffer()
        for family in snapshot.sorted(by: { $0.descriptor.name < $1.descriptor.name }) {
            family.write(into: &buffer)
        }
        return buffer.bytes
    }

    public func expositionText() -> String {
        String(decoding: exposition(), as: UTF8.self)
    }

    private func register<Family: RegisteredFamily>(_ descriptor: MetricDescriptor,
                                                    make: () -> Family) throws(MetricError) -> Family {
        try families.withLock { (table) throws(MetricError) -> Family in
            if let existing = table[descriptor.name] {
                guard existing.descriptor.isCompatible(with: descriptor), let same = existing as? Family else {
                    throw .conflictingRegistration(metric: descriptor.name,
                                                   existing: Self.summary(of: existing),
                                                   requested: Self.summary(of: descriptor, computed: Family.self == CallbackFamily.self))
                }
                return same
            }
            let created = make()
            table[descriptor.name] = created
            return created
        }
    }

    private static func summary(of family: any RegisteredFamily) -> String {
        summary(of: family.descriptor, computed: family is CallbackFamily)
    }

    private static func summary(of descriptor: MetricDescriptor, computed: Bool) -> String {
        computed ? descriptor.summary + " computed at scrape time" : descriptor.summary
    }
}
