/// A waiting row that pushd could not write again because a CHECK constraint of its table
/// refused it: typically one an operator or a migration added NOT VALID after the row was
/// queued, which PostgreSQL leaves unchecked on the rows already there only until they are
/// written again. It went to `pushd.dead_jobs` with `reason`, so that the statement writing
/// many rows at once (making waiting work due, putting a held topic's jobs back, a broadcast
/// claim) could go on without it instead of failing as a whole on every turn.
public struct RefusedRewrite: Sendable, Hashable {
    /// `pushd.jobs` or `pushd.broadcast_jobs`.
    public var table: String
    public var id: Int64
    public var app: String
    /// The constraint's name, when the server gave one.
    public var check: String?
    /// What the check said.
    public var message: String
    /// The dead letter's reason.
    public var reason: String

    public init(table: String, id: Int64, app: String, check: String?, message: String, reason: String) {
        self.table = table
        self.id = id
        self.app = app
        self.check = check
        self.message = message
        self.reason = reason
    }

    /// What follows "could not be <what pushd was doing>" in a dead letter's reason.
    static func refusal(_ error: PGError) -> String {
        "\(error.constraint.map { "CHECK \($0), added after the job was queued, " } ?? "")refuses it: \(error.message)"
    }
}

extension JobQueue {
    /// Moves job `id`, which `error` (a CHECK) refused to write while pushd was `doing` it
    /// ("made due again"; followed by its last error when `withError`), to `pushd.dead_jobs`
    /// (status NULL, attempts as they were: it was not sent). Returns what happened, or nil
    /// when the job is gone or in another claimer's open batch.
    static func deadLetterRefused(_ connection: PGConnection, id: Int64, doing: String, withError: Bool,
                                  error: PGError) throws -> RefusedRewrite? {
        let result = try connection.query(connection.prepared("""
            WITH gone AS (
                DELETE FROM pushd.jobs WHERE id = (SELECT id FROM pushd.jobs WHERE id = $1 FOR UPDATE SKIP LOCKED)
                RETURNING \(columns))
            INSERT INTO pushd.dead_jobs (\(columns), status, reason)
            SELECT \(columns), NULL, 'could not be ' || $2::text
                   || CASE WHEN $4::boolean THEN ' (' || coalesce(last_error, 'no error') || ')' ELSE '' END || ': ' || $3::text
            FROM gone
            RETURNING app, reason
            """), [id, doing, RefusedRewrite.refusal(error), withError])
        guard result.rowCount == 1 else { return nil }
        return RefusedRewrite(table: "pushd.jobs", id: id, app: try result.require(String.self, row: 0, column: 0),
                              check: error.constraint, message: error.message,
                              reason: try result.require(String.self, row: 0, column: 1))
    }

    /// Runs `update`, a statement writing waiting jobs (an UPDATE of `pushd.jobs` without
    /// RETURNING), and returns how many it wrote; a job a CHECK refuses goes to dead letters
    /// (`rowsUpdated(by:orOneByOne:)`, `deadLetterRefused`) and is added to `refused`. The
    /// second count is of the jobs written and dead-lettered, for a caller working in batches.
    static func rewrite(_ connection: PGConnection, _ update: String, _ parameters: [any PGParameter],
                        candidates: String, _ candidateParameters: [any PGParameter]? = nil, row: String, _ rowParameters: [any PGParameter],
                        doing: String, withError: Bool, refused: inout [RefusedRewrite]) throws -> (written: Int, handled: Int) {
        var found = [RefusedRewrite]()
        let result = try connection.rowsUpdated(by: update, parameters, orOneByOne: candidates, candidateParameters, row: row, rowParameters) { id, error in
            guard let item = try deadLetterRefused(connection, id: id, doing: doing, withError: withError, error: error) else { return false }
            found.append(item)
            return true
        }
        refused += found
        return (result.changed, result.changed + result.settled)
    }
}
