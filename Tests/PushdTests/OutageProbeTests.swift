import APNs
import Testing
@testable import pushd

/// When a down lane gets a probe: never while it is up, then about every interval, spread at
/// random, once per interval however many workers look.
@Suite struct OutageProbeTests {
    /// Always the same draw: `Double.random(in:using:)` of it is the middle of the range.
    struct MiddleRandom: RandomNumberGenerator {
        mutating func next() -> UInt64 { 1 << 63 }
    }

    @Test func aLaneThatIsUpIsNeverProbed() {
        var probe = OutageProbe(interval: 5)
        var random = SystemRandom()
        for step in 0..<100 {
            #expect(probe.appsToProbe(lane: "transactional", appsDown: [String](), now: Double(step), random: &random).isEmpty)
        }
        #expect(probe.nextProbe(lane: "transactional") == nil)
    }

    @Test func aDownLaneIsProbedOncePerIntervalFromTheFirstLook() {
        var probe = OutageProbe(interval: 5)
        var random = MiddleRandom()
        var probedAt: [Double] = []
        // Workers look every 100 ms for 30 s.
        for tenth in 0...300 {
            let now = 1000 + Double(tenth) / 10
            let apps = probe.appsToProbe(lane: "channels", appsDown: ["news", "shop"], now: now, random: &random)
            if !apps.isEmpty {
                #expect(apps == ["news", "shop"])
                probedAt.append(now)
            }
        }
        #expect(probedAt == [1005, 1010, 1015, 1020, 1025, 1030])
    }

    /// Once APNs answered a probe, the next comes within a second, not an interval: the
    /// outage ends with a second answer a second after the first, and while the lane is down
    /// the probe is the only send there may be.
    @Test func aLaneAnsweringAgainIsProbedAgainWithinASecond() {
        var probe = OutageProbe(interval: 5)
        var random = MiddleRandom()
        var probedAt: [Double] = []
        for tenth in 0...200 {
            let now = 1000 + Double(tenth) / 10
            // APNs answered the probe at 1005 (the log says so from then on).
            let answering = now > 1005
            if !probe.appsToProbe(lane: "campaign", appsDown: ["shop"], answering: answering, again: 1, now: now, random: &random).isEmpty {
                probedAt.append(now)
            }
        }
        #expect(probedAt == [1005, 1006.1, 1007.1, 1008.1, 1009.1, 1010.1, 1011.1, 1012.1, 1013.1, 1014.1, 1015.1, 1016.1, 1017.1,
                             1018.1, 1019.1], "\(probedAt)")
    }

    @Test func waitsAreSpreadWithinAQuarterOfTheInterval() {
        var probe = OutageProbe(interval: 4)
        var random = SystemRandom()
        _ = probe.appsToProbe(lane: "campaign", appsDown: ["shop"], now: 0, random: &random)
        var waits = Set<Double>()
        var now = 0.0
        for _ in 0..<200 {
            let due = try! #require(probe.nextProbe(lane: "campaign"))
            #expect(due - now >= 3 && due - now <= 5, "\(due - now)")
            waits.insert(due - now)
            #expect(probe.appsToProbe(lane: "campaign", appsDown: ["shop"], now: due - 0.001, random: &random).isEmpty)
            #expect(probe.appsToProbe(lane: "campaign", appsDown: ["shop"], now: due, random: &random) == ["shop"])
            now = due
        }
        #expect(waits.count > 150, "the waits are not spread: \(waits.count) distinct")
    }

    @Test func lanesAreScheduledApartAndALaneBackIsForgotten() {
        var probe = OutageProbe(interval: 5)
        var random = MiddleRandom()
        #expect(probe.appsToProbe(lane: "transactional", appsDown: ["shop"], now: 0, random: &random).isEmpty)
        #expect(probe.appsToProbe(lane: "broadcast", appsDown: ["shop"], now: 3, random: &random).isEmpty)
        #expect(probe.appsToProbe(lane: "transactional", appsDown: ["shop"], now: 5, random: &random) == ["shop"])
        #expect(probe.appsToProbe(lane: "broadcast", appsDown: ["shop"], now: 5, random: &random).isEmpty)
        #expect(probe.appsToProbe(lane: "broadcast", appsDown: ["shop"], now: 8, random: &random) == ["shop"])
        // Back, then down again: the next outage's first probe is an interval after it is seen.
        #expect(probe.appsToProbe(lane: "transactional", appsDown: [String](), now: 9, random: &random).isEmpty)
        #expect(probe.nextProbe(lane: "transactional") == nil)
        #expect(probe.appsToProbe(lane: "transactional", appsDown: ["shop"], now: 60, random: &random).isEmpty)
        #expect(probe.appsToProbe(lane: "transactional", appsDown: ["shop"], now: 64.9, random: &random).isEmpty)
        #expect(probe.appsToProbe(lane: "transactional", appsDown: ["shop"], now: 65, random: &random) == ["shop"])
    }
}
