import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A certificate app's client certificate with the real `pushd run` and an apns-mock that
/// requires client certificates of the harness's CA: pushd presents the certificate it loaded
/// and checked, held in memory, whatever the files hold later; a renewal takes effect on the
/// reload (SIGHUP) that loads it, for the very next request.
@Suite(.serialized) struct CertificateReloadTests {
    /// The app's certificate and key files, copies the tests write over.
    struct Files {
        var certificate: String
        var key: String
    }

    static func install(_ harness: DaemonHarness) throws -> Files {
        let files = Files(certificate: harness.directory + "/app.pem", key: harness.directory + "/app.key")
        try FileManager.default.copyItem(atPath: harness.certificates.clientCertificate, toPath: files.certificate)
        try FileManager.default.copyItem(atPath: harness.certificates.clientKey, toPath: files.key)
        chmod(files.key, 0o600)
        return files
    }

    static func app(_ files: Files) -> String {
        """
          - name: shop
            bundle_id: \(DaemonHarness.bundleID)
            environment: sandbox
            certificate:
              cert_file: \(files.certificate)
              key_file: \(files.key)
        """
    }

    /// A renewal: a new key and a certificate for it from the same CA, named `name`, written
    /// over the app's files the way an operator copies them in (certificate first).
    static func renew(_ harness: DaemonHarness, _ files: Files, name: String, subject: String? = nil) throws {
        let staging = harness.directory + "/renewal"
        try FileManager.default.createDirectory(atPath: staging, withIntermediateDirectories: true)
        try "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n"
            .write(toFile: staging + "/client.ext", atomically: true, encoding: .utf8)
        try DaemonHarness.openssl(["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", staging + "/client.key"])
        try DaemonHarness.openssl(["req", "-new", "-key", staging + "/client.key", "-subj", subject ?? "/CN=\(name)", "-out", staging + "/client.csr"])
        try DaemonHarness.openssl(["x509", "-req", "-in", staging + "/client.csr", "-CA", harness.certificates.caCertificate,
                                   "-CAkey", harness.certificates.caKey, "-set_serial", String(UInt32.random(in: 1...UInt32.max)),
                                   "-days", "90", "-sha256", "-extfile", staging + "/client.ext", "-out", staging + "/client.pem"])
        try Data(contentsOf: URL(fileURLWithPath: staging + "/client.pem")).write(to: URL(fileURLWithPath: files.certificate))
        try Data(contentsOf: URL(fileURLWithPath: staging + "/client.key")).write(to: URL(fileURLWithPath: files.key))
    }

