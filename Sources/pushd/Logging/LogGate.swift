/// When to write a line about an event that repeats (one per notification, per answer): the
/// first of a key at once, then the first after `quietSeconds` without a line for that key,
/// carrying how many came unlogged since the last line. `flush` hands over the counts whose
/// quiet time has passed with nothing after them, so that no count is left out of the log.
/// A pure value with the clock passed in; its owner keeps it under a lock.
struct LogGate<Key: Hashable & Sendable>: Sendable {
    var quietSeconds: Double = 60
    private var lastLoggedAt: [Key: Double] = [:]
    private var unlogged: [Key: Int] = [:]

    init(quietSeconds: Double = 60) { self.quietSeconds = quietSeconds }

    /// Nil when this one stays silent; else how many came unlogged before it.
    mutating func admit(_ key: Key, now: Double) -> Int? {
        if let last = lastLoggedAt[key], now - last < quietSeconds {
            unlogged[key, default: 0] += 1
            return nil
        }
        lastLoggedAt[key] = now
        return unlogged.removeValue(forKey: key) ?? 0
    }

    /// The keys whose last line is `quietSeconds` old with events unlogged since, and how many:
    /// the caller writes a line for each now (which counts as that key's line).
    mutating func flush(now: Double) -> [(key: Key, unlogged: Int)] {
        guard !unlogged.isEmpty else { return [] }
        let due = unlogged.filter { now - (lastLoggedAt[$0.key] ?? -.infinity) >= quietSeconds }
        for key in due.keys {
            unlogged.removeValue(forKey: key)
            lastLoggedAt[key] = now
        }
        return due.map { (key: $0.key, unlogged: $0.value) }
    }
}
