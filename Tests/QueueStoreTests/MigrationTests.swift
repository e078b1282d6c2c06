import PushdTestSupport
import Posix
import Foundation
import QueueStore
import Locking
import Testing

@Suite struct MigrationTests {
    @Test func migratingAnEmptyDatabaseAppliesEveryVersionAndASecondRunAppliesNone() throws {
        try IsolatedDatabase.with(migrated: false) { database in
            let connection = try database.connect()
            let migrator = Migrator()
            #expect(try migrator.appliedVersions(connection) == [])
            let first = try migrator.migrate(connection)
            #expect(first == Migrator.migrations.map(\.version))
            #expect(try migrator.migrate(connection) == [])
            #expect(try migrator.appliedVersions(connection) == Migrator.migrations.map(\.version))
            let tables = try connection.query("""
                SELECT string_agg(tablename, ',' ORDER BY tablename) FROM pg_tables WHERE schemaname = 'pushd'
                """).require(String.self, row: 0, column: 0)
            #expect(tables == "broadcast_jobs,campaign_chunks,campaign_refusals,campaign_retries,campaign_targets,campaigns,channels,dead_jobs,device_tokens,instances,job_dedupe_keys,job_waiters,jobs,provider_tokens,schema_migrations")
        }
    }

    @Test func theDedupeKeysOfJobsQueuedBeforeVersion28StayTakenAndTheirRetriesGoThrough() throws {
        try IsolatedDatabase.with(migrated: false) { database in
            let connection = try database.connect()
            try Migrator(migrations: Migrator.migrations.filter { $0.version < 28 }).migrate(connection)
            let token = String(repeating: "ab", count: 32)
            let insert = """
                INSERT INTO pushd.jobs (app, device_token, payload, dedupe_key) VALUES ('shop', $1, '{"aps":{"alert":"hi"}}', 'k1')
                """
            try connection.query(insert, [token])
            #expect(try Migrator(migrations: Migrator.migrations.filter { $0.version <= 28 }).migrate(connection) == [28])
            #expect(try connection.query("SELECT count(*) FROM pushd.job_dedupe_keys WHERE dedupe_key = 'k1'").require(Int.self, row: 0, column: 0) == 1)
            #expect(try connection.query(insert, [token]).affectedRows == 0)
            let queue = JobQueue()
            let batch = try queue.claim(connection, limit: 10, apps: ["shop"])
            let job = try #require(batch.jobs.first)
            try queue.finish(connection, batch, JobOutcomes(retries: [JobRetry(id: job.id, runAt: Timestamp(), error: "500 InternalServerError")]))
            #expect(try connection.query("SELECT count(*) FROM pushd.jobs WHERE id = $1", [job.id]).require(Int.self, row: 0, column: 0) == 1)
        }
    }

    /// Open chunks of registered tokens imported before version 35 are tagged with their
    /// environment when all their targets carry one; a mixed chunk, a file import's and a
    /// finished one are left untagged.
    @Test func version35TagsTheOpenChunksImportedBeforeThatGoToOneEnvironment() throws {
        try IsolatedDatabase.with(migrated: false) { database in
            let connection = try database.connect()
            defer { connection.close() }
            try Migrator(migrations: Migrator.migrations.filter { $0.version < 35 }).migrate(connection)
            try connection.query("""
                INSERT INTO pushd.device_tokens (app, token, environment)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), CASE WHEN g <= 6 THEN 'production' ELSE 'sandbox' END
                FROM generate_series(1, 12) g
                """)
            let campaigns = CampaignStore()
            let id = try campaigns.create(connection, NewCampaign(app: "shop", name: "registered", payload: #"{"aps":{"alert":"hi"}}"#))
            // Version 34: chunks of 4 by environment, then token: production, both, sandbox.
            #expect(try campaigns.importFromDeviceTokens(connection, campaignID: id, chunkSize: 4).imported == 12)
            try campaigns.importTargets(connection, campaignID: id, targets: [(String(repeating: "ef", count: 32), nil)])
            try connection.query("INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens, environments) VALUES ($1, 4, ARRAY[$2], ARRAY['sandbox'])",
                                 [id, String(repeating: "cd", count: 32)])
            try connection.query("INSERT INTO pushd.campaign_chunks (campaign_id, chunk, size, finished_at) VALUES ($1, 4, 1, now())", [id])
            #expect(try Migrator(migrations: Migrator.migrations.filter { $0.version <= 35 }).migrate(connection) == [35])
            let tags = try connection.query("SELECT coalesce(environment, 'none') FROM pushd.campaign_chunks WHERE campaign_id = $1 ORDER BY chunk", [id])
            #expect(try (0..<tags.rowCount).map { try tags.require(String.self, row: $0, column: 0) }
                    == ["production", "none", "sandbox", "none", "none"])
        }
    }

    @Test func twoInstancesMigratingAtOnceApplyEachVersionOnce() throws {
        try IsolatedDatabase.with(migrated: false) { database in
            let applied = Lock<[[Int]]>([])
            let failures = Lock<[String]>([])
            DispatchQueue.concurrentPerform(iterations: 3) { _ in
                do {
                    let connection = try database.connect()
                    let versions = try Migrator().migrate(connection)
                    applied.withLock { $0.append(versions) }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
            #expect(failures.withLock { $0 } == [])
            let all = applied.withLock { $0 }
            #expect(all.flatMap { $0 }.sorted() == Migrator.migrations.map(\.version))
            let connection = try database.connect()
            #expect(try connection.query("SELECT count(*) FROM pushd.schema_migrations").require(Int.self, row: 0, column: 0)
                    == Migrator.migrations.count)
        }
    }

    @Test func migrationVersionsOutOfOrderAreRefusedBeforeTouchingTheDatabase() throws {
        try IsolatedDatabase.with(migrated: false) { database in
            let connection = try database.connect()
            let migrator = Migrator(migrations: [Migration(version: 2, name: "b", sql: "SELECT 1"),
                                                 Migration(version: 1, name: "a", sql: "SELECT 1")])
            let error = Fixtures.pgError { try migrator.migrate(connection) }
            #expect(error?.message.contains("must increase") == true)
            #expect(try migrator.appliedVersions(connection) == [])
        }
    }

    @Test func pushdSessionsRunWithStatementAndIdleTransactionTimeouts() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            #expect(try connection.query("SHOW statement_timeout").require(String.self, row: 0, column: 0) == "30s")
            #expect(try connection.query("SHOW idle_in_transaction_session_timeout").require(String.self, row: 0, column: 0) == "1min")
            let options = try connection.query("""
                SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'pushd.jobs'::regclass
                """).require(String.self, row: 0, column: 0)
            #expect(options.contains("autovacuum_vacuum_threshold=20000"))
        }
    }
}
