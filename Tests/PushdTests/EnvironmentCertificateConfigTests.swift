import Foundation
import Testing
@testable import pushd

/// A certificate is issued for one environment: a certificate app may name one for the other
/// environment, checked like its main one; a token app needs none.
@Suite struct EnvironmentCertificateConfigTests {
    @Test func aCertificateAppNamesACertificatePerEnvironment() throws {
        let files = try FileFixture()
        try files.certificate("prod")
        try files.certificate("dev")
        let app = CheckConfigCommandTests.certificateApp("shop", """
            cert_file: \(files.path("prod.crt"))
            key_file: \(files.path("prod.key"))
            """) + """

                sandbox_certificate:
                  cert_file: \(files.path("dev.crt"))
                  key_file: \(files.path("dev.key"))
            """
        let file = try CheckConfigCommandTests.writeConfig(files, apps: app)
        let (config, _) = try ConfigLoader.load(file: file, environment: [:])
        let loaded = try #require(config.apps.first)
        #expect(loaded.environment == .production)
        #expect(loaded.credentials(for: .production) == .certificate(certificateFile: files.path("prod.crt"), keyFile: files.path("prod.key"),
                                                                     pkcs12File: nil, password: nil))
        #expect(loaded.credentials(for: .sandbox) == .certificate(certificateFile: files.path("dev.crt"), keyFile: files.path("dev.key"),
                                                                  pkcs12File: nil, password: nil))
        // check-config reads the second certificate too, naming its setting.
        try files.write("dev.crt", "not a certificate\n")
        let run = try CheckConfigCommandTests.check(file)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains { $0.hasPrefix("error: apps[0].sandbox_certificate.cert_file: ") }, "\(run.output.text)")
    }

    @Test func withoutASecondCertificateTheOtherEnvironmentHasNoCredentials() throws {
        let app = PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .sandbox,
                                  credentials: .certificate(certificateFile: "/c.pem", keyFile: nil, pkcs12File: nil, password: nil),
                                  campaignRate: nil)
        #expect(app.credentials(for: .sandbox) != nil)
        #expect(app.credentials(for: .production) == nil)
        let token = PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .sandbox,
                                    credentials: .token(teamID: "ABCDE12345", keyID: "KEY1234567", keyFile: "/k.p8"), campaignRate: nil)
        #expect(token.credentials(for: .production) == token.credentials)
    }

    /// The campaign's per-target check answers as `credentials(for:)` does, for every kind of app.
    @Test func hasCredentialsAgreesWithTheCredentialsFound() {
        let certificate = PushdConfig.Credentials.certificate(certificateFile: "/c.pem", keyFile: nil, pkcs12File: nil, password: nil)
        var second = PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .production,
                                     credentials: certificate, campaignRate: nil)
        second.otherCertificates[.sandbox] = certificate
        let apps = [
            PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .sandbox, credentials: certificate, campaignRate: nil),
            PushdConfig.App(name: "shop", bundleID: "com.example.shop", environment: .production,
                            credentials: .token(teamID: "ABCDE12345", keyID: "KEY1234567", keyFile: "/k.p8"), campaignRate: nil),
            second,
        ]
        for app in apps {
            for environment in PushdConfig.Environment.allCases {
                #expect(app.hasCredentials(for: environment) == (app.credentials(for: environment) != nil), "\(app.credentials) \(environment)")
            }
        }
    }

    @Test(arguments: [
        ("token", "sandbox_certificate", "a token app serves both environments with its key"),
        ("certificate", "production_certificate", "certificate already serves production, the app's environment"),
    ])
    func aSecondCertificateThatCannotServeIsRefused(kind: String, key: String, expected: String) throws {
        let files = try FileFixture()
        try files.signingKey("shop.p8")
        let credentials = kind == "token"
            ? "token:\n      team_id: ABCDE12345\n      key_id: KEY1234567\n      key_file: \(files.path("shop.p8"))"
            : "certificate:\n      cert_file: /c.pem"
        let app = """
              - name: shop
                bundle_id: com.example.shop
                \(credentials)
                \(key):
                  cert_file: /other.pem
            """
        let file = try CheckConfigCommandTests.writeConfig(files, apps: app)
        let run = try CheckConfigCommandTests.check(file)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains { $0.contains("apps[0].\(key)") && $0.contains(expected) }, "\(run.output.text)")
    }

    @Test func aDevelopmentCertificateConfiguredForProductionIsAnError() throws {
        let files = try FileFixture()
        // Apple marks a development push certificate with this extension.
        try files.openssl(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                           "-keyout", "dev.key", "-out", "dev.crt", "-subj", "/UID=com.example.shop/CN=dev", "-days", "365",
                           "-addext", "1.2.840.113635.100.6.3.1=DER:0500"])
        try files.chmod("dev.key", 0o600)
        let app = """
              - name: shop
                bundle_id: com.example.shop
                environment: production
                certificate:
                  cert_file: \(files.path("dev.crt"))
                  key_file: \(files.path("dev.key"))
            """
        let run = try CheckConfigCommandTests.check(try CheckConfigCommandTests.writeConfig(files, apps: app))
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains {
            $0.hasPrefix("error: apps[0].certificate.cert_file: the certificate in \(files.path("dev.crt")) is issued for sandbox, but it is configured for production")
        }, "\(run.output.text)")
    }
}
