import Locking
import Posix
import QueueStore

/// What is said while the database refuses writes (read-only, SQLSTATE 25006, as during a
/// failover) and every pass of a worker fails: per kind of worker of this process, one line
/// when it begins, one a minute while it lasts with the failed passes since the last line, and
/// one when a pass goes through again. A warning per failed pass of each worker, repeated for
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
    }

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
    /// spell of refused writes is told, once. A pass begun before the spell's first failure
    /// says nothing of it: another worker's, ending just after, ended the spell it had just
    /// begun, and the next failure began it again.
    func passed(_ who: String, started: Double) {
        let now = clock()
        guard let spell = spells.withLock({ spells -> Spell? in
            guard let spell = spells[who], started > spell.since else { return nil }
            spells.removeValue(forKey: who)
            return spell
        }) else { return }
        let seconds = Int(now - spell.since)
        logger.notice("\(who): the database takes writes again after refusing them for \(seconds) s; \(spell.failures) pass(es) failed meanwhile",
                      ("event", "database_takes_writes"), ("who", .string(who)), ("seconds", .int(Int64(seconds))),
                      ("failed_passes", .int(Int64(spell.failures))))
    }
}
