import Locking
import Posix
import QueueStore

/// What is said while the database refuses writes (read-only, SQLSTATE 25006, as during a
/// failover) and every pass of a worker fails: per kind of worker of this process, one line
/// when it begins, one a minute while it lasts with the failed passes since the last line, and
/// one when passes have gone through again for a second. A warning per failed pass of each worker, repeated for
/// as long as the failover lasted, said nothing more.
///
/// Thread rule: the workers report here from their threads; state changes under the lock, and
/// lines are written after it is released.
final class RefusedWritesLog: Sendable {
    private struct Spell {
        var since: Double
        var lastLine: Double
        var failures: Int
        var unlogged: Int
        /// The first pass that went through since the last refusal, while the spell is not
        /// told over yet (`clearSecondsBeforeEnd`).
        var clearSince: Double?
    }

    /// A spell is over once passes have gone through for this long with no refusal among
    /// them. A server turned read-only does not refuse every session at the same instant (a
    /// transaction begun before keeps writing; each session reads the new setting before its
    /// next statement), so one pass going through between two refused ones ended the spell
    /// and the next refusal began it again: two pairs of lines for one spell.
    static let clearSecondsBeforeEnd = 1.0

    private let spells = Lock<[String: Spell]>([:])
    private let logger: Logger
    private let quietSeconds: Double
    private let clock: @Sendable () -> Double

    init(logger: Logger, quietSeconds: Double = 60, clock: @escaping @Sendable () -> Double = RateLimiter.monotonicSeconds) {
        self.logger = logger
        self.quietSeconds = quietSeconds
        self.clock = clock
    }

    /// Whether `error` is the database refusing writes.
    static func refusesWrites(_ error: any Error) -> Bool {
        (error as? PGError)?.code == .readOnlySQLTransaction
    }

    /// A pass of `who` ("transactional workers") failed with `error`; `meanwhile` says what that
    /// stops. False when `error` is not a refused write: the caller logs it as before.
    func failed(_ who: String, meanwhile: String, error: any Error) -> Bool {
        guard Self.refusesWrites(error) else { return false }
        let now = clock()
        let line: (began: Bool, seconds: Int, failed: Int)? = spells.withLock { spells in
            guard var spell = spells[who] else {
                spells[who] = Spell(since: now, lastLine: now, failures: 1, unlogged: 0)
                return (true, 0, 1)
            }
            spell.failures += 1
            spell.clearSince = nil
            defer { spells[who] = spell }
            guard now - spell.lastLine >= quietSeconds else {
                spell.unlogged += 1
                return nil
            }
            let failed = spell.unlogged + 1
            spell.lastLine = now
            spell.unlogged = 0
            return (false, Int(now - spell.since), failed)
        }
        guard let line else { return true }
        if line.began {
            logger.warning("\(who): the database refuses writes (read-only, SQLSTATE 25006, as during a failover): \(meanwhile); tried again with a growing pause, told once a minute while it lasts and once when writes are taken again: \(error)",
                           ("event", "database_refuses_writes"), ("who", .string(who)))
        } else {
            logger.warning("\(who): the database still refuses writes, for \(line.seconds) s now (read-only, SQLSTATE 25006): \(meanwhile); \(line.failed) failed pass(es) since the last such line",
                           ("event", "database_refuses_writes"), ("who", .string(who)), ("seconds", .int(Int64(line.seconds))),
                           ("failed_passes", .int(Int64(line.failed))))
        }
        return true
    }

    /// A pass of `who` that began at `started` (the clock's seconds) went through: the end of a
    /// spell of refused writes is told, once, by the pass that finds passes have gone through
    /// for `clearSecondsBeforeEnd` with no refusal since. A pass begun before the spell's first
    /// failure says nothing of it: another worker's, ending just after, ended the spell it had
    /// just begun, and the next failure began it again. Returns whether a spell of `who` is
    /// still open: a worker that passes only while one is (the lease keeper, holding nothing)
    /// goes on until it is told over.
    @discardableResult
    func passed(_ who: String, started: Double) -> Bool {
        let now = clock()
        var open = false
        let ended = spells.withLock { spells -> (Spell, Double)? in
            guard var spell = spells[who] else { return nil }
            open = true
            guard started > spell.since else { return nil }
            guard let clear = spell.clearSince else {
                spell.clearSince = now
                spells[who] = spell
                return nil
            }
            guard now - clear >= Self.clearSecondsBeforeEnd else { return nil }
            spells.removeValue(forKey: who)
            open = false
            return (spell, clear)
        }
        guard let (spell, clear) = ended else { return open }
        let seconds = Int(clear - spell.since)
        logger.notice("\(who): the database takes writes again after refusing them for \(seconds) s; \(spell.failures) pass(es) failed meanwhile",
                      ("event", "database_takes_writes"), ("who", .string(who)), ("seconds", .int(Int64(seconds))),
                      ("failed_passes", .int(Int64(spell.failures))))
        return false
    }
}
