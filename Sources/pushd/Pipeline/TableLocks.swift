import QueueStore

/// Who holds the locks that stop pushd's lanes, from `pg_locks`.
enum TableLocks {
    /// The sessions holding a table lock on a pushd table that stops the daemons' claims (the
    /// status read itself waits only for ACCESS EXCLUSIVE), for the message of a status that
    /// waited one out and the `lane_stuck` line; nil when none is found or the query fails.
    static func holders(_ connection: PGConnection) -> String? {
        let sql = """
            SELECT l.pid, coalesce(a.application_name, ''), n.nspname || '.' || c.relname, l.mode,
                   coalesce(extract(epoch FROM now() - a.xact_start), 0)::float8
            FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
            JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE l.granted AND n.nspname = 'pushd' AND l.mode IN ('AccessExclusiveLock', 'ExclusiveLock', 'ShareRowExclusiveLock', 'ShareLock')
            ORDER BY l.pid
            """
        guard let rows = try? connection.query(sql).rows, !rows.isEmpty else { return nil }
        return rows.compactMap { row -> String? in
            guard let pid: Int32 = try? row.require(0), let name: String = try? row.require(1), let table: String = try? row.require(2),
                  let mode: String = try? row.require(3), let seconds: Double = try? row.require(4) else { return nil }
            return "pid \(pid)\(name.isEmpty ? "" : " (\(name))"), \(mode) on \(table), in a transaction open for \(Int(seconds)) s"
        }.joined(separator: ", ")
    }
}
