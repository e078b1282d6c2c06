import PushdTestSupport
import QueueStore
import Testing

/// The group roles made by the migrations grant exactly what each kind of client needs.
@Suite struct RoleTests {
    static let shopToken = String(repeating: "ab", count: 32)
    static let otherToken = String(repeating: "cd", count: 32)

    /// Tokens of two apps, a provider token and a campaign, written by the owner.
    static func seed(_ database: IsolatedDatabase) throws {
        let owner = try database.connect()
        defer { owner.close() }
        try owner.query("SELECT pushd.register_token('shop', $1, 'u1')", [shopToken])
        try owner.query("SELECT pushd.register_token('other', $1, 'u1')", [otherToken])
        try owner.query("INSERT INTO pushd.provider_tokens (key_id, team_id, token, issued_at) VALUES ('K', 'T', 'eyJ.secret.jwt', now())")
        try owner.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('other', $1, '{\"aps\":{}}')", [otherToken])
    }

    static func denied(_ connection: PGConnection, _ sql: String) -> Bool {
        do {
            try connection.query(sql)
            return false
        } catch let error as PGError {
            return error.code.raw == "42501"
        } catch {
            return false
        }
    }

    @Test func theEnqueueRoleEnqueuesRegistersAndFansOutButReadsNothing() throws {
        try IsolatedDatabase.with { database in
            try Self.seed(database)
            try LoginRole.with(memberOf: "pushd_enqueue", in: database) { role in
                let app = try role.connect()
                defer { app.close() }
                try app.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                              [Self.shopToken])
                try app.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, dedupe_key, push_type, run_at)
                    VALUES ('shop', $1, '{"aps":{"content-available":1}}', 'k1', 'background', now()) ON CONFLICT DO NOTHING
                    """, [Self.shopToken])
                try app.query("SELECT pushd.register_token('shop', $1, 'u2')", [String(repeating: "ef", count: 32)])
                #expect(try app.query("SELECT pushd.notify_user('shop', 'u1', '{\"aps\":{}}')").require(Int.self, row: 0, column: 0) == 1)

                for sql in ["SELECT token FROM pushd.provider_tokens",
                            "SELECT token FROM pushd.device_tokens",
                            "SELECT token FROM pushd.device_tokens WHERE app = 'other'",
                            "SELECT count(*) FROM pushd.device_tokens",
                            "SELECT device_token FROM pushd.jobs",
                            "SELECT tokens FROM pushd.campaign_targets",
                            "SELECT * FROM pushd.dead_jobs",
                            "UPDATE pushd.jobs SET app = 'shop'",
                            "DELETE FROM pushd.jobs",
                            "INSERT INTO pushd.jobs (app, device_token, payload, attempts) VALUES ('shop', '\(Self.shopToken)', '{}', 5)",
                            "UPDATE pushd.device_tokens SET invalidated_at = now()",
                            "SELECT pushd.lease_campaign_chunk('me', 60, ARRAY['shop'])",
                            "SELECT pushd.grant_roles()"] {
                    #expect(Self.denied(app, sql), "pushd_enqueue may run: \(sql)")
                }
            }
            let owner = try database.connect()
            defer { owner.close() }
            #expect(try owner.query("SELECT count(*) FROM pushd.jobs WHERE app = 'shop'").require(Int.self, row: 0, column: 0) == 3)
            #expect(try owner.query("SELECT count(*) FROM pushd.device_tokens WHERE user_id = 'u2'").require(Int.self, row: 0, column: 0) == 1)
        }
    }

    @Test func theReadonlyRoleCountsButSeesNoTokenPayloadOrProviderToken() throws {
        try IsolatedDatabase.with { database in
            try Self.seed(database)
            try LoginRole.with(memberOf: "pushd_readonly", in: database) { role in
                let dashboard = try role.connect()
                defer { dashboard.close() }
                #expect(try dashboard.query("SELECT count(*) FROM pushd.jobs").require(Int.self, row: 0, column: 0) == 1)
                #expect(try dashboard.query("SELECT count(*) FROM pushd.device_tokens WHERE invalidated_at IS NULL")
                    .require(Int.self, row: 0, column: 0) == 2)
                try dashboard.query("SELECT app, status, targets, sent FROM pushd.campaigns")
                try dashboard.query("SELECT app, reason, failed_at FROM pushd.dead_jobs")
                for sql in ["SELECT token FROM pushd.provider_tokens",
                            "SELECT token FROM pushd.device_tokens",
                            "SELECT device_token FROM pushd.jobs",
                            "SELECT payload FROM pushd.jobs",
                            "SELECT tokens FROM pushd.campaign_targets",
                            "INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', '\(Self.shopToken)', '{}')",
                            "SELECT pushd.register_token('shop', '\(Self.shopToken)')",
                            "SELECT pushd.notify_user('shop', 'u1', '{}')"] {
                    #expect(Self.denied(dashboard, sql), "pushd_readonly may run: \(sql)")
                }
            }
        }
    }

    @Test func theRolesAreNologinGroupsAndGrantingAgainChangesNothing() throws {
        try IsolatedDatabase.with { database in
            let owner = try database.connect()
            defer { owner.close() }
            let roles = try owner.query("""
                SELECT string_agg(rolname || ':' || rolcanlogin, ',' ORDER BY rolname) FROM pg_roles
                WHERE rolname IN ('pushd_enqueue', 'pushd_daemon', 'pushd_readonly')
                """).require(String.self, row: 0, column: 0)
            #expect(roles == "pushd_daemon:false,pushd_enqueue:false,pushd_readonly:false")
            let privileges = "SELECT string_agg(relname || '=' || array_to_string(relacl, ';'), ' ' ORDER BY relname) FROM pg_class WHERE relnamespace = 'pushd'::regnamespace AND relkind = 'r'"
            let before = try owner.query(privileges).require(String.self, row: 0, column: 0)
            #expect(try owner.query("SELECT array_to_string(pushd.grant_roles(), ',')").require(String.self, row: 0, column: 0)
                    == "pushd_enqueue,pushd_daemon,pushd_readonly")
            #expect(try owner.query(privileges).require(String.self, row: 0, column: 0) == before)
        }
    }
}
