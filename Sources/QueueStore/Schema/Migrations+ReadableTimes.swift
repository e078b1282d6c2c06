extension Migrator {
    /// A timestamp PostgreSQL takes and pushd cannot read (`infinity`, `-infinity`, a year
    /// before 1 or after 9999) made every claim that took its row fail, and roll back, on every
    /// turn: one job with `expiration = 'infinity'` (a way to say "never expires") stopped the
    /// transactional lane of every app behind it. APNs takes `apns-expiration` in epoch seconds,
    /// and a job scheduled after 9999 is a mistake, so the columns an application writes are
    /// refused at insert, naming the column and its value. NOT VALID: rows already queued are
    /// dead-lettered by the claim that takes them (`JobQueue.claim`).
    static let readableTimesV31 = #"""
    CREATE FUNCTION pushd.check_time_readable(value timestamptz, label text, constraint_name text) RETURNS boolean
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF value IS NULL OR (value >= timestamptz '0001-01-01 00:00:00+00' AND value < timestamptz '10000-01-01 00:00:00+00') THEN
            RETURN true;
        END IF;
        RETURN pushd.fail_check(label, constraint_name, format(
            'must be a time from the year 1 to the year 9999 (APNs takes epoch seconds), got %s', value));
    END $$;

    ALTER TABLE pushd.jobs
        \#(readable("jobs", "expiration", nullable: true)),
        \#(readable("jobs", "run_at", nullable: false)),
        \#(readable("jobs", "created_at", nullable: false));
    ALTER TABLE pushd.broadcast_jobs
        \#(readable("broadcast_jobs", "expiration", nullable: true)),
        \#(readable("broadcast_jobs", "run_at", nullable: false));
    ALTER TABLE pushd.campaigns
        \#(readable("campaigns", "expiration", nullable: true)),
        \#(readable("campaigns", "start_at", nullable: true));
    """#

    /// `ADD CONSTRAINT <table>_<column>_readable`: the inline range test, then the function that
    /// names the column when it fails.
    private static func readable(_ table: String, _ column: String, nullable: Bool) -> String {
        let range = "(\(column) >= timestamptz '0001-01-01 00:00:00+00' AND \(column) < timestamptz '10000-01-01 00:00:00+00')"
        let name = "\(table)_\(column)_readable"
        return "ADD CONSTRAINT \(name) CHECK (\(nullable ? "\(column) IS NULL OR " : "")\(range)\n"
            + "            OR pushd.check_time_readable(\(column), 'pushd.\(table).\(column)', '\(name)')) NOT VALID"
    }
}
