import Posix

/// A campaign whose row a CHECK of `pushd.campaigns` refuses to write: typically one a migration
/// added NOT VALID after the campaign was created, which PostgreSQL leaves unchecked on a stored
/// row only until that row is written again. Its progress, pause and cancel cannot be written,
/// so the campaign is held in `pushd.campaign_refusals` (schema version 30): nothing more of it
/// is leased or sent, and what its chunks record meanwhile is counted there. Correcting the
/// column the check names ends the hold, its counts added to the row; so does deleting it.
public struct CampaignRefusal: Sendable, Hashable {
    public var campaignID: Int64
    public var app: String
    /// The constraint's name, when the server gave one.
    public var check: String?
    /// What the check said, usually naming the column (`pushd.campaigns.payload must …`).
    public var message: String
    public var refusedAt: Timestamp

    public init(campaignID: Int64, app: String, check: String?, message: String, refusedAt: Timestamp) {
        self.campaignID = campaignID
        self.app = app
        self.check = check
        self.message = message
        self.refusedAt = refusedAt
    }

    /// The column the check's message names (`payload` of `pushd.campaigns.payload must …`), if any.
    public var column: String? {
        let prefix = "pushd.campaigns."
        guard message.hasPrefix(prefix) else { return nil }
        let name = message.dropFirst(prefix.count).prefix { $0.isLetter || $0 == "_" }
        return name.isEmpty ? nil : String(name)
    }

    /// Which check refuses the row, what it says, and how to end the hold.
    public var explanation: String {
        let fix = column.map { "UPDATE pushd.campaigns SET \($0) = … WHERE id = \(campaignID)" }
            ?? "UPDATE pushd.campaigns SET <column> = … WHERE id = \(campaignID)"
        return "CHECK \(check ?? "(unnamed)") of pushd.campaigns, added NOT VALID after the campaign was created, refuses to write its row (\(message)); "
            + "pushd sends nothing more of it (held since \(refusedAt.iso8601), see pushd.campaign_refusals). "
            + "Correct the column the check names (\(fix)), which ends the hold and lets pause, cancel and sending go on, "
            + "or delete the campaign (DELETE FROM pushd.campaigns WHERE id = \(campaignID))"
    }
}

extension CampaignStore {
    static let refusalColumns = "r.campaign_id, k.app, r.constraint_name, r.message, r.refused_at"

    static func decodeRefusal(_ row: PGRow) throws -> CampaignRefusal {
        CampaignRefusal(campaignID: try row.require(0), app: try row.require(1), check: try row.get(2), message: try row.require(3),
                        refusedAt: try row.require(4))
    }

    /// Holds campaign `id`, whose row `error` (a CHECK) refused to write, unless it is held
    /// already; returns its hold (nil when the campaign is gone). Not inside a failed transaction.
    @discardableResult
    public func hold(_ connection: PGConnection, campaignID id: Int64, refusedBy error: PGError) throws -> CampaignRefusal? {
        let result = try connection.query(connection.prepared("""
            WITH held AS (
                INSERT INTO pushd.campaign_refusals (campaign_id, constraint_name, message)
                SELECT id, $2, $3 FROM pushd.campaigns WHERE id = $1
                ON CONFLICT (campaign_id) DO NOTHING
            )
            SELECT \(Self.refusalColumns) FROM pushd.campaign_refusals r JOIN pushd.campaigns k ON k.id = r.campaign_id
            WHERE r.campaign_id = $1
            """), [id, error.constraint, error.message])
        // A hold inserted by this statement is not visible to its own SELECT: read it again.
        if result.rowCount == 1 { return try Self.decodeRefusal(result[0]) }
        return try refusal(connection, campaignID: id)
    }

    /// The hold of campaign `id`, or nil when its row is written normally.
    public func refusal(_ connection: PGConnection, campaignID id: Int64) throws -> CampaignRefusal? {
        let result = try connection.query(connection.prepared("""
            SELECT \(Self.refusalColumns) FROM pushd.campaign_refusals r JOIN pushd.campaigns k ON k.id = r.campaign_id
            WHERE r.campaign_id = $1
            """), [id])
        return result.rowCount == 1 ? try Self.decodeRefusal(result[0]) : nil
    }

    /// Every held campaign of `apps` (nil: of every app), oldest hold first.
    public func refusals(_ connection: PGConnection, apps: [String]? = nil) throws -> [CampaignRefusal] {
        try connection.query(connection.prepared("""
            SELECT \(Self.refusalColumns) FROM pushd.campaign_refusals r JOIN pushd.campaigns k ON k.id = r.campaign_id
            WHERE $1::text[] IS NULL OR k.app = ANY ($1::text[])
            ORDER BY r.refused_at, r.campaign_id
            """), [apps]).rows.map(Self.decodeRefusal)
    }

    /// Runs `write`, a statement writing campaign `id`'s row; when a CHECK refuses the row, holds
    /// the campaign and throws an error saying which check and how to end the hold, for `doing`
    /// ("pause campaign 7").
    func writingRow<T>(_ connection: PGConnection, campaignID id: Int64, doing: String, _ write: () throws -> T) throws -> T {
        do {
            return try write()
        } catch let error as PGError where error.code == .checkViolation {
            if connection.isInTransaction { _ = try? connection.execute(script: "ROLLBACK") }
            let held = try hold(connection, campaignID: id, refusedBy: error)
            throw QueueError("cannot \(doing): " + (held?.explanation ?? "CHECK \(error.constraint ?? "(unnamed)") refuses its row: \(error.message)"))
        }
    }
}
