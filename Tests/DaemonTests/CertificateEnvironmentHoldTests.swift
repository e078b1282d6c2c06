import APNsMock
import Posix
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs issues a certificate per environment: a certificate app presents one in each. An
/// answer refusing the sandbox one (BadCertificate) judges nothing of the production one: it
/// holds sandbox, its work kept unspent, while production keeps sending. It paused the whole
/// app, production too, for 5 minutes at a time.
@Suite(.serialized) struct CertificateEnvironmentHoldTests {
    @Test func aRefusedSandboxCertificateHoldsSandboxAndProductionKeepsSending() throws {
        try IsolatedDatabase.with { database in
            let fleet = try TwoInstanceFleet(database: database, certificateHosts: 2)
            defer { fleet.stop() }
            let production = fleet.certificateHosts[0]
            try fleet.certificateHosts[1].setFaults(FaultConfiguration(forbiddenReason: "BadCertificate"))
            var config = fleet.harness.config()
            let certificates = fleet.harness.certificates
            let certificate = PushdConfig.Credentials.certificate(certificateFile: certificates.clientCertificate,
                                                                 keyFile: certificates.clientKey, pkcs12File: nil, password: nil)
            config.apps[0].environment = .production
            config.apps[0].credentials = certificate
            config.apps[0].otherCertificates[.sandbox] = certificate
            config.apns.hostOverride = "127.0.0.1:\(fleet.certificatePorts[0])"
            config.apns.sandboxHostOverride = "127.0.0.1:\(fleet.certificatePorts[1])"
            let log = MemoryLogSink()
            let pipeline = try fleet.harness.pipeline(config, log: log)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let connection = try database.connect()
            defer { connection.close() }
            func insert(_ environment: String, _ first: Int, _ last: Int) throws {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload, environment)
                    SELECT 'shop', lpad(to_hex(g), 64, '0'), '{"aps":{"alert":"hi"}}', $1 FROM generate_series($2::int, $3::int) g
                    """, [environment, Int64(first), Int64(last)])
            }
            func scrape() -> String { pipeline.context.metrics.registry.expositionText() }

            try insert("sandbox", 1, 5)
            let held = #"pushd_sending_held{app="shop",environment="sandbox",reason="BadCertificate"} 1"#
            #expect(DaemonHarness.wait(seconds: 20) { scrape().contains(held) }, "\(log.lines.suffix(20))")
            // Production goes on.
            try insert("production", 11, 15)
            #expect(DaemonHarness.wait(seconds: 20) { production.stats.accepted == 5 }, "\(production.stats.accepted) accepted in production")
            #expect(scrape().contains(#"pushd_app_paused{app="shop"} 0"#), "the app was paused")
            // Sandbox's work is kept, unspent; nothing failed.
            #expect(try DaemonHarness.wait(seconds: 10) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE environment = 'sandbox' AND attempts = 0") == 5
            })
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            let lines = log.lines.filter { $0.contains(#""event":"sending_held""#) }
            #expect(lines.count == 1 && lines[0].contains("the certificate the app presents in sandbox was refused or could not be used (BadCertificate)")
                        && lines[0].contains("check sandbox_certificate"), "\(lines)")
        }
    }
}
