import Posix
import Glibc
import QueueStore

/// `pushd status`: the fleet, the queue, campaigns, dead letters and paused apps, read
/// from the database, so it works from any machine that reaches PostgreSQL. Exit code 0
/// when healthy, 1 when degraded (or the database cannot be read): see `FleetReport`.
/// `--watch` shows it again every `--interval` seconds until interrupted; with `--json`
/// each sample is one JSON document on one line.
enum StatusCommand {
    static let applicationName = "pushd-status"

    static func run(_ parsed: ParsedCommand, _ context: CommandContext) throws -> Int32 {
        let interval = try CommandValue.integer(parsed, "interval", in: 1...3600) ?? 2
        let json = parsed.has("json")
        let connection = try context.connect(parsed, config: try context.configIfGiven(parsed), applicationName: applicationName)
        defer { connection.close() }
        let terminal = isatty(STDOUT_FILENO) == 1
        while true {
            let report = FleetReport(try readSnapshot(connection))
            let now = Timestamp()
            if json {
                context.output(try report.json(now: now, pretty: !parsed.has("watch")))
            } else {
                // On a terminal each sample replaces the last: clear the screen, home the cursor.
                if parsed.has("watch") && terminal { StandardStreams.writeOutput("\u{1B}[2J\u{1B}[H") }
                for line in report.lines(now: now) { context.output(line) }
                if parsed.has("watch") && !terminal { context.output("") }
            }
            guard parsed.has("watch") else { return report.exitCode }
            // A pipe is block-buffered: a reader (jq, a script) must see each sample now.
            fflush(nil)
            sleep(UInt32(interval))
        }
    }

    static func readSnapshot(_ connection: PGConnection) throws -> FleetSnapshot {
        do {
            return try FleetSnapshot.read(connection)
        } catch let error as PGError where error.code == .undefinedTable {
            throw CommandContext.Failure("the database has no pushd schema, or one older than this pushd (\(error.message)): run `pushd migrate`")
        } catch let error as PGError where error.code == .lockNotAvailable {
            // The claims of the daemons wait on the same lock: say so, and who holds it.
            throw CommandContext.Failure("a pushd table is locked by another session (waited lock_timeout, SQLSTATE 55P03): "
                                         + "the lanes that need it send nothing until it is released (pushd_lane_stuck, /readyz); "
                                         + "held by \(TableLocks.holders(connection) ?? "a session pg_locks and pg_stat_activity name")")
        }
    }
}
