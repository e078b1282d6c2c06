import APNs
import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd channels audit`, the real binary, against apns-mock's channel management listener
/// and a real database. A channel creation taken over after its instance stopped may leave a
/// channel at APNs that pushd has no record of; before, nothing could find it.
@Suite(.serialized) struct ChannelAuditDaemonTests {
    static func audit(_ config: String, _ extra: [String] = [], environment: [String: String] = [:]) throws -> SecretRedactionTests.Output {
        var variables = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
        variables.merge(environment) { _, new in new }
        return try SecretRedactionTests.pushd(["channels", "audit", "--config", config, "--app", "shop"] + extra, environment: variables)
    }

    /// A row of `pushd.channels` recording `channelID` as created, as the daemon leaves it.
    static func recordActive(_ connection: PGConnection, channelID: String) throws {
        let row = try connection.query("SELECT pushd.create_channel('shop', 'none')").require(Int64.self, row: 0, column: 0)
        #expect(try ChannelStore().claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60).map(\.id) == [row])
        try ChannelStore().recordCreated(connection, id: row, channelID: channelID, environment: "sandbox")
    }

    @Test func aChannelAtAPNsThatPushdHasNoRecordOfIsReportedWithItsDeleteCommandUntilDeleted() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let config = try harness.writeConfigFile()
            let connection = try database.connect()
            defer { connection.close() }
            let known = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            try Self.recordActive(connection, channelID: known)

            let agreed = try Self.audit(config)
            #expect(agreed.status == 0, "\(agreed.text)")
            #expect(agreed.text.contains("/1/apps/\(DaemonHarness.bundleID)/all-channels (app shop, sandbox, apns-request-id "), "\(agreed.text)")
            #expect(agreed.text.contains("at APNs, unknown to pushd: none"), "\(agreed.text)")
            #expect(agreed.text.contains("agree: 1"), "\(agreed.text)")

            // Made at APNs by a creation whose outcome never reached pushd.channels.
            let extra = try #require(harness.mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            let differs = try Self.audit(config)
            #expect(differs.status == 1, "\(differs.text)")
            #expect(differs.text.contains("APNs has 2 channels for app shop in sandbox; 1 of them recorded in pushd.channels"), "\(differs.text)")
            #expect(differs.text.contains("at APNs, unknown to pushd (1)"), "\(differs.text)")
            let command = "pushd channels delete --config \(config) --app shop --environment sandbox \(extra)"
            #expect(differs.text.contains("  " + command), "\(differs.text)")
            #expect(!differs.text.contains("sandbox \(known)"), "\(differs.text)")
            #expect(differs.text.contains("recorded active in pushd.channels, not at APNs: none"), "\(differs.text)")
            #expect(differs.text.contains("agree: 1"), "\(differs.text)")

            // The printed command, carried out by a running pushd, removes it.
            let pipeline = try harness.pipeline()
            pipeline.start()
            let arguments = command.split(separator: " ").dropFirst().map(String.init) + ["--wait", "20"]
            let deleted = try SecretRedactionTests.pushd(arguments, environment: ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" })
            pipeline.stop(deadline: Timestamp().addingTimeInterval(5))
            #expect(deleted.status == 0, "\(deleted.text)")
            #expect(harness.mock.stats.channelsLive == 1)
            let again = try Self.audit(config)
            #expect(again.status == 0, "\(again.text)")
            #expect(again.text.contains("agree: 1"), "\(again.text)")
        }
    }

    /// A certificate-only configuration: APNs takes every channel management request with the
    /// app's certificate (Apple, "Sending channel management requests to APNs": "APNs ignores
    /// this header if you use certificate-based authentication"). `pushd channels create`
    /// queues the request and the running pushd creates the channel on a connection that
    /// presents the certificate, to a management listener that requires one; `list` shows it,
    /// `audit` asks APNs with the certificate and agrees, `delete` removes it. Before, create
    /// and delete were refused for want of an instance with a token key, and audit for the
    /// certificate.
    @Test func aCertificateOnlyAppsChannelIsCreatedListedAuditedAndDeletedByTheCommands() throws {
        try IsolatedDatabase.with { database in
            var world = try TLSFailurePausesAppTests.World(database: database)
            let certificates = world.harness.certificates
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: certificates.caCertificate, channelManagement: true)
            defer { world.mock.stop() }
            let channelHost = "127.0.0.1:\(try #require(world.mock.channelManagementPort))"
            let file = try world.writeConfig(caFile: certificates.caCertificate, app: world.certificateApp(certificates),
                                             channelHost: channelHost)
            var config = world.harness.config()
            config.apns.hostOverride = "127.0.0.1:\(world.port)"
            config.apns.channelHostOverride = channelHost
            config.apps[0].credentials = .certificate(certificateFile: certificates.clientCertificate, keyFile: certificates.clientKey,
                                                      pkcs12File: nil, password: nil)
            let pipeline = try world.harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let environment = ProcessInfo.processInfo.environment.filter { $0.key != "PUSHD_DATABASE_URL" }
            func pushd(_ arguments: [String]) throws -> SecretRedactionTests.Output {
                try SecretRedactionTests.pushd(["channels"] + arguments + ["--config", file, "--app", "shop"], environment: environment)
            }

            let created = try pushd(["create", "--storage", "most-recent", "--wait", "20"])
            #expect(created.status == 0, "\(created.text)")
            #expect(world.mock.stats.channelsLive == 1)
            let connection = try database.connect()
            defer { connection.close() }
            let channel = try #require(try ChannelStore().list(connection, app: "shop").first?.channelID, "\(created.text)")
            let listed = try pushd(["list"])
            #expect(listed.status == 0 && listed.text.contains(channel) && listed.text.contains("active"), "\(listed.text)")
            let audited = try Self.audit(file)
            #expect(audited.status == 0, "\(audited.text)")
            #expect(audited.text.contains("agree: 1"), "\(audited.text)")
            let deleted = try pushd(["delete", channel, "--wait", "20"])
            #expect(deleted.status == 0, "\(deleted.text)")
            #expect(world.mock.stats.channelsLive == 0)
        }
    }

    @Test func aChannelPushdRecordsActiveThatAPNsLacksIsReported() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let config = try harness.writeConfigFile()
            let connection = try database.connect()
            defer { connection.close() }
            try Self.recordActive(connection, channelID: "bm8tc3VjaC1jaGFubmVs")
            // Rows of the other environment are not compared with this one's channels.
            let production = try connection.query("SELECT pushd.create_channel('shop', 'none', 'production')").require(Int64.self, row: 0, column: 0)
            _ = try ChannelStore().claim(connection, limit: 1, apps: ["shop"], leaseSeconds: 60)
            try ChannelStore().recordCreated(connection, id: production, channelID: "cHJvZHVjdGlvbg==", environment: "production")

            let differs = try Self.audit(config)
            #expect(differs.status == 1, "\(differs.text)")
            #expect(differs.text.contains("APNs has 0 channels for app shop in sandbox"), "\(differs.text)")
            #expect(differs.text.contains("recorded active in pushd.channels, not at APNs (1)"), "\(differs.text)")
            #expect(differs.text.contains("bm8tc3VjaC1jaGFubmVs"), "\(differs.text)")
            #expect(!differs.text.contains("cHJvZHVjdGlvbg=="), "\(differs.text)")
            #expect(differs.text.contains("agree: 0"), "\(differs.text)")
        }
    }

    /// Exit 2, saying what stood in the way: APNs refusing the key, or no database.
    @Test func aRefusedKeyOrAnUnreachableDatabaseExitsTwoSayingWhy() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, trustsPushdKey: false)
            let config = try harness.writeConfigFile()
            // The database is read first: no request goes to APNs for a comparison that cannot be made.
            let noDatabase = try Self.audit(config, ["--database-url", "postgresql://pushd@127.0.0.1:1/none"],
                                            environment: ["PGCONNECT_TIMEOUT": "3"])
            #expect(noDatabase.status == 2, "\(noDatabase.text)")
            #expect(noDatabase.text.contains("pushd channels audit: database:"), "\(noDatabase.text)")
            #expect(harness.mock.stats.requestsReceived == 0)

            let refused = try Self.audit(config)
            #expect(refused.status == 2, "\(refused.text)")
            #expect(refused.text.contains("APNs did not list the channels of app shop"), "\(refused.text)")
            #expect(refused.text.contains("403 InvalidProviderToken"), "\(refused.text)")
        }
    }
}
