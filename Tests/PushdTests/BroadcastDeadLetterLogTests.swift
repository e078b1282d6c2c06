import Locking
import Testing
@testable import pushd

/// Dead-lettered broadcasts are logged one line per app and reason a minute, and the count of
/// those not logged one by one reaches the log.
@Suite struct BroadcastDeadLetterLogTests {
    final class Clock: Sendable {
        let now = Lock<Double>(0)
        func set(_ value: Double) { now.withLock { $0 = value } }
    }

    @Test func aGateFlushesTheUnloggedCountOnceItsMinuteHasPassed() {
        var gate = LogGate<String>(quietSeconds: 60)
        #expect(gate.admit("shop", now: 0) == 0)
        for second in 1...19 { #expect(gate.admit("shop", now: Double(second)) == nil) }
        #expect(gate.flush(now: 59).isEmpty)
        let flushed = gate.flush(now: 60)
        #expect(flushed.map(\.key) == ["shop"] && flushed.map(\.unlogged) == [19])
        #expect(gate.flush(now: 200).isEmpty, "nothing came since")
        #expect(gate.admit("shop", now: 100) == nil, "the flushed line counts as the minute's line")
        #expect(gate.admit("shop", now: 120) == 1)
    }

    @Test func twentyDeadLettersMakeOneLineThenOneWithTheCountPerAppAndReason() {
        let sink = MemoryLogSink()
        let clock = Clock()
        let log = BroadcastDeadLetterLog(logger: Logger(level: .info, sink: sink), clock: { clock.now.withLock { $0 } })
        for id in 1...20 {
            log.deadLettered(id: Int64(id), channel: "bm8tc3VjaC1jaGFubmVs", app: "shop", label: "ChannelNotRegistered",
                             reason: "ChannelNotRegistered: the channel does not exist")
        }
        log.deadLettered(id: 21, channel: "AAAAAQ==", app: "shop", label: "BadRequest", reason: "BadRequest")
        log.deadLettered(id: 22, channel: "AAAAAg==", app: "news", label: "ChannelNotRegistered", reason: "ChannelNotRegistered")
        clock.set(30)
        log.flush()
        #expect(sink.lines.count == 3, "\(sink.lines)")
        #expect(sink.lines.first?.contains("broadcast 1 to channel bm8tc3VjaC1jaGFubmVs of app shop dead-lettered: ChannelNotRegistered") == true)
        #expect(sink.lines.allSatisfy { $0.contains(#""event":"broadcast_dead_lettered""#) && $0.contains(#""unlogged":0"#) }, "\(sink.lines)")

        clock.set(61)
        log.flush()
        #expect(sink.lines.count == 4, "\(sink.lines)")
        let counted = sink.lines.last ?? ""
        #expect(counted.contains("19 more broadcast(s) of app shop dead-lettered (ChannelNotRegistered) since the last such line"), "\(counted)")
        #expect(counted.contains(#""unlogged":19"#) && counted.contains(#""reason":"ChannelNotRegistered""#), "\(counted)")

        // The next one after a quiet minute carries nothing more: the count was logged.
        clock.set(200)
        log.deadLettered(id: 23, channel: "bm8tc3VjaC1jaGFubmVs", app: "shop", label: "ChannelNotRegistered", reason: "ChannelNotRegistered")
        #expect(sink.lines.count == 5 && sink.lines.last?.contains(#""unlogged":0"#) == true, "\(sink.lines)")
    }
}
