import Locking
import QueueStore
import Testing
@testable import pushd

/// A spell of refused writes, as the workers meet it pass after pass: one line when it
/// begins, one a minute while it lasts counting the failed passes, one when a pass goes
/// through; any other error is left to the caller.
@Suite struct RefusedWritesLogTests {
    static let readOnly = PGError(code: .readOnlySQLTransaction, message: "cannot execute UPDATE in a read-only transaction")

    @Test func aSpellIsToldWhenItBeginsOnceAMinuteAndWhenItEnds() {
        let now = Lock(100.0)
        let sink = MemoryLogSink()
        let log = RefusedWritesLog(logger: Logger(level: .info, sink: sink), clock: { now.withLock { $0 } })
        let meanwhile = "no job is claimed"
        #expect(!log.failed("transactional workers", meanwhile: meanwhile, error: PGError(code: .lockNotAvailable, message: "lock")))
        #expect(sink.lines.isEmpty)
        for _ in 0..<20 {
            #expect(log.failed("transactional workers", meanwhile: meanwhile, error: Self.readOnly))
            now.withLock { $0 += 1 }
        }
        #expect(sink.lines.count == 1, "\(sink.lines)")
        #expect(sink.lines.first?.contains("transactional workers: the database refuses writes") == true, "\(sink.lines)")
        now.withLock { $0 += 60 }
        #expect(log.failed("transactional workers", meanwhile: meanwhile, error: Self.readOnly))
        #expect(sink.lines.count == 2 && sink.lines[1].contains("20 failed pass(es) since the last such line"), "\(sink.lines)")
        // A pass begun before the spell ends nothing.
        log.passed("transactional workers", started: 99)
        #expect(sink.lines.count == 2)
        log.passed("transactional workers", started: now.withLock { $0 })
        log.passed("transactional workers", started: now.withLock { $0 })
        // Passes go through, but not yet for a second.
        #expect(sink.lines.count == 2, "\(sink.lines)")
        now.withLock { $0 += 1 }
        log.passed("transactional workers", started: now.withLock { $0 })
        log.passed("transactional workers", started: now.withLock { $0 })
        #expect(sink.lines.count == 3 && sink.lines[2].contains("database_takes_writes") && sink.lines[2].contains("21 pass(es) failed"),
                "\(sink.lines)")
    }

    /// A server turned read-only refuses one worker's session before another's (a transaction
    /// begun before keeps writing): a pass going through between two refused ones is not the
    /// end of the spell, which is told once when it begins and once when it ends.
    @Test func aPassGoingThroughBetweenTwoRefusedOnesDoesNotEndTheSpell() {
        let now = Lock(100.0)
        let sink = MemoryLogSink()
        let log = RefusedWritesLog(logger: Logger(level: .info, sink: sink), clock: { now.withLock { $0 } })
        let who = "campaign workers"
        #expect(log.failed(who, meanwhile: "no chunk is leased", error: Self.readOnly))
        now.withLock { $0 += 0.2 }
        log.passed(who, started: 100.1)
        now.withLock { $0 += 0.01 }
        #expect(log.failed(who, meanwhile: "no chunk is leased", error: Self.readOnly))
        for _ in 0..<8 {
            now.withLock { $0 += 1 }
            #expect(log.failed(who, meanwhile: "no chunk is leased", error: Self.readOnly))
        }
        for _ in 0..<3 {
            now.withLock { $0 += 0.6 }
            log.passed(who, started: now.withLock { $0 } - 0.1)
        }
        let begun = sink.lines.filter { $0.contains("database_refuses_writes") }
        let ended = sink.lines.filter { $0.contains("database_takes_writes") }
        #expect(begun.count == 1 && ended.count == 1, "\(sink.lines)")
        #expect(ended.first?.contains("after refusing them for 8 s; 10 pass(es) failed meanwhile") == true, "\(ended)")
    }
}
