import APNs
import Posix
import Glibc
import QueueStore

/// Everything `check-config` can verify without sending: the settings, every file they
/// name (present, readable, private when it holds a key, parseable, not expired), the
/// metrics address (free to listen on), and the database (reachable, schema migrated).
///
/// `pushd run` runs the same check (without the database, which it waits for) and refuses
/// to start on any error, so the two commands never disagree about a configuration.
struct ConfigCheck {
    enum Severity: String, Sendable { case error, warning, ok }

    struct Finding: Sendable, Equatable, CustomStringConvertible {
        var severity: Severity
        /// The setting concerned, for example `apps[0].token.key_file`.
        var setting: String
        var message: String

        init(severity: Severity, setting: String, message: String) {
            self.severity = severity
            self.setting = setting
            // libpq and OpenSSL messages span lines; a finding stays on one.
            self.message = message.split(whereSeparator: { $0 == "\n" || $0 == "\t" })
                .map { $0.trimmingSpaces() }.filter { !$0.isEmpty }.joined(separator: " ")
        }

        var description: String { "\(severity.rawValue): \(setting): \(message)" }
    }

    var file: String
    var environment: [String: String]
    var checkDatabase = true
    /// Off on a reload: the running process holds the metrics address itself.
    var checkMetricsListen = true
    var now = Timestamp()
    /// A certificate expiring sooner than this is a warning.
    var expiryWarning: Double = 30 * 86_400

    private(set) var findings: [Finding] = []
    /// The settings could not be read, so the files and the database were not checked.
    private(set) var settingsInvalid = false
    /// The first signing key read for each key id of a team ("TEAM/KEYID"), with where it was named.
    private var signingKeys: [String: (app: String, file: String, setting: String, publicKey: [UInt8])] = [:]

    init(file: String, environment: [String: String], checkDatabase: Bool = true, now: Timestamp = Timestamp()) {
        self.file = file
        self.environment = environment
        self.checkDatabase = checkDatabase
        self.now = now
    }

    var errorCount: Int { findings.count { $0.severity == .error } }
    var warningCount: Int { findings.count { $0.severity == .warning } }

    var summary: String {
        func plural(_ n: Int, _ word: String) -> String { "\(n) \(word)\(n == 1 ? "" : "s")" }
        if errorCount > 0 {
            let skipped = settingsInvalid ? "; key files, certificates and the database are checked once the settings are fixed" : ""
            return "\(file): \(plural(errorCount, "error")), \(plural(warningCount, "warning")): pushd cannot run with this configuration\(skipped)"
        }
        return "\(file): valid" + (warningCount > 0 ? ", with \(plural(warningCount, "warning"))" : "")
    }

