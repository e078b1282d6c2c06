@testable import Dispatcher
import Testing

/// `InFlightWindow` over synthetic throughput curves: the rate a limit gives, and the round
/// trips its answers see. Plain values, no sockets, no clock.
@Suite struct InFlightWindowTests {
    /// A sender whose rate is `limit ÷ roundTrip` until its CPU (or the server) allows no more
    /// than `cap` answers per second; beyond that knee the extra requests only queue, and the
    /// mean round trip grows as in flight ÷ rate (Little's law) while the least stays.
    struct Curve {
        var roundTripMilliseconds: Double
        var cap: Double
        /// Relative noise of each sample's rate, drawn from a fixed sequence.
        var noise = 0.0
        var knee: Int { Int(cap * roundTripMilliseconds / 1000) }

        func rate(_ limit: Int) -> Double { min(Double(limit) * 1000 / roundTripMilliseconds, cap) }
    }

    /// A small deterministic generator, so a noisy run is the same every time.
    struct Noise {
        var state: UInt64 = 0x9E37_79B9_7F4A_7C15
        mutating func next() -> Double {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Double(state >> 11) / Double(1 << 53) * 2 - 1
        }
    }

    /// Feeds `samples` quarter-second periods with work always waiting; returns every limit taken.
    private func run(_ window: inout InFlightWindow, _ curve: Curve, samples: Int, capacity: Int = .max,
                     noise: inout Noise) -> [Int] {
        var limits: [Int] = []
        for _ in 0..<samples {
            let limit = window.limit
            let rate = curve.rate(limit) * (1 + curve.noise * noise.next())
            let answers = Int(rate / 4)
            let mean = max(curve.roundTripMilliseconds, Double(limit) / curve.rate(limit) * 1000)
            let sample = InFlightWindow.Sample(answers: answers, nanoseconds: 250_000_000, waited: true,
                                               meanRoundTrip: UInt64(mean * 1_000_000),
                                               minimumRoundTrip: UInt64(curve.roundTripMilliseconds * 1_000_000),
                                               capacity: capacity, peakInFlight: limit)
            limits.append(window.sampled(sample).limit)
        }
        return limits
    }

    private func run(_ window: inout InFlightWindow, _ curve: Curve, samples: Int, capacity: Int = .max) -> [Int] {
        var noise = Noise()
        return run(&window, curve, samples: samples, capacity: capacity, noise: &noise)
    }