    /// `count` jobs for `shop`, with tokens from `first` on.
    static func enqueue(_ connection: PGConnection, from first: Int, count: Int) throws {
        for seed in first..<(first + count) {
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(seed)])
        }
    }

    /// The mock of `world` restarted on its port: every connection pushd had ends, and the next
    /// one is opened with whatever pushd presents now.
    static func restartMock(_ world: inout TLSFailurePausesAppTests.World) throws {
        let certificates = world.harness.certificates
        try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                            clientCA: certificates.caCertificate)
    }

    /// The real `pushd run` sending app `shop` with a copy of the harness's client certificate
    /// through a mock that requires client certificates of the harness's CA, having sent its
    /// first three notifications.
    final class Sending {
        var world: TLSFailurePausesAppTests.World
        let files: Files
        let connection: PGConnection
        let daemon: TLSFailurePausesAppTests.Daemon

        init(database: IsolatedDatabase) throws {
            world = try TLSFailurePausesAppTests.World(database: database)
            try CertificateReloadTests.restartMock(&world)
            files = try CertificateReloadTests.install(world.harness)
            let config = try world.writeConfig(caFile: world.harness.certificates.caCertificate, app: CertificateReloadTests.app(files))
            connection = try database.connect()
            daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: world.harness.directory + "/pushd.log")
            try CertificateReloadTests.enqueue(connection, from: 1, count: 3)
            let world = self.world, daemon = self.daemon
            #expect(DaemonHarness.wait(seconds: 30) { world.mock.stats.accepted == 3 }, "\(daemon.text)")
        }

        deinit { connection.close() }
    }

    /// Half a renewal copied over the certificate file, with and without SIGHUP: new connections
    /// keep presenting the certificate pushd loaded, sending goes on, and the reload says loudly
    /// that it kept it. libcurl used to read the file again for every new connection.
    @Test func aCertificateFileBrokenOnDiskIsNotUsedWithOrWithoutSIGHUP() throws {
        try IsolatedDatabase.with { database in
            let sending = try Sending(database: database)
            defer { withExtendedLifetime(sending) {} }
            let files = sending.files, connection = sending.connection, daemon = sending.daemon

            try "-----BEGIN CERTIFICATE-----\nhalf a certifi".write(toFile: files.certificate, atomically: false, encoding: .utf8)
            try Self.restartMock(&sending.world)
            try Self.enqueue(connection, from: 100, count: 3)
            #expect(DaemonHarness.wait(seconds: 30) { sending.world.mock.stats.accepted == 3 },
                    "new connections must present the certificate pushd loaded, not the file: \(sending.world.mock.stats) \(daemon.text.suffix(3000))")
            #expect(sending.world.mock.stats.clientCertificatesRefused == 0)
            #expect(!daemon.text.contains("sending for app shop is paused"), "\(daemon.text)")

            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 10) { daemon.text.contains("\"event\":\"config_reloaded\"") }, "\(daemon.text)")
            try Self.restartMock(&sending.world)
            try Self.enqueue(connection, from: 200, count: 3)
            #expect(DaemonHarness.wait(seconds: 30) { sending.world.mock.stats.accepted == 3 }, "\(sending.world.mock.stats) \(daemon.text.suffix(3000))")
            #expect(sending.world.mock.stats.clientCertificateSubjects.values.allSatisfy { $0 == "/CN=apns-mock client" })
            let failures = daemon.text.split(separator: "\n").filter { $0.contains("credentials_reload_failed") }
            #expect(failures.count == 1, "\(failures)")
            #expect(failures.first?.contains("app shop keeps presenting the certificate /CN=apns-mock client") == true, "\(failures)")
            #expect(failures.first?.contains(files.certificate) == true)
            #expect(daemon.metrics().contains("pushd_config_reloads_total{result=\"failure\"} 1"))
            #expect(daemon.metrics().contains("pushd_app_paused{app=\"shop\"} 0"))
            #expect(try DaemonHarness.wait(seconds: 10) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            sending.world.mock.stop()
        }
    }

    /// The renewal runbook: new certificate and key written over the files, then SIGHUP. The
    /// next notification goes out with the new certificate, on a new connection, and pushd
    /// closes the one it had opened with the old one instead of using it until it ends.
    @Test func aRenewedCertificateAndSIGHUPReachTheNextRequest() throws {
        try IsolatedDatabase.with { database in
            let sending = try Sending(database: database)
            defer { withExtendedLifetime(sending) {} }
            let files = sending.files, connection = sending.connection, daemon = sending.daemon

            try Self.renew(sending.world.harness, files, name: "renewed client")
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 10) { daemon.text.contains("\"event\":\"config_reloaded\"") }, "\(daemon.text)")
            try Self.enqueue(connection, from: 100, count: 1)
            #expect(DaemonHarness.wait(seconds: 30) { sending.world.mock.stats.accepted == 4 }, "\(daemon.text)")
            let stats = sending.world.mock.stats
            let subjects = sending.world.mock.acceptedLog.map { stats.clientCertificateSubjects[$0.connectionID] ?? "none" }
            #expect(subjects == ["/CN=apns-mock client", "/CN=apns-mock client", "/CN=apns-mock client", "/CN=renewed client"],
                    "\(stats) \(daemon.text.suffix(3000))")
            #expect(DaemonHarness.wait(seconds: 10) { sending.world.mock.stats.connectionsClosed >= 1 }, "\(sending.world.mock.stats)")
            let text = daemon.text
            #expect(text.contains("certificates reloaded for apps shop (sandbox)"), "\(text)")
            let line = text.split(separator: "\n").first { $0.contains("\"event\":\"certificate_reloaded\"") }
            #expect(line?.contains("app shop presents the certificate /CN=renewed client") == true, "\(text)")
            #expect(!text.contains("credentials_reload_failed"))
            #expect(daemon.metrics().contains("pushd_config_reloads_total{result=\"success\"} 1"))
            sending.world.mock.stop()
        }
    }

    /// A renewal that is a certificate of another app (its subject's UID names another bundle
    /// id) copied in by mistake: APNs would refuse every notification of this app with it
    /// (TopicDisallowed). The reload refuses it loudly and keeps presenting the certificate it
    /// had, so sending goes on; it used to present the new one and report a successful reload.
    @Test func aRenewalIssuedForAnotherBundleIDIsRefusedAndTheOldCertificateKept() throws {
        try IsolatedDatabase.with { database in
            let sending = try Sending(database: database)
            defer { withExtendedLifetime(sending) {} }
            let files = sending.files, connection = sending.connection, daemon = sending.daemon

            try Self.renew(sending.world.harness, files, name: "other app", subject: "/UID=com.example.other/CN=other app")
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 10) { daemon.text.contains("\"event\":\"config_reloaded\"") }, "\(daemon.text)")
            try Self.restartMock(&sending.world)
            try Self.enqueue(connection, from: 100, count: 2)
            #expect(DaemonHarness.wait(seconds: 30) { sending.world.mock.stats.accepted == 2 }, "\(sending.world.mock.stats) \(daemon.text.suffix(3000))")
            #expect(sending.world.mock.stats.clientCertificateSubjects.values.allSatisfy { $0 == "/CN=apns-mock client" },
                    "\(sending.world.mock.stats)")
            let failures = daemon.text.split(separator: "\n").filter { $0.contains("credentials_reload_failed") }
            #expect(failures.count == 1, "\(daemon.text)")
            for expected in ["app shop keeps presenting the certificate /CN=apns-mock client", "is for com.example.other",
                             "bundle_id \(DaemonHarness.bundleID)", "TopicDisallowed"] {
                #expect(failures.first?.contains(expected) == true, "no \(expected) in \(failures)")
            }
            #expect(!daemon.text.contains("\"event\":\"certificate_reloaded\""))
            #expect(daemon.metrics().contains("pushd_config_reloads_total{result=\"failure\"} 1"))
            sending.world.mock.stop()
        }
    }

    /// A certificate app's broadcasts go on the broadcast worker's own connection, which the
    /// app's sender does not hold: a renewal reaches it too, at the next broadcast.
    @Test func aRenewedCertificateAndSIGHUPReachTheNextBroadcast() throws {
        try IsolatedDatabase.with { database in
            let sending = try Sending(database: database)
            defer { withExtendedLifetime(sending) {} }
            let files = sending.files, connection = sending.connection, daemon = sending.daemon, mock = sending.world.mock
            let channel = try #require(mock.createChannel(bundleID: DaemonHarness.bundleID, storagePolicy: .noMessageStored))
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                 [channel, BroadcastDaemonTests.update])
            #expect(DaemonHarness.wait(seconds: 30) { mock.stats.broadcastsAccepted[channel] == 1 }, "\(daemon.text)")
            #expect(!mock.stats.clientCertificateSubjects.values.contains("/CN=renewed client"))

            try Self.renew(sending.world.harness, files, name: "renewed client")
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(DaemonHarness.wait(seconds: 10) { daemon.text.contains("\"event\":\"config_reloaded\"") }, "\(daemon.text)")
            try connection.query("INSERT INTO pushd.jobs (app, channel_id, payload, priority) VALUES ('shop', $1, $2, 5)",
                                 [channel, BroadcastDaemonTests.update])
            #expect(DaemonHarness.wait(seconds: 30) { mock.stats.broadcastsAccepted[channel] == 2 }, "\(daemon.text)")
            #expect(mock.stats.clientCertificateSubjects.values.contains("/CN=renewed client"), "\(mock.stats)")
            mock.stop()
        }
    }
}
