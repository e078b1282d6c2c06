import APNs
import APNsMock
@testable import Dispatcher
import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd send` against an in-process apns-mock over TLS HTTP/2 on 127.0.0.1.
@Suite struct SendCommandTests {
    /// One throwaway CA with server and client certificates for the whole test process.
    static let certificateDirectory = NSTemporaryDirectory() + "pushd-send-tests-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"

    static let certificates: Result<GeneratedCertificates, MockServerError> = {
        // Keys and certificates live only as long as the test process.
        atexit { try? FileManager.default.removeItem(atPath: SendCommandTests.certificateDirectory) }
        do throws(MockServerError) {
            return .success(try CertificateGenerator.generate(into: certificateDirectory))
        } catch {
            return .failure(error)
        }
    }()

    static let token = String(repeating: "ab", count: 32)

    /// A signing key the mock trusts (or not), and a configuration pointing at the mock.
    struct Setup {
        let files: FileFixture
        var config = ""
        var keyID = "KEY1234567"
        var teamID = "TEAM123456"

        init() throws { files = try FileFixture() }

        func providerKey() throws -> ProviderKey {
            try files.openssl(["pkey", "-in", "shop.p8", "-pubout", "-out", "shop.pub"])
            return ProviderKey(keyID: keyID, teamID: teamID,
                               publicKeyPEM: try String(contentsOfFile: files.path("shop.pub"), encoding: .utf8))
        }

        /// Writes the configuration; `credentials` replaces the token block.
        mutating func writeConfig(port: UInt16, credentials: String? = nil, extraApp: Bool = false) throws {
            let certificates = try SendCommandTests.certificates.get()
            let auth = credentials ?? """
                    token:
                      team_id: \(teamID)
                      key_id: \(keyID)
                      key_file: \(files.path("shop.p8"))
                """
            config = try files.write("pushd.yml", """
                database:
                  url: postgresql://pushd@127.0.0.1:1/unused
                apns:
                  host: 127.0.0.1:\(port)
                  ca_file: \(certificates.caCertificate)
                  connect_timeout_ms: 2000
                  request_timeout_ms: 5000
                apps:
                  - name: shop
                    bundle_id: com.example.shop
                    environment: sandbox
                \(auth)
                """ + (extraApp ? "\n  - name: news\n    bundle_id: com.example.news\n    certificate:\n      p12_file: /none.p12\n" : ""))
        }
    }

    /// Starts a mock trusting `setup`'s key, runs `body`, stops the mock.
    static func withMock<T>(_ setup: inout Setup, faults: FaultConfiguration = .none, trustKey: Bool = true, development: Bool = false,
                            _ body: (APNsMockServer, Setup) throws -> T) throws -> T {
        let certificates = try Self.certificates.get()
        try setup.files.signingKey("shop.p8")
        var configuration = MockConfiguration(certificateChainFile: certificates.serverCertificate, privateKeyFile: certificates.serverKey)
        var trusted = try setup.providerKey()
        if !trustKey {
            try setup.files.signingKey("other.p8")
            try setup.files.openssl(["pkey", "-in", "other.p8", "-pubout", "-out", "other.pub"])
            trusted.publicKeyPEM = try String(contentsOfFile: setup.files.path("other.pub"), encoding: .utf8)
        }
        configuration.authentication = .token(keys: [trusted], startAtOneStream: true)
        configuration.allowedBundleIDs = ["com.example.shop"]
        configuration.logsAccepted = true
        configuration.faults = faults
        configuration.development = development
        let server = try APNsMockServer(configuration: configuration)
        let port = try server.start()
        defer { server.stop() }
        try setup.writeConfig(port: port)
        return try body(server, setup)
    }

    static func send(_ setup: Setup, _ arguments: [String], input: String = "") throws -> CommandRun {
        try CommandRun(["send", "--config", setup.config] + arguments) { parsed, context in
            try SendCommand.run(parsed, context, standardInput: { Array(input.utf8) })
        }
    }

    /// SHA-256 of `bytes` in lowercase hex, as the mock records accepted payloads.
    static func sha256(_ bytes: [UInt8], _ files: FileFixture) throws -> String {
        let name = "digest-\(UUID().uuidString)"
        try Data(bytes).write(to: URL(fileURLWithPath: files.path(name)))
        try files.openssl(["dgst", "-sha256", "-r", "-out", name + ".txt", name])
        return String(try String(contentsOfFile: files.path(name + ".txt"), encoding: .utf8).prefix(64))
    }

    // MARK: Delivery

    /// APNs answers TooManyProviderTokenUpdates to a team whose tokens are made more often than
    /// every 20 minutes, across connections. `send` uses the token the instances share in
    /// `pushd.provider_tokens`: the first run mints and shares one, the next adopts it, and a
    /// token an instance shared is adopted, never replaced. It minted a token of its own on every
    /// run, shared with nobody. Without the database it still sends, and says what it did.
    @Test func sendUsesTheProviderTokenTheInstancesShare() throws {
        try IsolatedDatabase.with { database in
            var setup = try Setup()
            try Self.withMock(&setup) { server, setup in
                let config = try String(contentsOfFile: setup.config, encoding: .utf8)
                try config.replacingOccurrences(of: "postgresql://pushd@127.0.0.1:1/unused", with: database.url)
                    .write(toFile: setup.config, atomically: true, encoding: .utf8)
                let connection = try database.connect()
                defer { connection.close() }
                let stored = "SELECT token || ' ' || issued_at::text || ' ' || minted_by FROM pushd.provider_tokens WHERE key_id = $1 AND team_id = $2"
                func row() throws -> String? {
                    try connection.query(stored, [setup.keyID, setup.teamID]).rows.first.map { try $0.require(0, as: String.self) }
                }

                let first = try Self.send(setup, ["--token", Self.token, "--alert", "one"])
                #expect(first.exitCode == 0, "\(first.output.text)\n\(first.output.errorText)")
                #expect(first.output.errorText.isEmpty, "\(first.output.errorText)")
                let shared = try #require(try row(), "send shared no token")
                #expect(shared.hasSuffix(" (command)"), "\(shared)")
                let second = try Self.send(setup, ["--token", Self.token, "--alert", "two"])
                #expect(second.exitCode == 0, "\(second.output.text)\n\(second.output.errorText)")
                #expect(try row() == shared)

                // A token an instance shared is adopted as it is.
                let key = try SigningKey(contentsOfFile: setup.files.path("shop.p8"), keyID: setup.keyID, teamID: setup.teamID)
                let issuedAt = Int64(Timestamp().timeIntervalSince1970) - 120
                let fleets = try ProviderTokenSigner(key: key).makeToken(issuedAt: issuedAt).jwt
                try connection.query("UPDATE pushd.provider_tokens SET token = $1, issued_at = to_timestamp($2), minted_by = 'host/1-000001'",
                                     [fleets, String(issuedAt)])
                let adopted = try #require(try row())
                let third = try Self.send(setup, ["--token", Self.token, "--alert", "three"])
                #expect(third.exitCode == 0, "\(third.output.text)\n\(third.output.errorText)")
                #expect(try row() == adopted)
                #expect(third.output.errorText.isEmpty, "\(third.output.errorText)")

                // A token another key file signed (a wrong .p8 under the same key id, on one side
                // or the other) is left to the instances: the command signs its own, says so,
                // and does not replace theirs.
                try setup.files.signingKey("other.p8")
                let otherKey = try SigningKey(contentsOfFile: setup.files.path("other.p8"), keyID: setup.keyID, teamID: setup.teamID)
                let foreign = try ProviderTokenSigner(key: otherKey).makeToken(issuedAt: issuedAt).jwt
                try connection.query("UPDATE pushd.provider_tokens SET token = $1", [foreign])
                let theirs = try #require(try row())
                let fourth = try Self.send(setup, ["--token", Self.token, "--alert", "four"])
                #expect(fourth.exitCode == 0, "\(fourth.output.text)\n\(fourth.output.errorText)")
                #expect(try row() == theirs)
                #expect(fourth.output.errorText.contains("is not signed by \(setup.files.path("shop.p8"))"), "\(fourth.output.errorText)")
                // Nor when its own issue time is too old to adopt while its row looks fresh.
                let staleForeign = try ProviderTokenSigner(key: otherKey).makeToken(issuedAt: issuedAt - 3_300).jwt
                try connection.query("UPDATE pushd.provider_tokens SET token = $1, issued_at = now()", [staleForeign])
                let stale = try #require(try row())
                let fifth = try Self.send(setup, ["--token", Self.token, "--alert", "five"])
                #expect(fifth.exitCode == 0, "\(fifth.output.text)\n\(fifth.output.errorText)")
                #expect(try row() == stale)
                #expect(server.acceptedLog.count == 5)
            }
        }
        // No database: a token of its own, and a warning that says so.
        var setup = try Setup()
        try Self.withMock(&setup) { server, setup in
            let run = try Self.send(setup, ["--token", Self.token, "--alert", "alone"])
            #expect(run.exitCode == 0, "\(run.output.text)\n\(run.output.errorText)")
            #expect(run.output.errorText.contains("could not be read"), "\(run.output.errorText)")
            #expect(run.output.errorText.contains("TooManyProviderTokenUpdates"), "\(run.output.errorText)")
            #expect(server.acceptedLog.count == 1)
        }
    }

    @Test func anAlertBuiltFromFlagsIsAcceptedAndItsIDPrinted() throws {
        var setup = try Setup()
        try Self.withMock(&setup) { server, setup in
            let run = try Self.send(setup, ["--token", Self.token, "--title", "Hi", "--alert", "Hello", "--badge", "3", "--sound", "default"])
            #expect(run.exitCode == 0, "\(run.output.text)\n\(run.output.errorText)")
            let lines = run.output.output
            #expect(lines.first == "POST https://127.0.0.1:\(server.port)/3/device/abababab… (app shop, topic com.example.shop, alert, 75 bytes)")
            // The whole token appears nowhere in what send prints.
            #expect(!run.output.text.contains(Self.token) && !run.output.errorText.contains(Self.token))
            #expect(lines.last?.hasPrefix("200 accepted: apns-id ") == true)
            let accepted = server.acceptedLog
            #expect(accepted.count == 1)
            #expect(accepted.first?.token == Self.token)
            #expect(accepted.first?.topic == "com.example.shop")
            #expect(lines.last?.contains(accepted.first?.apnsID ?? "missing") == true)
            let expected = Array(#"{"aps":{"alert":{"title":"Hi","body":"Hello"},"badge":3,"sound":"default"}}"#.utf8)
            #expect(accepted.first?.payloadSHA256 == (try Self.sha256(expected, setup.files)))
        }
    }

    @Test func theDevelopmentServersUniqueIDIsPrintedAndProductionsAbsenceIsNot() throws {
        for development in [true, false] {
            var setup = try Setup()
            try Self.withMock(&setup, development: development) { _, setup in
                let run = try Self.send(setup, ["--token", Self.token, "--alert", "Hello"])
                #expect(run.exitCode == 0, "\(run.output.text)\n\(run.output.errorText)")
                let last = run.output.output.last ?? ""
                #expect(last.hasPrefix("200 accepted: apns-id "), "\(last)")
                #expect(last.contains(" apns-unique-id ") == development, "\(last)")
            }
        }
    }

    @Test func aPayloadFileIsSentByteForByteWithTheGivenHeaders() throws {
        var setup = try Setup()
        try Self.withMock(&setup) { server, setup in
            let payload = "{ \"aps\" : { \"alert\" : \"spaced out\" }, \"order\": 1042 }\n"
            let file = try setup.files.write("payload.json", payload)
            let id = "123e4567-e89b-12d3-a456-426614174000"
            let run = try Self.send(setup, ["--token", Self.token, "--payload-file", file, "--priority", "5",
                                            "--collapse-id", "order-1042", "--expiration", "0", "--apns-id", id.uppercased()])
            #expect(run.exitCode == 0, "\(run.output.text)\n\(run.output.errorText)")
            #expect(run.output.output.last?.hasPrefix("200 accepted: apns-id \(id) (") == true)
            #expect(server.acceptedLog.first?.payloadSHA256 == (try Self.sha256(Array(payload.utf8), setup.files)))
        }
    }

    @Test func aPayloadFromStandardInputMakesABackgroundPushWhenItOnlyWakesTheApp() throws {
        var setup = try Setup()
        try Self.withMock(&setup) { server, setup in
            let run = try Self.send(setup, ["--token", Self.token, "--payload-file", "-"], input: #"{"aps":{"content-available":1}}"#)
            #expect(run.exitCode == 0, "\(run.output.text)\n\(run.output.errorText)")
            #expect(run.output.output.first?.contains("topic com.example.shop, background,") == true)
            #expect(server.stats.accepted == 1)
        }
    }

    @Test(arguments: [
        ("bad", "400 BadDeviceToken:", "the device token is not valid for the sandbox host: a token of the other environment (a development build's tokens work only with sandbox, an App Store or TestFlight build's only with production), or not a device token of the app at all; an App Store or TestFlight build's token needs --environment production; not recorded by this command"),
        ("gone", "410 Unregistered:", "the device token is not valid for this app since 2026-"),
        ("topic", "400 DeviceTokenNotForTopic:", "the device token is not valid for this app"),
    ])
    func aRefusedTokenPrintsTheReasonAndExitsOne(fault: String, status: String, explanation: String) throws {
        var setup = try Setup()
        let faults = switch fault {
        case "bad": FaultConfiguration(badDeviceTokens: [Self.token])
        case "gone": FaultConfiguration(unregisteredTokens: [Self.token: 1_795_000_000_000])
        default: FaultConfiguration(tokensNotForTopic: [Self.token])
        }
        try Self.withMock(&setup, faults: faults) { server, setup in
            let run = try Self.send(setup, ["--token", Self.token, "--alert", "Hello"])
            #expect(run.exitCode == 1)
            let lines = run.output.output
            #expect(lines.dropFirst().first?.hasPrefix(status) == true, "\(lines)")
            #expect(lines.last?.hasPrefix("  " + explanation) == true, "\(lines)")
            #expect(server.stats.accepted == 0)
        }
    }

    @Test func aKeyTheServerDoesNotTrustIsReportedAsACredentialsProblem() throws {
        var setup = try Setup()
        try Self.withMock(&setup, trustKey: false) { _, setup in
            let run = try Self.send(setup, ["--token", Self.token, "--alert", "Hello"])
            #expect(run.exitCode == 1)
            #expect(run.output.output.dropFirst().first?.hasPrefix("403 InvalidProviderToken:") == true, "\(run.output.text)")
            #expect(run.output.output.last?.contains("the app's credentials or environment were refused (InvalidProviderToken)") == true)
        }
    }

    @Test func certificateAuthenticationSendsWithTheClientCertificate() throws {
        let certificates = try Self.certificates.get()
        var configuration = MockConfiguration(certificateChainFile: certificates.serverCertificate, privateKeyFile: certificates.serverKey)
        configuration.authentication = .certificate(clientCAFile: certificates.caCertificate)
        configuration.logsAccepted = true
        let server = try APNsMockServer(configuration: configuration)
        let port = try server.start()
        defer { server.stop() }
        var setup = try Setup()
        try setup.writeConfig(port: port, credentials: """
                certificate:
                  cert_file: \(certificates.clientCertificate)
                  key_file: \(certificates.clientKey)
            """)
        let run = try Self.send(setup, ["--token", Self.token, "--alert", "Hello"])
        #expect(run.exitCode == 0, "\(run.output.text)\n\(run.output.errorText)")
        #expect(server.acceptedLog.count == 1)
    }

    @Test func anUnreachableHostIsATransportFailure() throws {
        var setup = try Setup()
        try setup.files.signingKey("shop.p8")
        try setup.writeConfig(port: 1)
        let run = try Self.send(setup, ["--token", Self.token, "--alert", "Hello"])
        #expect(run.exitCode == 1)
        #expect(run.output.output.last?.hasPrefix("not sent: transport error") == true, "\(run.output.text)")
    }

    // MARK: Checks before sending

    @Test(arguments: [
        (["--push-type", "background", "--alert", "x"], "aps.alert: background pushes must not carry \"alert\"; send an alert push instead [background-user-visible]"),
        (["--alert", "x", "--collapse-id", String(repeating: "c", count: 65)], "apns-collapse-id: 65 bytes; at most 64 are allowed [collapse-id-too-long]"),
        (["--push-type", "voip", "--alert", "x", "--topic", "com.example.shop"], "[topic-suffix]"),
        (["--payload", "[1]"], "[payload-not-json-object]"),
        (["--payload", "{\"aps\":{\"alert\":\"" + String(repeating: "x", count: 4100) + "\"}}"], "[payload-too-large]"),
        (["--payload", #"{"aps":{"badge":"many"}}"#], "aps.badge"),
    ])
    func aNotificationAPNsWouldRefuseIsNotSent(arguments: [String], expected: String) throws {
        var setup = try Setup()
        try setup.files.signingKey("shop.p8")
        try setup.writeConfig(port: 1)
        let run = try Self.send(setup, ["--token", Self.token] + arguments)
        #expect(run.exitCode == 1)
        #expect(run.output.errorText.hasPrefix("the notification breaks APNs rules, nothing was sent:"))
        #expect(run.output.errorText.contains(expected), "\(run.output.errorText)")
        #expect(run.output.output.isEmpty)
    }

    @Test(arguments: [
        ([String](), "send needs --token HEX"),
        (["--token", "xyz", "--alert", "x"], "--token: "),
        (["--token", String(repeating: "ab", count: 32)], "nothing to send: give --alert TEXT"),
        (["--token", String(repeating: "ab", count: 32), "--alert", "x", "--payload", "{}"], "--alert builds a payload; it cannot be combined with --payload"),
        (["--token", String(repeating: "ab", count: 32), "--alert", "x", "--app", "ghost"], "--app 'ghost' is not an app of the configuration (apps: shop)"),
        (["--token", String(repeating: "ab", count: 32), "--alert", "x", "--badge", "-1"], "--badge '-1' must be a whole number"),
        (["--token", String(repeating: "ab", count: 32), "--alert", "x", "--priority", "7"], "--priority '7' is not an APNs priority"),
        (["--token", String(repeating: "ab", count: 32), "--alert", "x", "--apns-id", "nope"], "--apns-id 'nope' is not a UUID"),
        (["--token", String(repeating: "ab", count: 32), "--alert", "x", "--expiration", "soon"], "--expiration 'soon' must be seconds since the epoch"),
        (["--token", String(repeating: "ab", count: 32), "--alert", "x", "--expiration", "1700000000"], "--expiration 1700000000 has passed ("),
    ])
    func wrongFlagsAreExplained(arguments: [String], expected: String) throws {
        var setup = try Setup()
        try setup.files.signingKey("shop.p8")
        try setup.writeConfig(port: 1)
        let run = try Self.send(setup, arguments)
        #expect(run.exitCode == 1)
        #expect(run.output.errorText.contains(expected), "\(run.output.errorText)")
    }

    @Test func severalAppsNeedAppToChoose() throws {
        var setup = try Setup()
        try setup.files.signingKey("shop.p8")
        try setup.writeConfig(port: 1, extraApp: true)
        let run = try Self.send(setup, ["--token", Self.token, "--alert", "x"])
        #expect(run.output.errorText.contains("send needs --app NAME: the configuration has several apps (shop, news)"))
    }

    @Test func aDryRunShowsTheRequestWithoutTheTokenAndSendsNothing() throws {
        var setup = try Setup()
        try Self.withMock(&setup) { server, setup in
            let run = try Self.send(setup, ["--token", Self.token, "--alert", "Hello", "--dry-run"])
            #expect(run.exitCode == 0)
            #expect(run.output.output.dropFirst().prefix(4) == [
                "  authorization: bearer <ES256 token of key KEY1234567, team TEAM123456>",
                "  apns-push-type: alert",
                "  apns-topic: com.example.shop",
                #"  {"aps":{"alert":"Hello"}}"#,
            ])
            #expect(run.output.output.last == "dry run: nothing was sent")
            #expect(server.stats.connectionsAccepted == 0)
        }
    }

    @Test func theEnvironmentFlagPicksApplesOtherHost() throws {
        let setup = try Setup()
        try setup.files.signingKey("shop.p8")
        let config = try setup.files.write("pushd.yml", """
            database:
              url: postgresql://pushd@127.0.0.1:1/unused
            apps:
              - name: shop
                bundle_id: com.example.shop
                environment: sandbox
                token: {team_id: TEAM123456, key_id: KEY1234567, key_file: \(setup.files.path("shop.p8"))}
            """)
        for (flag, host) in [([String](), "api.sandbox.push.apple.com"), (["--environment", "production"], "api.push.apple.com")] {
            let run = try CommandRun(["send", "--config", config, "--token", Self.token, "--alert", "x", "--dry-run"] + flag) { try SendCommand.run($0, $1) }
            #expect(run.output.output.first?.hasPrefix("POST https://\(host)/3/device/") == true, "\(run.output.text)")
        }
        let wrong = try CommandRun(["send", "--config", config, "--token", Self.token, "--alert", "x", "--environment", "dev"]) { try SendCommand.run($0, $1) }
        #expect(wrong.exitCode == 1)
        #expect(wrong.output.errorText.contains("--environment 'dev' is not one of: production, sandbox"))
    }

    @Test func theBinarySendsAndExitsZeroOnlyWhenAccepted() throws {
        var setup = try Setup()
        try Self.withMock(&setup, faults: FaultConfiguration(badDeviceTokens: [String(repeating: "cd", count: 32)])) { server, setup in
            let accepted = try PushdBinary.run(["send", "--config", setup.config, "--token", Self.token, "--alert", "Hello"])
            #expect(accepted.status == 0, "\(accepted.output)\(accepted.errors)")
            #expect(accepted.output.contains("200 accepted: apns-id "))
            let refused = try PushdBinary.run(["send", "--config", setup.config, "--token", String(repeating: "cd", count: 32), "--alert", "Hello"])
            #expect(refused.status == 1)
            #expect(refused.output.contains("400 BadDeviceToken"))
            let invalid = try PushdBinary.run(["send", "--config", setup.config, "--token", Self.token, "--push-type", "background", "--alert", "x"])
            #expect(invalid.status == 1)
            #expect(invalid.errors.contains("[background-user-visible]"))
            let usage = try PushdBinary.run(["send", "--bogus"])
            #expect(usage.status == 2)
            let help = try PushdBinary.run(["send", "--help"])
            #expect(help.status == 0)
            #expect(help.output.hasPrefix("usage: pushd send [options]"))
            #expect(server.stats.accepted == 1)
        }
    }
}

/// `send` refuses what `run` refuses for the app, its authentication kind included.
@Suite struct SendRefusesWhatRunRefusesTests {
    @Test func aCertificateAppCannotSendALocationPush() throws {
        let files = try FileFixture()
        try files.certificate("shop")
        let config = try files.write("pushd.yml", """
            database:
              url: postgresql://pushd@127.0.0.1:1/none
            apps:
              - name: shop
                bundle_id: com.example.shop
                certificate:
                  cert_file: \(files.path("shop.crt"))
                  key_file: \(files.path("shop.key"))
            """)
        let run = try CommandRun(["send", "--config", config, "--token", String(repeating: "ab", count: 32),
                                  "--push-type", "location", "--payload", "{}", "--dry-run"]) { try SendCommand.run($0, $1) }
        #expect(run.exitCode == 1)
        #expect(run.output.errorText.contains("[token-authentication-required]"), "\(run.output.errorText)")
    }

    /// One Forbidden answer is about the notification: `send` says it is not sent again, and
    /// how `run` tells refused credentials, instead of calling the credentials refused.
    @Test func aForbiddenAnswerIsExplainedAsNotAllowedNotAsRefusedCredentials() throws {
        let result = DispatchResult(tag: 1, outcome: .response(Response(status: 403, apnsID: nil, body: Array(#"{"reason":"Forbidden"}"#.utf8))),
                                    latencyNanoseconds: 2_000_000, attempts: 1)
        let (lines, code) = SendCommand.describe(result)
        #expect(code == 1)
        #expect(lines == ["403 Forbidden: (2 ms)",
                          "  APNs answered 403 Forbidden: the action is not allowed; not retried; pushd run fails such a notification, and holds the app's sending to that environment (its jobs kept, the other environment going on) when apns.forbidden_limit of them in a row there, none accepted, point at its credentials for it"],
                "\(lines)")
    }

    @Test func theDevelopmentEnvironmentsUniqueIDIsPrintedBesideTheApnsID() throws {
        let apnsID = try #require(APNsID("6c9a1c1e-3a5b-4c47-8f2e-1b2c3d4e5f60"))
        let uniqueID = try #require(APNsID("0b1e7f6c-6f0a-4d1e-9c54-4a1c2b3d4e5f"))
        let result = DispatchResult(tag: 1, outcome: .response(Response(status: 200, apnsID: apnsID, body: [], uniqueID: uniqueID)),
                                    latencyNanoseconds: 2_000_000, attempts: 1)
        let (lines, code) = SendCommand.describe(result)
        #expect(code == 0)
        #expect(lines == ["200 accepted: apns-id 6c9a1c1e-3a5b-4c47-8f2e-1b2c3d4e5f60 apns-unique-id 0b1e7f6c-6f0a-4d1e-9c54-4a1c2b3d4e5f (2 ms)"])
    }
}