    @Test func aCPUBoundSenderSettlesNearTheSmallestLimitWithTheFullRate() {
        // 20,000/s at most, 10 ms round trip: 200 in flight give the full rate.
        let curve = Curve(roundTripMilliseconds: 10, cap: 20_000)
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 1000)
        let limits = run(&window, curve, samples: 400)
        let settled = limits.suffix(200)
        #expect(settled.min()! >= curve.knee * 3 / 4)
        // Kept no higher than a shrinking step (a quarter) above the headroom Little's law asks
        // for (2 × the pipe, the knee here); a probe goes a quarter above that.
        let kept = curve.knee * 2 * 4 / 3 + 1
        #expect(settled.sorted()[settled.count / 2] <= kept)
        #expect(settled.max()! <= kept * 5 / 4 + 1)
        // The rate at the limits it keeps is within a few % of the full rate most of the time.
        let full = settled.filter { curve.rate($0) >= curve.cap * 0.95 }.count
        #expect(full >= settled.count * 3 / 4)
    }

    @Test func aFlatCurveShrinksToTheFloor() {
        // The rate is the same at any limit (the CPU sets it even at the floor).
        let curve = Curve(roundTripMilliseconds: 0.1, cap: 20_000)
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 500)
        let limits = run(&window, curve, samples: 200)
        #expect(limits.last == 16)
    }

    @Test func aWindowBoundSenderAtALongRoundTripGrowsToTheCeiling() {
        // 150 ms away and nothing else in the way: the rate is in flight ÷ round trip.
        let curve = Curve(roundTripMilliseconds: 150, cap: 1_000_000)
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 100)
        let limits = run(&window, curve, samples: 40)
        // Doubling while the round trips show no queue: the ceiling within a dozen samples.
        #expect(limits.prefix(12).contains(2000))
        #expect(limits.suffix(20).allSatisfy { $0 >= 1500 })
    }

    @Test func aKneeFarAwayIsFoundFromBelow() {
        // 150 ms, 8,000/s at most: 1,200 in flight suffice, more only queue.
        let curve = Curve(roundTripMilliseconds: 150, cap: 8000)
        var window = InFlightWindow(floor: 16, ceiling: 4000, initial: 100)
        let limits = run(&window, curve, samples: 300)
        let settled = limits.suffix(150)
        #expect(settled.min()! >= curve.knee * 3 / 4)
        #expect(settled.max()! <= curve.knee * 2)
    }

    @Test func noiseOfAFewPercentNeitherCollapsesNorWandersToTheFloor() {
        let curve = Curve(roundTripMilliseconds: 10, cap: 20_000, noise: 0.04)
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 100)
        var noise = Noise()
        let limits = run(&window, curve, samples: 2000, noise: &noise)
        let settled = limits.suffix(1900)
        #expect(settled.min()! >= curve.knee / 2)
        #expect(settled.max()! <= curve.knee * 3)
        let full = settled.filter { curve.rate($0) >= curve.cap * 0.9 }.count
        #expect(full >= settled.count * 9 / 10)
    }

    @Test func theFloorAndTheCeilingHoldWhateverTheCurve() {
        for curve in [Curve(roundTripMilliseconds: 0.01, cap: 50_000), Curve(roundTripMilliseconds: 500, cap: 1e9),
                      Curve(roundTripMilliseconds: 20, cap: 30_000, noise: 0.2)] {
            var window = InFlightWindow(floor: 32, ceiling: 700, initial: 100)
            let limits = run(&window, curve, samples: 300)
            #expect(limits.allSatisfy { (32...700).contains($0) })
        }
        // An initial limit outside the bounds is brought inside them.
        #expect(InFlightWindow(floor: 32, ceiling: 700, initial: 5000).limit == 700)
        #expect(InFlightWindow(floor: 32, ceiling: 700, initial: 1).limit == 32)
    }

    @Test func withoutWorkWaitingTheLimitFollowsWhatWasUsed() {
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 1000)
        // A capped campaign keeps 50 in flight: the window never holds anything back.
        for _ in 0..<8 {
            _ = window.sampled(.init(answers: 1000, nanoseconds: 250_000_000, waited: false, meanRoundTrip: 10_000_000,
                                     minimumRoundTrip: 9_000_000, capacity: 1000, peakInFlight: 50))
        }
        #expect(window.limit == 100)
    }

    @Test func disturbedSamplesAreNotJudged() {
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 400)
        for _ in 0..<50 {
            _ = window.sampled(.init(answers: 0, nanoseconds: 250_000_000, waited: true, disturbed: true,
                                     meanRoundTrip: 0, minimumRoundTrip: 0, capacity: 1000, peakInFlight: 1))
        }
        #expect(window.limit == 400)
    }

    @Test func aLargerLimitWaitsForTheConnectionsItNeedsBeforeItIsJudged() {
        let curve = Curve(roundTripMilliseconds: 150, cap: 1_000_000)
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 400)
        // Two samples at 400 (the first measures, the second tries 800), one dropped as mixed.
        _ = run(&window, curve, samples: 3, capacity: 500)
        #expect(window.limit == 800)
        // The streams carry 500: 800 cannot show its rate until a connection opens. The rate
        // is still 400's, and the probe is not judged (not reverted) while it waits.
        var noise = Noise()
        for _ in 0..<3 {
            let sample = InFlightWindow.Sample(answers: Int(curve.rate(500) / 4), nanoseconds: 250_000_000, waited: true,
                                               meanRoundTrip: 150_000_000, minimumRoundTrip: 150_000_000,
                                               capacity: 500, peakInFlight: 500)
            _ = window.sampled(sample)
            _ = noise.next()
        }
        #expect(window.limit == 800)
        // The connection opened: 800 give twice 400's rate and stay.
        _ = run(&window, curve, samples: 1, capacity: 1000)
        #expect(window.limit >= 800)
    }

    @Test func onlySettlingAndLargeMovesAreNotable() {
        let curve = Curve(roundTripMilliseconds: 10, cap: 20_000)
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 1000)
        var notable = 0
        for _ in 0..<400 {
            let limit = window.limit
            let rate = curve.rate(limit)
            let decision = window.sampled(.init(answers: Int(rate / 4), nanoseconds: 250_000_000, waited: true,
                                                meanRoundTrip: UInt64(max(10, Double(limit) / rate * 1000) * 1_000_000),
                                                minimumRoundTrip: 10_000_000, capacity: .max, peakInFlight: limit))
            if decision.notable { notable += 1 }
        }
        // From 1,000 down to about 200: a move to half, then the first settling; not per probe.
        #expect(notable >= 1)
        #expect(notable <= 4)
    }
}

extension InFlightWindowTests {
    @Test func answersSecondsAwayOpenTheWindowByOnePerAnswerUntilALargerLimitFailed() {
        var window = InFlightWindow(floor: 16, ceiling: 2000, initial: 100)
        for _ in 0..<100 { window.answeredAfterLongRoundTrip() }
        #expect(window.limit == 200)
        for _ in 0..<5000 { window.answeredAfterLongRoundTrip() }
        #expect(window.limit == 2000)
        // A larger limit that brought no more answers stops it.
        let curve = Curve(roundTripMilliseconds: 10, cap: 20_000)
        var near = InFlightWindow(floor: 16, ceiling: 2000, initial: 300)
        _ = run(&near, curve, samples: 40)
        let settled = near.limit
        for _ in 0..<100 { near.answeredAfterLongRoundTrip() }
        #expect(near.limit == settled)
    }
}
