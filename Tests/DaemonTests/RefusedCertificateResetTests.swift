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
        try Self.expectHintOnEveryProbeThenSending(how: CertificateRefusalHint.afterHandshake, cause: "ended before answering anything") { world in
            let certificates = world.harness.certificates
            // The server takes client certificates of the other CA only, and refuses by a reset.
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: world.other.caCertificate, refusedCertificateReset: true)
        }
    }

    /// With TLS 1.2 the server checks the certificate inside the handshake: a reset there,
    /// after pushd sent its certificate, is libcurl error 35 with the handshake not done. The
    /// hint says so, on every probe, and the app is not paused either.
    @Test func aCertificateRefusedByAResetInsideATLS12HandshakeIsNamedOnEveryProbeAndItsJobsGoOnceItIsAccepted() throws {
        try Self.expectHintOnEveryProbeThenSending(how: CertificateRefusalHint.duringHandshake,
                                                   cause: "Connection reset by peer (libcurl error 35)") { world in
            let certificates = world.harness.certificates
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: world.other.caCertificate, refusedCertificateHandshakeReset: true,
                                maximumTLSVersion: .tls12)
        }
    }

    /// Runs `pushd run` for a certificate app against the mock `refuse` starts, checks that the
    /// backoff line (with `cause` and `how` the connection ended), `apns_down`, `/readyz` and
    /// `pushd status` name the certificate, that the app is not paused and nothing is lost,
    /// then that the jobs go once the server takes the certificate.
    static func expectHintOnEveryProbeThenSending(how: String, cause: String,
                                                  refuse: (inout TLSFailurePausesAppTests.World) throws -> Void) throws {
        try IsolatedDatabase.with { database in
            var world = try TLSFailurePausesAppTests.World(database: database)
            let certificates = world.harness.certificates
            try refuse(&world)
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
            #expect(backoff.contains(cause) && backoff.contains(how), "\(backoff)")

            #expect(DaemonHarness.wait(seconds: 30) { line("apns_down") != nil }, "\(daemon.text)")
            let down = line("apns_down") ?? ""
            print("apns_down: \(down)")
            #expect(down.contains(Self.hypothesis) && down.contains(how), "\(down)")

            var readyz = ""
            #expect(DaemonHarness.wait(seconds: 20) {
                readyz = daemon.readyz()
                return readyz.contains("APNs is not taking notifications of app shop")
            }, "\(readyz)")
            print("/readyz: \(readyz)")
            #expect(readyz.contains(Self.hypothesis) && readyz.contains(how), "\(readyz)")

            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 20) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("APNs") && $0.contains("shop") }
            }, "\(status.text)")
            #expect(status.exitCode == 1)
            #expect(status.problems.contains { $0.contains(Self.hypothesis) && $0.contains(how) }, "\(status.problems)")

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
