/// Numbers in [0, 1) for the policy's jitter, as a plain value so that `ConnectionPolicy` stays
/// Equatable and deterministic: the loop seeds it once from the system's generator, and tests
/// pass a seed or one fixed number.
struct UnitRandom: Equatable {
    private var state: UInt64
    private let fixed: Double?

    /// A SplitMix64 sequence from `seed`.
    init(seed: UInt64) {
        state = seed
        fixed = nil
    }

    private init(fixed value: Double) {
        state = 0
        fixed = min(max(value, 0), 1)
    }

    /// Always `value` (clamped to [0, 1]).
    static func fixed(_ value: Double) -> UnitRandom { UnitRandom(fixed: value) }

    mutating func next() -> Double {
        if let fixed { return fixed }
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        z ^= z >> 31
        // The top 53 bits, as Double's own random numbers do.
        return Double(z >> 11) * 0x1p-53
    }
}
