import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// A TLS failure on a certificate, the server's or the app's, is a configuration error: the
/// real `pushd run` pauses the app with one loud log line carrying libcurl's and OpenSSL's
/// text, `pushd_app_paused{app}` is 1, nothing reaches the server and the jobs are kept; after
/// the fix a SIGHUP resumes sending. An outage would instead be waited out for hours.
@Suite(.serialized) struct TLSFailurePausesAppTests {
    /// One mock, its certificates and pushd's view of it.
    struct World {
        var harness: DaemonHarness
        /// A second, unrelated CA with its own server and client certificates.
        var other: GeneratedCertificates
        var mock: APNsMockServer
        var port: UInt16

        init(database: IsolatedDatabase) throws {
            harness = try DaemonHarness(database: database)
            other = try CertificateGenerator.generate(into: harness.directory + "/other")
            // The harness's own mock is not used: each test starts one with the TLS setup it needs.
            harness.mock.stop()
            mock = try APNsMockServer(configuration: MockConfiguration(certificateChainFile: other.serverCertificate,
                                                                       privateKeyFile: other.serverKey))
            port = 0
        }

        mutating func startMock(host: String = "127.0.0.1", certificate: String, key: String, clientCA: String? = nil,
                                refusedCertificateReset: Bool = false, refusedCertificateHandshakeReset: Bool = false,
                                maximumTLSVersion: MockTLSVersion = .tls13, channelManagement: Bool = false) throws {
            mock.stop()
            var configuration = MockConfiguration(certificateChainFile: certificate, privateKeyFile: key)
            configuration.host = host
            configuration.port = port
            configuration.authentication = clientCA.map { .certificate(clientCAFile: $0) } ?? .none
            configuration.refusedCertificateReset = refusedCertificateReset
            configuration.refusedCertificateHandshakeReset = refusedCertificateHandshakeReset
            configuration.maximumTLSVersion = maximumTLSVersion
            configuration.logsAccepted = true
            if channelManagement { configuration.channelManagementPort = 0 }
            mock = try APNsMockServer(configuration: configuration)
            port = try mock.start()
        }

        /// - Parameter channelHost: the mock's channel management listener ("host:port"), when it runs.
        func writeConfig(host: String = "127.0.0.1", caFile: String, app: String, channelHost: String? = nil) throws -> String {
            let path = harness.directory + "/tls.yml"
            try """
            database:
              url: \(harness.database.url)
            metrics:
              listen: 127.0.0.1:0
            apns:
              host: \(host):\(port)\(channelHost.map { "\n  channel_host: " + $0 } ?? "")
              ca_file: \(caFile)
              threads: 1
            retry:
              base_delay_ms: 10
              max_delay_ms: 200
            shutdown:
              drain_timeout_s: 2
            apps:
            \(app)
            """.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }

        var tokenApp: String {
            """
              - name: shop
                bundle_id: \(DaemonHarness.bundleID)
                environment: sandbox
                token:
                  team_id: \(DaemonHarness.teamID)
                  key_id: \(DaemonHarness.keyID)
                  key_file: \(harness.keyFile)
            """
        }

        func certificateApp(_ certificates: GeneratedCertificates) -> String {
            """
              - name: shop
                bundle_id: \(DaemonHarness.bundleID)
                environment: sandbox
                certificate:
                  cert_file: \(certificates.clientCertificate)
                  key_file: \(certificates.clientKey)
            """
        }
    }

    /// The running daemon, its log and its metrics address (read from its start-up line).
    final class Daemon {
        let process: ChildProcess
        let log: String

        init(config: String, log: String) throws {
            self.log = log
            process = try DaemonProcessTests.start(config: config, log: log)
        }

        deinit {
            if process.isRunning {
                kill(process.processIdentifier, SIGTERM)
                if !DaemonProcessTests.waitForExit(process, seconds: 10) { kill(process.processIdentifier, SIGKILL) }
            }
        }

        var text: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

