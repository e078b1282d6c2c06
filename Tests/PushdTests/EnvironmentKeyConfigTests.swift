import Foundation
import Testing
@testable import pushd

/// Apple recommends a provider key per environment: a token app may give `<env>_token` for the
/// environment other than its own, which then signs there; `token` signs for the rest.
@Suite struct EnvironmentKeyConfigTests {
    static func tokenApp(_ files: FileFixture, extra: String, environment: String = "production") -> String {
        """
          - name: shop
            bundle_id: com.example.shop
            environment: \(environment)
            token:
              team_id: ABCDE12345
              key_id: PRODKEY123
              key_file: \(files.path("prod.p8"))
        """ + extra
    }

    @Test func aTokenAppGivesAKeyForTheOtherEnvironment() throws {
        let files = try FileFixture()
        try files.signingKey("prod.p8")
        try files.signingKey("dev.p8")
        try files.signingKey("dev-override.p8")
        let file = try CheckConfigCommandTests.writeConfig(files, apps: Self.tokenApp(files, extra: """

                sandbox_token:
                  team_id: ABCDE12345
                  key_id: DEVKEY1234
                  key_file: \(files.path("dev.p8"))
            """))
        let (config, _) = try ConfigLoader.load(file: file, environment: [:])
        let app = try #require(config.apps.first)
        #expect(app.credentials == .token(teamID: "ABCDE12345", keyID: "PRODKEY123", keyFile: files.path("prod.p8")))
        #expect(app.credentials(for: .production) == app.credentials)
        #expect(app.credentials(for: .sandbox) == .token(teamID: "ABCDE12345", keyID: "DEVKEY1234", keyFile: files.path("dev.p8")))
        #expect(app.hasCredentials(for: .sandbox))
        #expect(app.signingKeys.map(\.keyID) == ["PRODKEY123", "DEVKEY1234"])
        // The key file comes from the environment like token's: PUSHD_APP_<NAME>_<ENV>_KEY_FILE.
        let (overridden, _) = try ConfigLoader.load(file: file, environment: ["PUSHD_APP_SHOP_SANDBOX_KEY_FILE": files.path("dev-override.p8")])
        #expect(overridden.apps.first?.credentials(for: .sandbox)
                == .token(teamID: "ABCDE12345", keyID: "DEVKEY1234", keyFile: files.path("dev-override.p8")))
        #expect(overridden.apps.first?.credentials(for: .production) == app.credentials)

        // check-config checks every key, naming the setting of each.
        let run = try CheckConfigCommandTests.check(file)
        #expect(run.exitCode == 0, "\(run.output.text)")
        #expect(run.output.text.contains("signing key PRODKEY123 of team ABCDE12345 is a P-256 key"), "\(run.output.text)")
        #expect(run.output.text.contains("signing key DEVKEY1234 of team ABCDE12345 for sandbox is a P-256 key"), "\(run.output.text)")
        try files.write("dev.p8", "not a key\n")
        let broken = try CheckConfigCommandTests.check(file)
        #expect(broken.exitCode == 1)
        #expect(broken.output.output.contains { $0.hasPrefix("error: apps[0].sandbox_token.key_file: ") }, "\(broken.output.text)")
    }

    @Test(arguments: [
        ("production", "production_token:\n      team_id: ABCDE12345\n      key_id: DEVKEY1234\n      key_file: /dev.p8",
         "apps[0].production_token", "token already serves production, the app's environment"),
        ("production", "sandbox_token:\n      team_id: ABCDE12345\n      key_id: PRODKEY123\n      key_file: /dev.p8",
         "apps[0].sandbox_token", "key PRODKEY123 is token's key already"),
        ("production", "sandbox_token:\n      team_id: ABCDE12345\n      key_id: DEVKEY1234",
         "apps[0].sandbox_token.key_file", "PUSHD_APP_SHOP_SANDBOX_KEY_FILE"),
    ])
    func anEnvironmentKeyThatCannotServeIsRefused(environment: String, block: String, setting: String, expected: String) throws {
        let files = try FileFixture()
        try files.signingKey("prod.p8")
        let file = try CheckConfigCommandTests.writeConfig(files, apps: Self.tokenApp(files, extra: "\n    " + block, environment: environment))
        let run = try CheckConfigCommandTests.check(file)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains { $0.contains(setting) && $0.contains(expected) }, "\(run.output.text)")
    }

    @Test func aCertificateAppCannotGiveAnEnvironmentKey() throws {
        let files = try FileFixture()
        let app = """
              - name: shop
                bundle_id: com.example.shop
                certificate:
                  cert_file: /c.pem
                sandbox_token:
                  team_id: ABCDE12345
                  key_id: DEVKEY1234
                  key_file: /dev.p8
            """
        let file = try CheckConfigCommandTests.writeConfig(files, apps: app)
        let run = try CheckConfigCommandTests.check(file)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains {
            $0.contains("apps[0].sandbox_token") && $0.contains("a certificate app authenticates with certificates; sandbox_token is for token apps")
        }, "\(run.output.text)")
    }

    /// A key of one environment is fixed while running, like `token`'s: adding, removing or
    /// changing its key id waits for a restart; a new file of the same key is reloaded.
    @Test func anEnvironmentKeysIdChangeNeedsARestart() {
        let app = PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .production,
                                  credentials: .token(teamID: "ABCDE12345", keyID: "PRODKEY123", keyFile: "/prod.p8"), campaignRate: nil)
        var running = PushdConfig(databaseURL: "postgresql://pushd@127.0.0.1/pushd", apps: [app])
        var loaded = running
        loaded.apps[0].environmentKeys[.sandbox] = .token(teamID: "ABCDE12345", keyID: "DEVKEY1234", keyFile: "/dev.p8")
        #expect(ConfigChanges.needingRestart(running: running, loaded: loaded) == ["apps[shop].sandbox_token"])
        running = loaded
        loaded.apps[0].environmentKeys[.sandbox] = .token(teamID: "ABCDE12345", keyID: "DEVKEY1234", keyFile: "/dev-new.p8")
        #expect(ConfigChanges.needingRestart(running: running, loaded: loaded).isEmpty)
        loaded.apps[0].environmentKeys[.sandbox] = .token(teamID: "ABCDE12345", keyID: "DEVKEY9999", keyFile: "/dev.p8")
        #expect(ConfigChanges.needingRestart(running: running, loaded: loaded) == ["apps[shop].sandbox_token.key_id"])
    }
}
