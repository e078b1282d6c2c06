import APNs
import Dispatcher
import Testing
@testable import pushd

/// A credential answer about a key the app uses for one environment only holds that
/// environment; with one key for both, the app is paused (`PipelineContext.holdsEnvironment`).
@Suite struct EnvironmentKeyHoldDecisionTests {
    static let sandboxKey = ProviderTokenService.Key(keyID: "DEVKEY1234", teamID: "TEAM123456")
    static let productionKey = ProviderTokenService.Key(keyID: "PRODKEY123", teamID: "TEAM123456")

    @Test(arguments: ["InvalidProviderToken", "BadEnvironmentKeyInToken", "MissingProviderToken"])
    func aTokenAnswerAboutTheEnvironmentsOwnKeyHoldsTheEnvironment(reason: String) {
        #expect(PipelineContext.holdsEnvironment(reason: reason, environmentKey: Self.sandboxKey, carried: (Self.sandboxKey, true)))
        // A request that carried no token went out for that environment's key.
        #expect(PipelineContext.holdsEnvironment(reason: reason, environmentKey: Self.sandboxKey, carried: nil))
    }

    @Test(arguments: ["InvalidProviderToken", "BadEnvironmentKeyInToken", "MissingProviderToken"])
    func oneKeyForBothEnvironmentsPausesTheApp(reason: String) {
        #expect(!PipelineContext.holdsEnvironment(reason: reason, environmentKey: nil, carried: (Self.productionKey, true)))
        #expect(!PipelineContext.holdsEnvironment(reason: reason, environmentKey: nil, carried: nil))
    }

    @Test func aTokenOfAnotherKeyThanTheEnvironmentsPausesTheApp() {
        #expect(!PipelineContext.holdsEnvironment(reason: "InvalidProviderToken", environmentKey: Self.sandboxKey,
                                                  carried: (Self.productionKey, true)))
    }

    /// `pause` sends such a notification again with the key signing now.
    @Test func invalidProviderTokenToAKeyReplacedSinceIsLeftToThePause() {
        #expect(!PipelineContext.holdsEnvironment(reason: "InvalidProviderToken", environmentKey: Self.sandboxKey,
                                                  carried: (Self.sandboxKey, false)))
        #expect(PipelineContext.holdsEnvironment(reason: "BadEnvironmentKeyInToken", environmentKey: Self.sandboxKey,
                                                 carried: (Self.sandboxKey, false)))
    }

    @Test(arguments: ["BadCertificate", "BadCertificateEnvironment", "UnrelatedKeyIdInToken", "Forbidden", "HTTP 403"])
    func otherCredentialAnswersPauseTheApp(reason: String) {
        #expect(!PipelineContext.holdsEnvironment(reason: reason, environmentKey: Self.sandboxKey, carried: (Self.sandboxKey, true)))
    }

    @Test func theEnvironmentScopeNamesEveryReasonItHoldsFor() {
        #expect(ConfigurationScope.environment.reasons == [.badEnvironmentKeyIdInToken, .invalidProviderToken,
                                                           .badEnvironmentKeyInToken, .missingProviderToken, .forbidden,
                                                           .badCertificate, .badCertificateEnvironment])
        #expect(AppSender.holdReasons.contains(.invalidProviderToken))
        #expect(AppSender.holdReasons.contains(.forbidden))
    }
}

/// `pushd send` says what `pushd run` does with such an answer.
@Suite struct SendEnvironmentKeyHintTests {
    @Test func aKeyOfTheEnvironmentsOwnIsNamedWithTheHold() throws {
        let files = try FileFixture()
        try files.signingKey("prod.p8")
        try files.signingKey("dev.p8")
        let file = try CheckConfigCommandTests.writeConfig(files, apps: EnvironmentKeyConfigTests.tokenApp(files, extra: """

                sandbox_token:
                  team_id: ABCDE12345
                  key_id: DEVKEY1234
                  key_file: \(files.path("dev.p8"))
            """))
        let app = try #require(try ConfigLoader.load(file: file, environment: [:]).0.apps.first)
        #expect(SendCommand.environmentKeyHint(app, environment: .sandbox, reason: "InvalidProviderToken")
                == "the key DEVKEY1234 signs for sandbox only: pushd run holds the app's notifications to sandbox and keeps sending to production; check sandbox_token")
        #expect(SendCommand.environmentKeyHint(app, environment: .sandbox, reason: "BadCertificate") == nil)

        let shared = try CheckConfigCommandTests.writeConfig(files, apps: EnvironmentKeyConfigTests.tokenApp(files, extra: ""))
        let sharedApp = try #require(try ConfigLoader.load(file: shared, environment: [:]).0.apps.first)
        #expect(SendCommand.environmentKeyHint(sharedApp, environment: .sandbox, reason: "InvalidProviderToken") == nil)
    }

    /// A certificate app presents a certificate per environment (APNs issues one per
    /// environment): an answer refusing the one of an environment holds that environment, and
    /// the other keeps sending. It paused the app, both environments, at every refusal.
    @Test func aRefusedCertificateOfAnAppWithOnePerEnvironmentHoldsOnlyItsEnvironment() {
        let certificate = PushdConfig.Credentials.certificate(certificateFile: "/etc/pushd/shop.crt", keyFile: "/etc/pushd/shop.key",
                                                              pkcs12File: nil, password: nil)
        let sandbox = PushdConfig.Credentials.certificate(certificateFile: "/etc/pushd/shop-dev.crt", keyFile: "/etc/pushd/shop-dev.key",
                                                          pkcs12File: nil, password: nil)
        var app = PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .production, credentials: certificate)
        let refusal = TransportFailureKind.clientCertificateRefused.explanation + " (libcurl error 56: tlsv13 alert certificate required)"
        // One certificate: the app is paused, as before.
        #expect(PipelineContext.certificateEnvironmentHold(reason: "BadCertificate", app: app, .production) == nil)
        app.otherCertificates[.sandbox] = sandbox
        for (reason, held) in [("BadCertificate", "BadCertificate"), ("BadCertificateEnvironment", "BadCertificateEnvironment"), (refusal, "BadCertificate")] {
            for environment in PushdConfig.Environment.allCases {
                guard case .hold(.environment, let heldReason, let why)? = PipelineContext.certificateEnvironmentHold(reason: reason, app: app, environment) else {
                    Issue.record("\(reason) in \(environment) does not hold the environment"); continue
                }
                #expect(heldReason == held)
                #expect(why.contains("presents in \(environment.rawValue) was refused or could not be used (\(reason))"), "\(why)")
                #expect(why.contains(environment == .production ? "check certificate (" : "check sandbox_certificate ("), "\(why)")
            }
        }
        // Not a certificate answer; a token app.
        #expect(PipelineContext.certificateEnvironmentHold(reason: "InvalidProviderToken", app: app, .sandbox) == nil)
        let tokenApp = PushdConfig.App(name: "blog", bundleID: "com.example.blog", environment: .production,
                                       credentials: .token(teamID: "TEAM123456", keyID: "KEY1234567", keyFile: "/k.p8"))
        #expect(PipelineContext.certificateEnvironmentHold(reason: "BadCertificate", app: tokenApp, .production) == nil)
    }
}
