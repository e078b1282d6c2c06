import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs refuses an app's client certificate but resets the connection before pushd reads the
/// TLS alert (apns-mock's `refusedCertificateReset`): libcurl reports only "Connection reset by
/// peer" after a completed handshake. The real `pushd run` names the certificate as the likely
/// cause wherever it shows the outage: the `apns_reconnect_backoff` and `apns_down` lines,
/// `/readyz` and `pushd status`. It does not pause the app for it (a server going down ends
/// connections the same way): the jobs are kept and go out once the certificate is accepted.
@Suite(.serialized) struct RefusedCertificateResetTests {
    static let hypothesis = "this is how APNs refusing the certificate"

    @Test func aCertificateRefusedByAResetIsNamedOnEveryProbeAndItsJobsGoOnceItIsAccepted() throws {
        try IsolatedDatabase.with { database in
            var world = try TLSFailurePausesAppTests.World(database: database)
            let certificates = world.harness.certificates
            // The server takes client certificates of the other CA only, and refuses by a reset.
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: world.other.caCertificate, refusedCertificateReset: true)
            let config = try world.writeConfig(caFile: certificates.caCertificate, app: world.certificateApp(certificates))
            let connection = try database.connect()
            defer { connection.close() }
            try TLSFailurePausesAppTests.enqueue(connection, count: 3)
            let daemon = try TLSFailurePausesAppTests.Daemon(config: config, log: world.harness.directory + "/pushd-reset.log")

            func line(_ event: String) -> String? {
                daemon.text.split(separator: "\n").first { $0.contains("\"event\":\"\(event)\"") }.map(String.init)
            }
            #expect(DaemonHarness.wait(seconds: 30) { line("apns_reconnect_backoff") != nil }, "\(daemon.text)")
            let backoff = line("apns_reconnect_backoff") ?? ""
            print("apns_reconnect_backoff: \(backoff)")
            #expect(backoff.contains(Self.hypothesis) && backoff.contains("pushd check-config"), "\(backoff)")
            #expect(backoff.contains("ended before answering anything"), "\(backoff)")

            #expect(DaemonHarness.wait(seconds: 30) { line("apns_down") != nil }, "\(daemon.text)")
            let down = line("apns_down") ?? ""
            print("apns_down: \(down)")
            #expect(down.contains(Self.hypothesis), "\(down)")

            var readyz = ""
            #expect(DaemonHarness.wait(seconds: 20) {
                readyz = daemon.readyz()
                return readyz.contains("APNs is not taking notifications of app shop")
            }, "\(readyz)")
            print("/readyz: \(readyz)")
            #expect(readyz.contains(Self.hypothesis), "\(readyz)")

            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 20) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("APNs") && $0.contains("shop") }
            }, "\(status.text)")
            #expect(status.exitCode == 1)
            #expect(status.problems.contains { $0.contains(Self.hypothesis) }, "\(status.problems)")

            // Not paused (docs/operations.md says why); nothing reached the server, nothing was lost.
            #expect(daemon.metrics().contains("pushd_app_paused{app=\"shop\"} 0"))
            #expect(!daemon.text.contains("sending for app shop is paused"))
            #expect(world.mock.stats.clientCertificatesRefused >= 1)
            #expect(world.mock.stats.accepted == 0)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 3)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)

            // The fix (a certificate the server takes): the kept jobs go without a SIGHUP.
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: certificates.caCertificate)
            #expect(try DaemonHarness.wait(seconds: 45) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(world.mock.stats.accepted == 3)
            world.mock.stop()
        }
    }
}
