import Foundation
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// `pushd check-config`: every kind of bad configuration is reported on a line naming the
/// setting and the file; errors exit 1, warnings alone exit 0.
@Suite struct CheckConfigCommandTests {
    /// A configuration with one token app, written next to its key; `apps` replaces the app list.
    static func writeConfig(_ files: FileFixture, database: String = "postgresql://pushd@127.0.0.1:1/none",
                            apps: String? = nil, extra: String = "") throws -> String {
        let appList: String
        if let apps {
            appList = apps
        } else {
            try files.signingKey("shop.p8")
            appList = """
              - name: shop
                bundle_id: com.example.shop
                token:
                  team_id: ABCDE12345
                  key_id: KEY1234567
                  key_file: \(files.path("shop.p8"))
            """
        }
        return try files.write("pushd.yml", """
            database:
              url: \(database)
            \(extra)
            apps:
            \(appList)
            """)
    }

    static func check(_ file: String, database: Bool = false, environment: [String: String] = [:]) throws -> CommandRun {
        try CommandRun(["check-config", file] + (database ? [] : ["--no-database"]), environment: environment, CheckConfigCommand.run)
    }

    static func certificateApp(_ name: String, _ lines: String) -> String {
        """
          - name: \(name)
            bundle_id: com.example.\(name)
            certificate:
        \(lines.split(separator: "\n").map { "      " + $0 }.joined(separator: "\n"))
        """
    }