    mutating func run() {
        let config: PushdConfig
        do {
            let (loaded, warnings) = try ConfigLoader.load(file: file, environment: environment)
            for warning in warnings { add(warning) }
            config = loaded
        } catch let error as ConfigError {
            for problem in error.problems { add(problem) }
            settingsInvalid = !error.problems.contains { $0.path == "file" }
            return
        } catch {
            add(.error, "file", "\(error)")
            return
        }
        checkConfigFilePrivacy(config)
        for (index, app) in config.apps.enumerated() {
            checkCredentials(of: app, app.credentials, at: "apps[\(index)]")
            for (environment, credentials) in app.otherCertificates.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                checkCredentials(of: app, credentials, at: "apps[\(index)]", block: "\(environment.rawValue)_certificate")
            }
            for (environment, credentials) in app.environmentKeys.sorted(by: { $0.key.rawValue < $1.key.rawValue }) {
                checkCredentials(of: app, credentials, at: "apps[\(index)]", block: "\(environment.rawValue)_token")
            }
        }
        if let caFile = config.apns.caFile { checkCertificateAuthorities(caFile) }
        if let logFile = config.logFile { checkLogFile(logFile) }
        if checkMetricsListen { checkMetricsListen(config.metricsListen) }
        if checkDatabase { checkDatabaseSchema(config.databaseURL) }
    }

    // MARK: Credentials

    /// `block` names the certificate's block (`certificate`, `sandbox_certificate`) or, for a
    /// key of one environment, the key's (`sandbox_token`; `token` otherwise).
    private mutating func checkCredentials(of app: PushdConfig.App, _ credentials: PushdConfig.Credentials, at path: String,
                                           block: String = "certificate") {
        switch credentials {
        case .token(let teamID, let keyID, let keyFile):
            let tokenBlock = block.hasSuffix("_token") ? block : "token"
            let setting = "\(path).\(tokenBlock).key_file"
            guard readFile(keyFile, setting: setting, holdsKey: true) != nil else { return }
            do {
                let key = try SigningKey(contentsOfFile: keyFile, keyID: keyID, teamID: teamID)
                let serves = tokenBlock == "token" ? "" : " for \(tokenBlock.dropLast("_token".count))"
                add(.ok, path, "app \(app.name): signing key \(key.keyID) of team \(key.teamID)\(serves) is a P-256 key (\(keyFile))")
                checkOneKeyPerID(key, app: app.name, file: keyFile, setting: setting)
            } catch {
                add(.error, setting, error.description)
            }
        case .certificate(let certificateFile, let keyFile, let pkcs12File, let password):
            if let pkcs12File {
                let setting = "\(path).\(block).p12_file"
                guard let bytes = readFile(pkcs12File, setting: setting, holdsKey: true) else { return }
                do {
                    let summary = try ClientCertificate.inspectPKCS12(bytes, source: pkcs12File, password: password)
                    checkValidity(summary, setting: setting, app: app, file: pkcs12File, block: block)
                } catch {
                    add(.error, error.part == .password ? "\(path).\(block).p12_password" : setting, error.description)
                }
            } else if let certificateFile {
                let setting = "\(path).\(block).cert_file"
                // Without key_file the key sits in the certificate file, which is then a secret too.
                guard let certificate = readFile(certificateFile, setting: setting, holdsKey: keyFile == nil) else { return }
                var key: [UInt8]?
                if let keyFile {
                    guard let bytes = readFile(keyFile, setting: "\(path).\(block).key_file", holdsKey: true) else { return }
                    key = bytes
                }
                do {
                    let summary = try ClientCertificate.inspectPEM(certificate: certificate, source: certificateFile,
                                                                  key: key, keySource: keyFile)
                    checkValidity(summary, setting: setting, app: app, file: certificateFile, block: block)
                } catch {
                    add(.error, error.part == .key ? "\(path).\(block).key_file" : setting, error.description)
                }
            }
        }
    }

    private mutating func checkValidity(_ summary: ClientCertificateInfo, setting: String, app: PushdConfig.App, file: String,
                                        block: String) {
        // Apple's push certificates carry the bundle id they may push to as the subject's UID.
        if let uid = summary.userID, uid != app.bundleID {
            add(.warning, setting, "the certificate in \(file) is for \(uid), but app \(app.name) has bundle_id \(app.bundleID); APNs answers TopicDisallowed")
        }
        // Apple marks a push certificate as development (sandbox), production, or both.
        let environment = block == "certificate" ? app.environment
            : PushdConfig.Environment.allCases.first { "\($0.rawValue)_certificate" == block } ?? app.environment
        let serves: APNsEnvironment = environment == .production ? .production : .sandbox
        if !summary.environments.isEmpty && !summary.environments.contains(serves) {
            let issued = summary.environments.map(\.rawValue).sorted().joined(separator: ", ")
            add(.error, setting, "the certificate in \(file) is issued for \(issued), but it is configured for \(environment.rawValue); APNs answers BadCertificateEnvironment")
        }
        let until = Self.day(summary.notAfter)
        if summary.notBefore > now {
            add(.error, setting, "the certificate in \(file) is not valid before \(Self.day(summary.notBefore))")
        } else if summary.notAfter <= now {
            add(.error, setting, "the certificate in \(file) expired on \(until); APNs refuses it (renew it in the developer account)")
        } else if summary.notAfter.timeIntervalSince(now) < expiryWarning {
            let days = Int(summary.notAfter.timeIntervalSince(now) / 86_400)
            add(.warning, setting, "the certificate in \(file) expires on \(until), in \(days) day\(days == 1 ? "" : "s")")
        } else {
            add(.ok, setting, "app \(app.name): certificate \(summary.subject) is valid until \(until)")
        }
    }

    /// Apps (or an app's environments) may share a key: APNs knows it by its id, and pushd signs
    /// every token of an id with one key (`ProviderTokenService`). Two files that hold different
    /// keys under one id would have every app of the id sign with whichever was read last, and
    /// a reload that changed one of them swap the key of the others: both settings are errors.
    private mutating func checkOneKeyPerID(_ key: SigningKey, app: String, file: String, setting: String) {
        // A key read from its file exports its public half; one that did not cannot be compared.
        guard let publicKey = try? key.publicKeyDER else { return }
        let id = "\(key.teamID)/\(key.keyID)"
        guard let first = signingKeys[id] else {
            signingKeys[id] = (app, file, setting, publicKey)
            return
        }
        guard first.publicKey != publicKey else { return }
        let why = "\(file) (app \(app)) and \(first.file) (app \(first.app)) hold different keys under one key id, \(key.keyID) of team "
            + "\(key.teamID): APNs knows one key by an id, and pushd signs every token of the id with one key; name the same key file in both"
        add(.error, first.setting, why)
        add(.error, setting, why)
    }

    // MARK: Other files

    private mutating func checkCertificateAuthorities(_ caFile: String) {
        let setting = "apns.ca_file"
        guard let bytes = readFile(caFile, setting: setting, holdsKey: false) else { return }
        do {
            let authorities = try ClientCertificate.inspectAuthorities(bytes, source: caFile)
            var usable = 0
            for authority in authorities {
                if authority.notAfter <= now {
                    add(.error, setting, "the certificate \(authority.subject) in \(caFile) expired on \(Self.day(authority.notAfter))")
                } else {
                    usable += 1
                }
            }
            if usable > 0 { add(.ok, setting, "\(caFile) holds \(usable) usable certificate\(usable == 1 ? "" : "s")") }
        } catch {
            add(.error, setting, error.description)
        }
    }

    private mutating func checkLogFile(_ logFile: String) {
        let folder = logFile.lastIndex(of: "/").map { $0 == logFile.startIndex ? "/" : String(logFile[..<$0]) } ?? "."
        var status = stat()
        if stat(folder, &status) != 0 || status.st_mode & S_IFMT != S_IFDIR {
            add(.error, "log.file", "the folder \(folder) of \(logFile) does not exist")
        } else if access(folder, W_OK) != 0 && access(logFile, W_OK) != 0 {
            add(.error, "log.file", "\(logFile) cannot be written: \(String(cString: strerror(errno)))")
        }
    }

    /// A password written in the configuration file (not given through the environment) is
    /// read by anyone who can read the file.
    private mutating func checkConfigFilePrivacy(_ config: PushdConfig) {
        var info = stat()
        guard stat(file, &info) == 0, info.st_mode & 0o004 != 0 else { return }
        guard let (fromFile, _) = try? ConfigLoader.load(file: file, environment: [:]) else { return }
        var holders = [String]()
        if Self.databaseURLHoldsPassword(fromFile.databaseURL) { holders.append("database.url") }
        for (index, app) in fromFile.apps.enumerated() {
            if case .certificate(_, _, _, let password?) = app.credentials, !password.isEmpty {
                holders.append("apps[\(index)].certificate.p12_password")
            }
            for (environment, credentials) in app.otherCertificates {
                if case .certificate(_, _, _, let password?) = credentials, !password.isEmpty {
                    holders.append("apps[\(index)].\(environment.rawValue)_certificate.p12_password")
                }
            }
        }
        guard !holders.isEmpty else { return }
        let mode = String(info.st_mode & 0o777, radix: 8)
        add(.warning, "file", "\(file) holds a password (\(holders.joined(separator: ", "))) and is readable by others (mode \(mode)); run chmod o-rwx \(file) or pass the password through the environment")
    }

    /// Whether a libpq URL or keyword string carries a password (`user:password@`, `password=`).
    static func databaseURLHoldsPassword(_ url: String) -> Bool {
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            let rest = url.drop { $0 != "/" }.dropFirst(2)
            let authority = rest.prefix { $0 != "/" && $0 != "?" }
            if let at = authority.lastIndex(of: "@"), authority[..<at].contains(":") { return true }
            let query = url.split(separator: "?", maxSplits: 1).dropFirst().first ?? ""
            return query.split(separator: "&").contains { $0.hasPrefix("password=") }
        }
        return url.split(whereSeparator: { $0 == " " || $0 == "\t" }).contains { $0.hasPrefix("password=") }
    }

    /// Binds the metrics address the way the metrics server will, and lets it go at once:
    /// another process on it (a running pushd, a node exporter) makes `run` fail at start.
    private mutating func checkMetricsListen(_ value: String) {
        guard let address = try? ConfigLoader.listenAddress(value), address.port != 0 else { return }
        var hints = addrinfo()
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var results: UnsafeMutablePointer<addrinfo>?
        let status = getaddrinfo(address.host, String(address.port), &hints, &results)
        guard status == 0, let first = results else {
            add(.error, "metrics.listen", "\(value): the host \(address.host) cannot be resolved: \(String(cString: gai_strerror(status)))")
            return
        }
        defer { freeaddrinfo(results) }
        let descriptor = socket(first.pointee.ai_family, first.pointee.ai_socktype, first.pointee.ai_protocol)
        guard descriptor >= 0 else { return }
        defer { close(descriptor) }
        var on: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        if bind(descriptor, first.pointee.ai_addr, first.pointee.ai_addrlen) != 0 || Glibc.listen(descriptor, 1) != 0 {
            let reason = errno == EADDRINUSE ? "the address is already in use by another process"
                : "cannot listen there: \(String(cString: strerror(errno)))"
            add(.error, "metrics.listen", "\(value): \(reason)")
        }
    }

    /// The file's bytes, or nil after recording why they cannot be used. A file holding a
    /// private key that group or others may access is a warning, not an error: pushd still works.
    private mutating func readFile(_ path: String, setting: String, holdsKey: Bool) -> [UInt8]? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            let reason = errno == ENOENT ? "does not exist" : "cannot be inspected: \(String(cString: strerror(errno)))"
            add(.error, setting, "\(path) \(reason)")
            return nil
        }
        if (info.st_mode & S_IFMT) == S_IFDIR {
            add(.error, setting, "\(path) is a directory, not a file")
            return nil
        }
        if holdsKey, info.st_mode & 0o077 != 0 {
            let mode = String(info.st_mode & 0o777, radix: 8)
            add(.warning, setting, "\(path) holds a private key and is accessible by group or others (mode \(mode)); run chmod 600 \(path)")
        }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else {
            add(.error, setting, "\(path) cannot be read: \(String(cString: strerror(errno)))")
            return nil
        }
        defer { close(descriptor) }
        var bytes = [UInt8]()
        var buffer = [UInt8](repeating: 0, count: 65_536)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                add(.error, setting, "\(path) cannot be read: \(String(cString: strerror(errno)))")
                return nil
            }
            if count == 0 { break }
            bytes.append(contentsOf: buffer[..<count])
            // Key and certificate files are a few kilobytes; anything this large is the wrong file.
            if bytes.count > 1 << 20 {
                add(.error, setting, "\(path) is larger than 1 MiB; expected a key or certificate file")
                return nil
            }
        }
        if bytes.isEmpty {
            add(.error, setting, "\(path) is empty")
            return nil
        }
        return bytes
    }

    // MARK: Database

    private mutating func checkDatabaseSchema(_ url: String) {
        let connection: PGConnection
        let bounded = Self.withConnectTimeout(url)
        do {
            connection = try QueueSession.connect(url: bounded, applicationName: "pushd-check-config")
        } catch {
            let added = String(bounded.dropFirst(url.count))
            add(.error, "database.url", added.isEmpty ? "\(error)" : "\(error)".replacing(text: added, with: ""))
            return
        }
        defer { connection.close() }
        if let cause = (try? DatabaseWritability.read(connection))?.cause {
            add(.error, "database.url", "\(cause): pushd can migrate, record and send nothing until it takes writes")
        }
        do {
            let applied = try Migrator().appliedVersions(connection)
            let known = Migrator.migrations.map(\.version).max() ?? 0
            guard let current = applied.last else {
                add(.error, "database.url", "the database is reachable but not migrated: run pushd migrate")
                return
            }
            if current < known {
                add(.error, "database.url", "the schema is at version \(current), this pushd needs \(known): run pushd migrate")
            } else if current > known {
                add(.warning, "database.url", "the schema is at version \(current), newer than this pushd knows (\(known)); upgrade pushd")
            } else {
                add(.ok, "database.url", "the database is reachable and the schema is at version \(current)")
            }
        } catch {
            add(.error, "database.url", "cannot read the schema version: \(error)")
        }
    }

    /// Bounds the wait for an unreachable host; an explicit connect_timeout in the URL wins.
    static func withConnectTimeout(_ url: String, seconds: Int = 5) -> String {
        if url.contains(text: "connect_timeout") { return url }
        if url.hasPrefix("postgres://") || url.hasPrefix("postgresql://") {
            return url + (url.contains("?") ? "&" : "?") + "connect_timeout=\(seconds)"
        }
        return url + " connect_timeout=\(seconds)"
    }

    // MARK: Reporting

    private mutating func add(_ severity: Severity, _ setting: String, _ message: String) {
        findings.append(Finding(severity: severity, setting: setting, message: message))
    }

    private mutating func add(_ problem: ConfigProblem) {
        let setting = problem.line > 0 ? "\(problem.path) (line \(problem.line))" : problem.path
        add(problem.severity == .error ? .error : .warning, setting, problem.message)
    }

    static func day(_ date: Timestamp) -> String {
        date.iso8601Day
    }
}
