import APNsMock
import Posix
import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A certificate app never sends `location` or `liveactivity`: APNs takes them only with token
/// authentication, so such jobs are dead-lettered before sending, with a reason and no status.
@Suite(.serialized) struct CertificateAppPushTypeTests {
    @Test func tokenOnlyPushTypesOfACertificateAppAreDeadLetteredUnsent() throws {
        try IsolatedDatabase.with { database in
            var world = try TLSFailurePausesAppTests.World(database: database)
            let certificates = world.harness.certificates
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: certificates.caCertificate)
            defer { world.mock.stop() }
            var config = world.harness.config()
            config.apns.hostOverride = "127.0.0.1:\(world.port)"
            config.apps[0].credentials = .certificate(certificateFile: certificates.clientCertificate, keyFile: certificates.clientKey,
                                                      pkcs12File: nil, password: nil)
            let pipeline = try world.harness.pipeline(config)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            let connection = try database.connect()
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, push_type, priority, payload) VALUES
                  ('shop', $1, 'alert', 10, '{"aps":{"alert":"hi"}}'),
                  ('shop', $2, 'location', 10, '{"aps":{}}'),
                  ('shop', $3, 'liveactivity', 10, '{"aps":{"timestamp":1,"event":"update","content-state":{}}}')
                """, [DaemonHarness.token(1), DaemonHarness.token(2), DaemonHarness.token(3)])

            #expect(try DaemonHarness.wait(seconds: 20) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            #expect(world.mock.stats.accepted == 1)
            #expect(world.mock.acceptedLog.map(\.token) == [DaemonHarness.token(1)])
            let dead = try connection.query("SELECT push_type, status, reason FROM pushd.dead_jobs ORDER BY push_type")
            try #require(dead.rowCount == 2)
            for row in 0..<dead.rowCount {
                let pushType = try dead.require(String.self, row: row, column: 0)
                #expect(try dead.get(Int.self, row: row, column: 1) == nil)
                let reason = try dead.require(String.self, row: row, column: 2)
                #expect(reason.hasPrefix("TokenAuthenticationRequired: APNs accepts \(pushType) pushes only with token"), "\(reason)")
            }
        }
    }
}