    @Test func aCompleteValidConfigurationPassesWithOneLinePerCheck() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            try files.signingKey("shop.p8")
            try files.certificate("pem")
            try files.certificate("bundle")
            try files.pkcs12("bundle", password: "secret")
            try files.certificate("ca", days: 3650)
            let config = try Self.writeConfig(files, database: database.url, apps: """
              - name: shop
                bundle_id: com.example.shop
                token:
                  team_id: ABCDE12345
                  key_id: KEY1234567
                  key_file: \(files.path("shop.p8"))
            \(Self.certificateApp("pem", "cert_file: \(files.path("pem.crt"))\nkey_file: \(files.path("pem.key"))"))
            \(Self.certificateApp("bundle", "p12_file: \(files.path("bundle.p12"))\np12_password: secret"))
            """, extra: "apns:\n  ca_file: \(files.path("ca.crt"))\nlog:\n  file: \(files.path("pushd.log"))")
            let run = try Self.check(config, database: true)
            #expect(run.exitCode == 0, "\(run.output.text)")
            let lines = run.output.output
            #expect(lines.contains { $0.hasPrefix("ok: apps[0]: app shop: signing key KEY1234567 of team ABCDE12345 is a P-256 key") })
            #expect(lines.contains { $0.hasPrefix("ok: apps[1].certificate.cert_file: app pem: certificate") && $0.contains("CN=pem") })
            #expect(lines.contains { $0.hasPrefix("ok: apps[2].certificate.p12_file: app bundle: certificate") })
            #expect(lines.contains { $0.hasPrefix("ok: apns.ca_file:") && $0.contains("1 usable certificate") })
            #expect(lines.contains("ok: database.url: the database is reachable and the schema is at version \(Migrator.migrations.map(\.version).max() ?? 0)"))
            #expect(lines.last == "\(config): valid")
            #expect(!lines.contains { $0.hasPrefix("error") || $0.hasPrefix("warning") })
        }
    }

    @Test func yamlSyntaxErrorsNameTheLine() throws {
        let files = try FileFixture()
        let config = try files.write("pushd.yml", "database:\n  url: [unclosed\napps: []\n")
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.text.contains("error: file (line"))
        #expect(run.output.text.contains("not valid YAML"))
        #expect(run.output.output.last?.hasPrefix("\(config): 1 error, 0 warnings") == true)
    }

    @Test func aMissingConfigurationFileIsNamed() throws {
        let run = try Self.check("/nonexistent/pushd.yml")
        #expect(run.exitCode == 1)
        #expect(run.output.text.contains("error: file: cannot read /nonexistent/pushd.yml"))
    }

    @Test func settingProblemsAreAllListedAndFileChecksWait() throws {
        let files = try FileFixture()
        let config = try Self.writeConfig(files, apps: """
              - name: shop
                bundle_id: not-a-bundle-id
                token:
                  team_id: short
                  key_id: KEY1234567
                  key_flie: /x.p8
            """, extra: "metrics:\n  listen: nowhere")
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        let text = run.output.text
        #expect(text.contains("error: metrics.listen"))
        #expect(text.contains("error: apps[0].bundle_id"))
        #expect(text.contains("error: apps[0].token.team_id") && text.contains("'short' must be exactly 10 characters"))
        #expect(text.contains("error: apps[0].token.key_file") && text.contains("missing"))
        #expect(text.contains("error: apps[0].token.key_flie") && text.contains("did you mean 'key_file'?"))
        #expect(run.output.output.last?.contains("checked once the settings are fixed") == true)
    }

    /// `pushd check-config` shows a `metrics.listen` the server could not bind as the loader
    /// refuses it: the setting, its line and why. Before, an IPv6 address without brackets
    /// passed, the last ':' taken as the port's.
    @Test func aMetricsListenAddressWithoutBracketsIsRefusedWithItsLine() throws {
        let files = try FileFixture()
        let config = try Self.writeConfig(files, extra: "metrics:\n  per_address_limit: 8\n  listen: '::1:9464'")
        let run = try Self.check(config)
        #expect(run.exitCode == 1, "\(run.output.text)")
        #expect(run.output.text.contains("error: metrics.listen (line 5): '::1:9464' is not host:port (an IPv6 address goes in brackets, as [::1]:9464)"),
                "\(run.output.text)")
    }

    @Test func aMissingKeyFileIsNamedWithItsSetting() throws {
        let files = try FileFixture()
        let config = try Self.writeConfig(files, apps: """
              - name: shop
                bundle_id: com.example.shop
                token:
                  team_id: ABCDE12345
                  key_id: KEY1234567
                  key_file: \(files.path("absent.p8"))
            """)
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains("error: apps[0].token.key_file: \(files.path("absent.p8")) does not exist"))
    }

    /// pushd signs every token of a key id with one key: two apps naming different keys under
    /// one id would both sign with whichever was read last, and a reload of one swap the other's.
    /// Both settings are errors, so `run` refuses to start and a reload keeps both keys as they are.
    /// The same key in two files is fine.
    @Test func twoDifferentKeysUnderOneKeyIDAreAnErrorAtBothSettings() throws {
        let files = try FileFixture()
        try files.signingKey("shop.p8")
        try files.signingKey("blog.p8")
        _ = try files.write("copy.p8", try String(contentsOfFile: files.path("shop.p8"), encoding: .utf8))
        func app(_ name: String, _ file: String) -> String {
            """
              - name: \(name)
                bundle_id: com.example.\(name)
                token:
                  team_id: ABCDE12345
                  key_id: KEY1234567
                  key_file: \(files.path(file))
            """
        }
        let clash = try Self.check(try Self.writeConfig(files, apps: app("shop", "shop.p8") + "\n" + app("blog", "blog.p8")))
        #expect(clash.exitCode == 1)
        let why = "\(files.path("blog.p8")) (app blog) and \(files.path("shop.p8")) (app shop) hold different keys under one key id, "
            + "KEY1234567 of team ABCDE12345"
        for setting in ["apps[0].token.key_file", "apps[1].token.key_file"] {
            #expect(clash.output.output.contains { $0.hasPrefix("error: \(setting): \(why)") }, "\(clash.output.output)")
        }
        let same = try Self.check(try Self.writeConfig(files, apps: app("shop", "shop.p8") + "\n" + app("blog", "copy.p8")))
        #expect(same.exitCode == 0, "\(same.output.output)")
    }

    @Test func aKeyFileOverriddenFromTheEnvironmentIsChecked() throws {
        let files = try FileFixture()
        let config = try Self.writeConfig(files)
        let run = try Self.check(config, environment: ["PUSHD_APP_SHOP_KEY_FILE": files.path("elsewhere.p8")])
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains("error: apps[0].token.key_file: \(files.path("elsewhere.p8")) does not exist"))
    }

    @Test(arguments: [
        ("directory", "is a directory, not a file"),
        ("empty", "is empty"),
        ("garbage", "is not an unencrypted PEM private key"),
        ("P-384", "P-256"),
        ("RSA", "P-256"),
        ("certificate", "is not an unencrypted PEM private key"),
    ])
    func anUnusableSigningKeyIsAnError(kind: String, expected: String) throws {
        let files = try FileFixture()
        let key = files.path("shop.p8")
        switch kind {
        case "directory": try FileManager.default.createDirectory(atPath: key, withIntermediateDirectories: false)
        case "empty": try files.write("shop.p8", "")
        case "garbage": try files.write("shop.p8", "this is not a key\n")
        case "P-384": try files.signingKey("shop.p8", curve: "P-384")
        case "RSA": try files.signingKey("shop.p8", curve: nil)
        default:
            try files.certificate("cert")
            try FileManager.default.copyItem(atPath: files.path("cert.crt"), toPath: key)
            try files.chmod("shop.p8", 0o600)
        }
        let config = try Self.writeConfig(files, apps: """
              - name: shop
                bundle_id: com.example.shop
                token:
                  team_id: ABCDE12345
                  key_id: KEY1234567
                  key_file: \(key)
            """)
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        let line = run.output.output.first { $0.hasPrefix("error: apps[0].token.key_file: ") }
        #expect(line?.contains(expected) == true, "\(run.output.text)")
        #expect(line?.contains(key) == true, "\(run.output.text)")
    }

    @Test func aKeyFileOthersCanReadIsOnlyAWarning() throws {
        let files = try FileFixture()
        let config = try Self.writeConfig(files)
        try files.chmod("shop.p8", 0o644)
        let run = try Self.check(config)
        #expect(run.exitCode == 0)
        #expect(run.output.output.contains {
            $0.hasPrefix("warning: apps[0].token.key_file: \(files.path("shop.p8")) holds a private key and is accessible by group or others (mode 644)")
        })
        #expect(run.output.output.last == "\(config): valid, with 1 warning")
    }

    @Test func anExpiredCertificateIsAnError() throws {
        let files = try FileFixture()
        try files.certificate("old", from: "20200101000000Z", until: "20210101000000Z")
        let config = try Self.writeConfig(files, apps: Self.certificateApp("old", "cert_file: \(files.path("old.crt"))\nkey_file: \(files.path("old.key"))"))
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains {
            $0.hasPrefix("error: apps[0].certificate.cert_file: the certificate in \(files.path("old.crt")) expired on 2021-01-01")
        })
    }

    @Test func aCertificateNotYetValidIsAnError() throws {
        let files = try FileFixture()
        try files.certificate("future", from: "20990101000000Z", until: "21000101000000Z")
        let config = try Self.writeConfig(files, apps: Self.certificateApp("future", "cert_file: \(files.path("future.crt"))\nkey_file: \(files.path("future.key"))"))
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains { $0.hasPrefix("error: apps[0].certificate.cert_file:") && $0.contains("is not valid before 2099-01-01") })
    }

    @Test func aCertificateExpiringWithinThirtyDaysIsAWarning() throws {
        let files = try FileFixture()
        try files.certificate("soon", days: 10)
        let config = try Self.writeConfig(files, apps: Self.certificateApp("soon", "cert_file: \(files.path("soon.crt"))\nkey_file: \(files.path("soon.key"))"))
        let run = try Self.check(config)
        #expect(run.exitCode == 0)
        #expect(run.output.output.contains { $0.hasPrefix("warning: apps[0].certificate.cert_file: the certificate in \(files.path("soon.crt")) expires on")
                && ($0.contains("in 9 days") || $0.contains("in 10 days")) })
    }

    @Test func aKeyThatDoesNotBelongToTheCertificateIsAnError() throws {
        let files = try FileFixture()
        try files.certificate("one")
        try files.certificate("two")
        let config = try Self.writeConfig(files, apps: Self.certificateApp("one", "cert_file: \(files.path("one.crt"))\nkey_file: \(files.path("two.key"))"))
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains(
            "error: apps[0].certificate.key_file: the private key in \(files.path("two.key")) does not belong to the certificate in \(files.path("one.crt"))"))
    }

    @Test func aCertificateFileWithoutItsKeyAsksForKeyFile() throws {
        let files = try FileFixture()
        try files.certificate("alone")
        let config = try Self.writeConfig(files, apps: Self.certificateApp("alone", "cert_file: \(files.path("alone.crt"))"))
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains { $0.hasPrefix("error: apps[0].certificate.cert_file: \(files.path("alone.crt")) holds no unencrypted PEM private key") && $0.contains("set key_file") })
    }

    @Test func aCertificateForAnotherBundleIDIsAWarning() throws {
        let files = try FileFixture()
        try files.certificate("other")
        let config = try Self.writeConfig(files, apps: """
              - name: shop
                bundle_id: com.example.shop
                certificate:
                  cert_file: \(files.path("other.crt"))
                  key_file: \(files.path("other.key"))
            """)
        let run = try Self.check(config)
        #expect(run.exitCode == 0)
        #expect(run.output.output.contains(
            "warning: apps[0].certificate.cert_file: the certificate in \(files.path("other.crt")) is for com.example.other, but app shop has bundle_id com.example.shop; APNs answers TopicDisallowed"))
    }

    @Test func aCertificateAndKeyInOneFileAreAccepted() throws {
        let files = try FileFixture()
        try files.certificate("both")
        let combined = try String(contentsOfFile: files.path("both.crt"), encoding: .utf8) + String(contentsOfFile: files.path("both.key"), encoding: .utf8)
        try files.write("both.pem", combined)
        let config = try Self.writeConfig(files, apps: Self.certificateApp("both", "cert_file: \(files.path("both.pem"))"))
        let run = try Self.check(config)
        #expect(run.exitCode == 0, "\(run.output.text)")
        #expect(run.output.output.contains { $0.hasPrefix("ok: apps[0].certificate.cert_file: app both: certificate") })
    }

    @Test(arguments: [
        (Optional("wrong"), "error: apps[0].certificate.p12_password: %@ cannot be opened: the p12_password is wrong"),
        (nil, "error: apps[0].certificate.p12_password: %@ cannot be opened: no p12_password is set"),
    ])
    func aPKCS12BundleThatTheConfiguredPasswordDoesNotOpenIsAnError(password: String?, expected: String) throws {
        let files = try FileFixture()
        try files.certificate("bundle")
        try files.pkcs12("bundle", password: "secret")
        let lines = "p12_file: \(files.path("bundle.p12"))" + (password.map { "\np12_password: \($0)" } ?? "")
        let config = try Self.writeConfig(files, apps: Self.certificateApp("bundle", lines))
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains(expected.replacingOccurrences(of: "%@", with: files.path("bundle.p12"))), "\(run.output.text)")
    }

    @Test func thePKCS12PasswordCanComeFromTheEnvironment() throws {
        let files = try FileFixture()
        try files.certificate("bundle")
        try files.pkcs12("bundle", password: "secret")
        let config = try Self.writeConfig(files, apps: Self.certificateApp("bundle", "p12_file: \(files.path("bundle.p12"))"))
        let run = try Self.check(config, environment: ["PUSHD_APP_BUNDLE_P12_PASSWORD": "secret"])
        #expect(run.exitCode == 0, "\(run.output.text)")
    }

    @Test func aFileThatIsNotPKCS12IsAnError() throws {
        let files = try FileFixture()
        try files.certificate("bundle")
        try FileManager.default.copyItem(atPath: files.path("bundle.crt"), toPath: files.path("bundle.p12"))
        let config = try Self.writeConfig(files, apps: Self.certificateApp("bundle", "p12_file: \(files.path("bundle.p12"))\np12_password: x"))
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains { $0.hasPrefix("error: apps[0].certificate.p12_file: \(files.path("bundle.p12")) is not a PKCS#12 (.p12) file") })
    }

    @Test(arguments: ["missing", "no certificate", "expired"])
    func anUnusableCAFileIsAnError(kind: String) throws {
        let files = try FileFixture()
        switch kind {
        case "missing": break
        case "no certificate": try files.write("ca.crt", "-----BEGIN NOTHING-----\n")
        default:
            try files.certificate("ca", from: "20200101000000Z", until: "20210101000000Z")
        }
        let config = try Self.writeConfig(files, extra: "apns:\n  ca_file: \(files.path("ca.crt"))")
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        let line = run.output.output.first { $0.hasPrefix("error: apns.ca_file: ") }
        let expected = ["missing": "does not exist", "no certificate": "holds no PEM certificate", "expired": "expired on 2021-01-01"][kind]!
        #expect(line?.contains(expected) == true, "\(run.output.text)")
    }

    @Test func aLogFileInAMissingFolderIsAnError() throws {
        let files = try FileFixture()
        let config = try Self.writeConfig(files, extra: "log:\n  file: \(files.path("no/such/folder/pushd.log"))")
        let run = try Self.check(config)
        #expect(run.exitCode == 1)
        #expect(run.output.output.contains("error: log.file: the folder \(files.path("no/such/folder")) of \(files.path("no/such/folder/pushd.log")) does not exist"))
    }

    @Test func anUnreachableDatabaseIsAnError() throws {
        let files = try FileFixture()
        let config = try Self.writeConfig(files, database: "postgresql://pushd@127.0.0.1:1/pushd")
        let run = try Self.check(config, database: true)
        #expect(run.exitCode == 1)
        let line = run.output.output.first { $0.hasPrefix("error: database.url: ") }
        #expect(line?.contains("cannot connect to postgresql://pushd@127.0.0.1:1/pushd:") == true, "\(run.output.text)")
        #expect(line?.contains("connect_timeout") == false)
    }

    @Test func anUnmigratedDatabaseAsksForMigrate() throws {
        try IsolatedDatabase.with(migrated: false) { database in
            let files = try FileFixture()
            let config = try Self.writeConfig(files, database: database.url)
            let run = try Self.check(config, database: true)
            #expect(run.exitCode == 1)
            #expect(run.output.output.contains("error: database.url: the database is reachable but not migrated: run pushd migrate"))
        }
    }

    @Test func aReadOnlyDatabaseIsAnError() throws {
        try IsolatedDatabase.with { database in
            let admin = try database.connect()
            defer { admin.close() }
            try admin.query("ALTER DATABASE \(database.name) SET default_transaction_read_only = on")
            defer { _ = try? admin.query("ALTER DATABASE \(database.name) RESET default_transaction_read_only") }
            let files = try FileFixture()
            let config = try Self.writeConfig(files, database: database.url)
            let run = try Self.check(config, database: true)
            #expect(run.exitCode == 1, "\(run.output.text)")
            #expect(run.output.output.contains("error: database.url: the database is read-only (transaction_read_only is on: default_transaction_read_only "
                                               + "set for the server, the database or the role): pushd can migrate, record and send nothing until it takes writes"),
                    "\(run.output.text)")
        }
    }

    @Test func theDatabaseURLFromTheEnvironmentIsTheOneChecked() throws {
        try IsolatedDatabase.with { database in
            let files = try FileFixture()
            let config = try Self.writeConfig(files, database: "postgresql://pushd@127.0.0.1:1/none")
            let run = try Self.check(config, database: true, environment: ["PUSHD_DATABASE_URL": database.url])
            #expect(run.exitCode == 0, "\(run.output.text)")
        }
    }

    @Test func noDatabaseSkipsTheConnection() throws {
        let files = try FileFixture()
        let config = try Self.writeConfig(files, database: "postgresql://pushd@127.0.0.1:1/pushd")
        let run = try Self.check(config)
        #expect(run.exitCode == 0)
        #expect(!run.output.text.contains("database.url"))
    }

    @Test func theBinaryExitsZeroOneOrTwo() throws {
        let files = try FileFixture()
        let good = try Self.writeConfig(files)
        let valid = try PushdBinary.run(["check-config", "--no-database", good])
        #expect(valid.status == 0, "\(valid.output)\(valid.errors)")
        #expect(valid.output.hasSuffix("\(good): valid\n"))

        try files.chmod("shop.p8", 0o640)
        let warned = try PushdBinary.run(["check-config", "--no-database", good])
        #expect(warned.status == 0)
        #expect(warned.output.contains("warning: apps[0].token.key_file"))

        let bad = try files.write("bad.yml", "apps: 3\n")
        let invalid = try PushdBinary.run(["check-config", "--no-database", bad])
        #expect(invalid.status == 1)
        #expect(invalid.output.contains("error: apps (line 1): expected a list"))

        let usage = try PushdBinary.run(["check-config", "--no-such-flag"])
        #expect(usage.status == 2)
        #expect(usage.errors.contains("unknown option '--no-such-flag'"))
    }
}
