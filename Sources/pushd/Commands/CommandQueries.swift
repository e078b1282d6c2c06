import Foundation
import QueueStore

/// Read-only reports the CLI prints and the daemon never needs.
enum CommandQueries {
    struct CampaignRow: Sendable, Equatable {
        var id: Int64
        var app: String
        var name: String
        var status: String
        var targets: Int
        var sent: Int
        var failed: Int
        var pruned: Int
        var createdAt: Date
        var startedAt: Date?
        var finishedAt: Date?
    }

    /// The newest campaigns first, of one app or of all.
    static func campaigns(_ connection: PGConnection, app: String?, status: String?, limit: Int) throws -> [CampaignRow] {
        try connection.query("""
            SELECT id, app, name, status, targets, sent, failed, pruned, created_at, started_at, finished_at
            FROM pushd.campaigns
            WHERE ($1::text IS NULL OR app = $1) AND ($2::text IS NULL OR status = $2)
            ORDER BY id DESC LIMIT $3
            """, [app, status, limit]).rows.map { row in
            CampaignRow(id: try row.require(0), app: try row.require(1), name: try row.require(2), status: try row.require(3),
                        targets: try row.require(4), sent: try row.require(5), failed: try row.require(6),
                        pruned: try row.require(7), createdAt: try row.require(8), startedAt: try row.get(9),
                        finishedAt: try row.get(10))
        }
    }

    struct TokenCounts: Sendable, Equatable {
        var app: String
        var live: Int
        var liveProduction: Int
        var liveSandbox: Int
        var pruned: Int
        var prunedLastDay: Int
        var lastPruned: Date?
    }

    struct PruneReason: Sendable, Equatable {
        var app: String
        var reason: String
        var tokens: Int
    }

    static func tokenCounts(_ connection: PGConnection, app: String?) throws -> [TokenCounts] {
        try connection.query("""
            SELECT app,
                   count(*) FILTER (WHERE invalidated_at IS NULL),
                   count(*) FILTER (WHERE invalidated_at IS NULL AND environment = 'production'),
                   count(*) FILTER (WHERE invalidated_at IS NULL AND environment = 'sandbox'),
                   count(*) FILTER (WHERE invalidated_at IS NOT NULL),
                   count(*) FILTER (WHERE invalidated_at > now() - interval '1 day'),
                   max(invalidated_at)
            FROM pushd.device_tokens
            WHERE $1::text IS NULL OR app = $1
            GROUP BY app ORDER BY app
            """, [app]).rows.map { row in
            TokenCounts(app: try row.require(0), live: try row.require(1), liveProduction: try row.require(2),
                        liveSandbox: try row.require(3), pruned: try row.require(4), prunedLastDay: try row.require(5),
                        lastPruned: try row.get(6))
        }
    }

    static func pruneReasons(_ connection: PGConnection, app: String?) throws -> [PruneReason] {
        try connection.query("""
            SELECT app, coalesce(invalid_reason, 'unknown'), count(*)
            FROM pushd.device_tokens
            WHERE invalidated_at IS NOT NULL AND ($1::text IS NULL OR app = $1)
            GROUP BY 1, 2 ORDER BY 1, 3 DESC, 2
            """, [app]).rows.map { row in
            PruneReason(app: try row.require(0), reason: try row.require(1), tokens: try row.require(2))
        }
    }
}
