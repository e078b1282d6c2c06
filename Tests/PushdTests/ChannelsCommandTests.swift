import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd channels create|list|delete`: requests queued in pushd.channels for the daemon.
@Suite struct ChannelsCommandTests {
    static func run(_ database: IsolatedDatabase, _ arguments: [String],
                    _ command: @escaping (ParsedCommand, CommandContext) throws -> Int32) throws -> CommandRun {
        try CommandRun(["channels"] + arguments + ["--database-url", database.url], command)
    }

    @Test func createQueuesARequestListShowsItAndDeleteQueuesTheDeletion() throws {
        try IsolatedDatabase.with { database in
            let create = try Self.run(database, ["create", "--app", "scores", "--storage", "most-recent"], ChannelsCommand.create)
            #expect(create.exitCode == 0, "\(create.output.errorText)")
            #expect(create.output.text.contains("queued for app scores (storage most-recent)"))

            let connection = try database.connect()
            defer { connection.close() }
            // What the daemon does once APNs answered.
            let pending = try ChannelStore().claim(connection, limit: 1, apps: ["scores"], leaseSeconds: 60)
            try ChannelStore().recordCreated(connection, id: try #require(pending.first?.id), channelID: "c2NvcmVzOjE=", environment: "sandbox")

            let list = try Self.run(database, ["list", "--app", "scores"], ChannelsCommand.list)
            #expect(list.output.output.first?.hasPrefix("ID") == true)
            #expect(list.output.text.contains("c2NvcmVzOjE="))
            #expect(list.output.text.contains("most-recent"))
            #expect(list.output.text.contains("active"))

            let delete = try Self.run(database, ["delete", "--app", "scores", "c2NvcmVzOjE="], ChannelsCommand.delete)
            #expect(delete.exitCode == 0, "\(delete.output.errorText)")
            #expect(try ChannelStore().list(connection, app: "scores").map(\.state) == ["pending_delete"])
        }
    }

    /// APNs takes a channel request with the app's certificate (Apple, "Sending channel
    /// management requests to APNs"): a certificate-only configuration's request to the app's
    /// environment is queued for the daemon. A certificate reaches one environment's host: a
    /// request to another environment, which no live instance has credentials for, is refused
    /// naming the setting instead of queued to fail. Before, every request of a certificate
    /// app was refused for want of a token key.
    @Test func aCertificateAppsChannelRequestIsQueuedUnlessNoInstanceHasCredentialsForItsEnvironment() throws {
        try IsolatedDatabase.with { database in
            let certificates = try SendCommandTests.certificates.get()
            var setup = try SendCommandTests.Setup()
            try setup.writeConfig(port: 1, credentials: """
                    certificate:
                      cert_file: \(certificates.clientCertificate)
                      key_file: \(certificates.clientKey)
                """)
            let create = try Self.run(database, ["create", "--app", "shop", "--config", setup.config], ChannelsCommand.create)
            #expect(create.exitCode == 0, "\(create.output.errorText)")
            #expect(create.output.text.contains("queued for app shop"), "\(create.output.text)")
            let delete = try Self.run(database, ["delete", "--app", "shop", "--config", setup.config, "c2hvcDox"], ChannelsCommand.delete)
            #expect(delete.exitCode == 0, "\(delete.output.errorText)")
            let list = try Self.run(database, ["list", "--app", "shop", "--config", setup.config], ChannelsCommand.list)
            #expect(list.output.text.contains("pending_create") && list.output.text.contains("pending_delete"), "\(list.output.text)")

            let connection = try database.connect()
            defer { connection.close() }
            // The configuration's app is a sandbox one.
            let elsewhere = try Self.run(database, ["create", "--app", "shop", "--config", setup.config, "--environment", "production"],
                                         ChannelsCommand.create)
            #expect(elsewhere.exitCode == 1)
            #expect(elsewhere.output.errorText.contains("NoCredentialsForEnvironment: app shop has no certificate for production"),
                    "\(elsewhere.output.errorText)")
            #expect(try ChannelStore().list(connection, app: "shop", includeDeleted: true).count == 2)
        }
    }

    @Test func badInputIsRefusedSayingWhatIsWrongAndWaitingWithoutADaemonTimesOut() throws {
        try IsolatedDatabase.with { database in
            let storage = try Self.run(database, ["create", "--app", "scores", "--storage", "forever"], ChannelsCommand.create)
            #expect(storage.exitCode == 1)
            #expect(storage.output.errorText.contains("--storage 'forever' is not one of: none, most-recent"))
            let channel = try Self.run(database, ["delete", "--app", "scores", "abc"], ChannelsCommand.delete)
            #expect(channel.output.errorText.contains("'abc' is not a channel id"))
            let waited = try Self.run(database, ["create", "--app", "scores", "--wait", "1"], ChannelsCommand.create)
            #expect(waited.exitCode == 1)
            #expect(waited.output.errorText.contains("not carried out within 1 s"))
        }
    }
}
