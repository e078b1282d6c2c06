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
