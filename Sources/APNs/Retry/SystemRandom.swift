/// The system's random numbers (`SystemRandomNumberGenerator`) for retry jitter, in a
/// generator that has storage.
///
/// Why not `SystemRandomNumberGenerator` itself: it is an empty struct, and the address of
/// an empty value handed `inout` into generic code (`RetryPolicy.decide(…random:)`) is
/// unspecified. Code built with `--sanitize=thread` reports that access to the sanitizer,
/// which then reads through the unspecified address and crashes the process (a toolchain
/// bug: swiftlang/swift#66099). One stored byte gives the value a real address.
public struct SystemRandom: RandomNumberGenerator, Sendable {
    private var system = SystemRandomNumberGenerator()
    private var storage: UInt8 = 0

    public init() {}

    public mutating func next() -> UInt64 { system.next() }
}