        var metricsAddress: String? {
            guard let range = text.range(of: "\"metrics\":\"") else { return nil }
            return String(text[range.upperBound...].prefix { $0 != "\"" })
        }

        /// `/metrics` as a scraper sees it.
        func metrics() -> String { get("/metrics") }

        /// `/readyz` as a probe sees it: its body, which says why when it is not ready.
        func readyz() -> String { get("/readyz") }

        /// The body of `path` on the metrics endpoint, "" when there is none yet.
        func get(_ path: String) -> String {
            guard let address = metricsAddress else { return "" }
            let process = ChildProcess()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
            process.arguments = ["-s", "--max-time", "5", "http://\(address)\(path)"]
            let output = Pipe()
            process.standardOutput = output
            process.standardError = FileHandle.nullDevice
            guard (try? process.run()) != nil else { return "" }
            let data = output.fileHandleForReading.readDataToEndOfFile()
            process.waitUntilExit()
            return String(decoding: data, as: UTF8.self)
        }
    }

    static func enqueue(_ connection: PGConnection, count: Int) throws {
        for seed in 0..<count {
            try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                 [DaemonHarness.token(9_000 + seed)])
        }
    }

    /// Runs pushd until it pauses `shop`, checks what an operator sees, applies `fix` and
    /// checks that SIGHUP sends everything.
    static func expectPauseThenResume(_ world: inout World, config: String, expectedText: [String],
                                      fix: (inout World) throws -> Void) throws {
        let connection = try world.harness.database.connect()
        try Self.enqueue(connection, count: 3)
        let daemon = try Daemon(config: config, log: world.harness.directory + "/pushd-\(UUID().uuidString).log")
        let paused = DaemonHarness.wait(seconds: 45) { daemon.metrics().contains("pushd_app_paused{app=\"shop\"} 1") }
        #expect(paused, "\(daemon.text)")
        // The line follows the gauge.
        #expect(DaemonHarness.wait(seconds: 5) { daemon.text.contains("sending for app shop is paused") })
        let line = daemon.text.split(separator: "\n").first { $0.contains("sending for app shop is paused") }.map(String.init)
        #expect(line != nil, "\(daemon.text)")
        for expected in expectedText {
            #expect(line?.contains(expected) == true, "no \(expected) in \(line ?? daemon.text)")
        }
        #expect(line?.contains("\"level\":\"error\"") == true)
        
        // Nothing reached the server, nothing was lost or dead-lettered.
        #expect(world.mock.stats.accepted == 0)
        #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 3)
        #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)

        try fix(&world)
        kill(daemon.process.processIdentifier, SIGHUP)
        #expect(try DaemonHarness.wait(seconds: 45) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                "\(daemon.text)")
        #expect(world.mock.stats.accepted == 3)
        #expect(DaemonHarness.wait(seconds: 10) { daemon.metrics().contains("pushd_app_paused{app=\"shop\"} 0") })
    }

    @Test func aServerCertificateFromAnUntrustedCAPausesTheAppUntilSIGHUP() throws {
        try IsolatedDatabase.with { database in
            var world = try World(database: database)
            // The server presents a certificate of another CA than the one pushd trusts.
            try world.startMock(certificate: world.harness.certificates.serverCertificate, key: world.harness.certificates.serverKey)
            let config = try world.writeConfig(caFile: world.other.caCertificate, app: world.tokenApp)
            try Self.expectPauseThenResume(&world, config: config,
                                           expectedText: ["failed verification", "libcurl error 60", "certificate"]) { world in
                // The fix: the server now presents a certificate pushd's CA signed.
                try world.startMock(certificate: world.other.serverCertificate, key: world.other.serverKey)
            }
            world.mock.stop()
        }
    }

    /// An APNs server whose certificate fails verification stops every notification of the
    /// apps that dial it, and no retry helps: `/readyz` is not ready and says why (it answered
    /// 200 before, naming the app as paused but not the reason), `pushd status` names the
    /// failure, and the log has one error line for it, not one per notification. After the
    /// fix, a SIGHUP makes the process ready again.
    @Test func anUntrustedServerCertificateMakesReadyzNotReadyWithTheReasonUntilFixed() throws {
        try IsolatedDatabase.with { database in
            var world = try World(database: database)
            try world.startMock(certificate: world.harness.certificates.serverCertificate, key: world.harness.certificates.serverKey)
            let config = try world.writeConfig(caFile: world.other.caCertificate, app: world.tokenApp)
            let connection = try database.connect()
            defer { connection.close() }
            try Self.enqueue(connection, count: 3)
            let daemon = try Daemon(config: config, log: world.harness.directory + "/pushd-readyz.log")
            var readyz = ""
            #expect(DaemonHarness.wait(seconds: 45) {
                readyz = daemon.readyz()
                return readyz.contains("failed verification")
            }, "\(readyz)\n\(daemon.text)")
            #expect(readyz.hasPrefix("not ready"), "\(readyz)")
            for expected in ["app shop", "failed verification", "libcurl error 60", "apns.ca_file"] {
                #expect(readyz.contains(expected), "no \(expected) in /readyz: \(readyz)")
            }
            var status = try FleetStatusTests.status(database)
            #expect(try DaemonHarness.wait(seconds: 20) {
                status = try FleetStatusTests.status(database)
                return status.problems.contains { $0.contains("shop") && $0.contains("failed verification") }
            }, "\(status.text)")
            #expect(daemon.metrics().contains("pushd_app_paused{app=\"shop\"} 1"))
            Thread.sleep(forTimeInterval: 2)
            let lines = daemon.text.split(separator: "\n").filter { $0.contains("failed verification") && $0.contains("\"level\":\"error\"") }
            #expect(lines.count == 1, "\(daemon.text)")
            #expect(world.mock.stats.accepted == 0)

            try world.startMock(certificate: world.other.serverCertificate, key: world.other.serverKey)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try DaemonHarness.wait(seconds: 45) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(DaemonHarness.wait(seconds: 15) {
                readyz = daemon.readyz()
                return readyz.hasPrefix("ready")
            }, "\(readyz)")
            world.mock.stop()
        }
    }

    /// A paused app's backlog is not claimed by the instance that paused it: past a 30 s
    /// cycle no row of it was rewritten, it is still counted as waiting, and after the fix a
    /// SIGHUP sends every job once.
    @Test func aPausedAppsBacklogIsLeftUntouchedUntilSIGHUPThenSentOnce() throws {
        try IsolatedDatabase.with { database in
            var world = try World(database: database)
            try world.startMock(certificate: world.harness.certificates.serverCertificate, key: world.harness.certificates.serverKey)
            let config = try world.writeConfig(caFile: world.other.caCertificate, app: world.tokenApp)
            let connection = try database.connect()
            defer { connection.close() }
            let count = 5000
            try connection.query("""
                INSERT INTO pushd.jobs (app, device_token, payload)
                SELECT 'shop', $1 || lpad(to_hex(g), 8, '0'), '{"aps":{"alert":"hi"}}' FROM generate_series(1, \(count)) g
                """, [String(repeating: "d", count: 56)])
            let daemon = try Daemon(config: config, log: world.harness.directory + "/pushd-backlog.log")
            #expect(DaemonHarness.wait(seconds: 45) { daemon.metrics().contains("pushd_app_paused{app=\"shop\"} 1") }, "\(daemon.text)")
            // The batches in flight when the pause began are settled (put back 30 s, no row left
            // deleted or locked by an open claim): from then on nothing moves.
            #expect(try DaemonHarness.wait(seconds: 60) {
                try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE starts_with(last_error, 'app paused: ')") > 0
                    && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE xmax <> '0'::xid") == 0
            })
            let settled = try ConfigurationHoldTests.rowVersions(connection)
            try connection.query("CREATE TABLE versions AS SELECT id, xmin::text AS row_xmin, ctid::text AS row_ctid FROM pushd.jobs")
            Thread.sleep(forTimeInterval: 35)
            let changed = try connection.query("""
                SELECT count(*), coalesce(string_agg(DISTINCT coalesce(j.last_error, 'none') || ' attempts ' || j.attempts, '; '), '')
                FROM pushd.jobs j LEFT JOIN versions v ON v.id = j.id WHERE v.id IS NULL OR v.row_xmin <> j.xmin::text OR v.row_ctid <> j.ctid::text
                """)
            let changedRows = try changed.require(Int.self, row: 0, column: 0)
            let changedErrors = try changed.require(String.self, row: 0, column: 1)
            #expect(try ConfigurationHoldTests.rowVersions(connection) == settled,
                    "the paused app's jobs were rewritten: \(changedRows) rows, \(changedErrors); \(daemon.text.suffix(3000))")
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs WHERE attempts = 0") == count)
            // Still counted as the app's waiting work.
            #expect(DaemonHarness.wait(seconds: 10) {
                daemon.metrics().contains(#"pushd_queue_app_depth{app="shop",lane="transactional"} \#(count)"#)
            })
            #expect(world.mock.stats.accepted == 0)

            // The fix, then SIGHUP: every job goes out, once.
            try world.startMock(certificate: world.other.serverCertificate, key: world.other.serverKey)
            kill(daemon.process.processIdentifier, SIGHUP)
            #expect(try DaemonHarness.wait(seconds: 90) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text)")
            #expect(world.mock.stats.accepted == count)
            #expect(Set(world.mock.acceptedLog.map(\.token)).count == count)
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
            world.mock.stop()
        }
    }

    /// The fix docs/operations.md gives: the CA file pushd trusts was wrong and is replaced
    /// under the same name, then SIGHUP: the corrected file is the one used, with no restart.
    @Test func aCAFileCorrectedUnderTheSameNameIsReadAfterSIGHUP() throws {
        try IsolatedDatabase.with { database in
            var world = try World(database: database)
            try world.startMock(certificate: world.harness.certificates.serverCertificate, key: world.harness.certificates.serverKey)
            // The configured file holds the wrong CA at first.
            let caFile = world.harness.directory + "/trusted-ca.pem"
            try String(contentsOfFile: world.other.caCertificate, encoding: .utf8).write(toFile: caFile, atomically: true, encoding: .utf8)
            let config = try world.writeConfig(caFile: caFile, app: world.tokenApp)
            try Self.expectPauseThenResume(&world, config: config,
                                           expectedText: ["failed verification", "libcurl error 60", "apns.ca_file"]) { world in
                // The fix: the right CA written to the same path (a new file renamed over it).
                try String(contentsOfFile: world.harness.certificates.caCertificate, encoding: .utf8)
                    .write(toFile: caFile, atomically: true, encoding: .utf8)
            }
            world.mock.stop()
        }
    }

    /// A CA rotation while sending: the server moves to a certificate of another CA and the
    /// CA file pushd trusts is replaced under the same name. The next connection of a loop
    /// that had connected before verifies with the file as it is now (libcurl is given its
    /// name; with libcurl 8.14.1 not even CURLOPT_CA_CACHE_TIMEOUT -1 kept the old store
    /// here). CA certificates read once and kept would pause the app instead.
    @Test func aCAFileRotatedWhileSendingIsReadByTheNextConnection() throws {
        try IsolatedDatabase.with { database in
            var world = try World(database: database)
            try world.startMock(certificate: world.harness.certificates.serverCertificate, key: world.harness.certificates.serverKey)
            let caFile = world.harness.directory + "/trusted-ca.pem"
            try String(contentsOfFile: world.harness.certificates.caCertificate, encoding: .utf8).write(toFile: caFile, atomically: true, encoding: .utf8)
            let config = try world.writeConfig(caFile: caFile, app: world.tokenApp)
            let connection = try database.connect()
            defer { connection.close() }
            let daemon = try Daemon(config: config, log: world.harness.directory + "/pushd-rotation.log")
            try Self.enqueue(connection, count: 3)
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 }, "\(daemon.text)")

            // The rotation: the new CA's file in place, the server on the new CA's certificate
            // (its restart ends pushd's connection).
            try String(contentsOfFile: world.other.caCertificate, encoding: .utf8).write(toFile: caFile, atomically: true, encoding: .utf8)
            try world.startMock(certificate: world.other.serverCertificate, key: world.other.serverKey)
            for seed in 0..<3 {
                try connection.query("INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('shop', $1, '{\"aps\":{\"alert\":\"hi\"}}')",
                                     [DaemonHarness.token(9_100 + seed)])
            }
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 },
                    "\(daemon.text.suffix(3000))")
            #expect(world.mock.stats.accepted == 3)
            #expect(!daemon.text.contains("sending for app shop is paused"), "\(daemon.text.suffix(3000))")
            world.mock.stop()
        }
    }

    @Test func aHostNameMismatchPausesTheAppUntilSIGHUP() throws {
        try IsolatedDatabase.with { database in
            var world = try World(database: database)
            // The certificate names localhost and 127.0.0.1; pushd dials 127.0.0.2.
            try world.startMock(host: "127.0.0.2", certificate: world.harness.certificates.serverCertificate,
                                key: world.harness.certificates.serverKey)
            let config = try world.writeConfig(host: "127.0.0.2", caFile: world.harness.certificates.caCertificate, app: world.tokenApp)
            try Self.expectPauseThenResume(&world, config: config,
                                           expectedText: ["failed verification", "libcurl error 60", "127.0.0.2"]) { world in
                // The fix: a server whose certificate names the address pushd dials.
                let certificates = world.harness.certificates
                try DaemonHarness.openssl(["req", "-new", "-key", certificates.serverKey, "-subj", "/CN=127.0.0.2",
                                           "-out", world.harness.directory + "/alt.csr"])
                try "subjectAltName=IP:127.0.0.2\n".write(toFile: world.harness.directory + "/alt.ext", atomically: true, encoding: .utf8)
                try DaemonHarness.openssl(["x509", "-req", "-in", world.harness.directory + "/alt.csr", "-CA", certificates.caCertificate,
                                           "-CAkey", certificates.caKey, "-CAcreateserial", "-days", "2", "-sha256",
                                           "-extfile", world.harness.directory + "/alt.ext", "-out", world.harness.directory + "/alt.pem"])
                try world.startMock(host: "127.0.0.2", certificate: world.harness.directory + "/alt.pem", key: certificates.serverKey)
            }
            world.mock.stop()
        }
    }

    @Test func aClientCertificateTheServerRefusesPausesTheAppUntilSIGHUP() throws {
        try IsolatedDatabase.with { database in
            var world = try World(database: database)
            let certificates = world.harness.certificates
            // The server accepts client certificates of the other CA only.
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: world.other.caCertificate)
            let config = try world.writeConfig(caFile: certificates.caCertificate, app: world.certificateApp(certificates))
            try Self.expectPauseThenResume(&world, config: config,
                                           expectedText: ["client certificate was refused", "alert"]) { world in
                try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                    clientCA: certificates.caCertificate)
            }
            world.mock.stop()
        }
    }

    /// With TLS 1.2 the server checks the client's certificate inside the handshake and its
    /// alert ends the handshake (libcurl error 35 rather than 56): the same pause.
    @Test func aClientCertificateRefusedInsideATLS12HandshakePausesTheAppUntilSIGHUP() throws {
        try IsolatedDatabase.with { database in
            var world = try World(database: database)
            let certificates = world.harness.certificates
            try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                clientCA: world.other.caCertificate, maximumTLSVersion: .tls12)
            let config = try world.writeConfig(caFile: certificates.caCertificate, app: world.certificateApp(certificates))
            try Self.expectPauseThenResume(&world, config: config,
                                           expectedText: ["client certificate was refused", "alert unknown ca", "libcurl error 35"]) { world in
                try world.startMock(certificate: certificates.serverCertificate, key: certificates.serverKey,
                                    clientCA: certificates.caCertificate, maximumTLSVersion: .tls12)
            }
            world.mock.stop()
        }
    }
}
