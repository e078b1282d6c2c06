import APNs
import Posix
import Locking

/// The client certificates certificate apps send with, one per app and environment, read by
/// the one loader (`ClientCertificate.load`, which `check-config` uses too) and held in memory:
/// the engines present these, never what the files hold when a connection is opened. `run`
/// loads them at start; a reload (SIGHUP) replaces one only when its new files load and pass
/// the checks (`ConfigReloader`), so a certificate file broken or changed on disk changes
/// nothing until then.
///
/// Thread rule: the map is under its lock; any thread may read it.
final class AppCertificates: Sendable {
    struct Key: Hashable, Sendable {
        var app: String
        var environment: PushdConfig.Environment
    }

    /// A certificate that cannot be used: what is wrong, naming the file.
    struct Unusable: Error, CustomStringConvertible {
        var description: String
    }

    private let identities: Lock<[Key: ClientIdentity]>

    /// Loads every certificate of `config`'s certificate apps; the first that cannot be used
    /// throws, naming the app and the environment.
    init(config: PushdConfig, now: Timestamp = Timestamp()) throws {
        var loaded = [Key: ClientIdentity]()
        for app in config.apps {
            for environment in PushdConfig.Environment.allCases {
                guard let credentials = app.credentials(for: environment) else { continue }
                do {
                    if let identity = try Self.load(credentials, environment: environment, now: now) {
                        loaded[Key(app: app.name, environment: environment)] = identity
                    }
                } catch {
                    throw Unusable(description: "app \(app.name), \(environment.rawValue): \(error)")
                }
            }
        }
        identities = Lock(loaded)
    }

    /// The certificate `credentials` name (nil for a signing key), read into memory and checked
    /// as a connection would need it: it loads, the key belongs to it (the loader), and it is
    /// valid now and issued for `environment`.
    static func load(_ credentials: PushdConfig.Credentials, environment: PushdConfig.Environment,
                     now: Timestamp = Timestamp()) throws -> ClientIdentity? {
        guard case .certificate(let certificateFile, let keyFile, let pkcs12File, let password) = credentials else { return nil }
        let identity: ClientIdentity
        if let pkcs12File {
            identity = try ClientCertificate.load(pkcs12File: pkcs12File, password: password)
        } else if let certificateFile {
            identity = try ClientCertificate.load(certificateFile: certificateFile, keyFile: keyFile)
        } else {
            throw Unusable(description: "no cert_file or p12_file is set")
        }
        let problems = identity.problems(environment: environment.apns, now: now)
        guard problems.isEmpty else { throw Unusable(description: "\(identity.source): \(problems.joined(separator: "; "))") }
        return identity
    }

    /// The certificate `app` presents in `environment` now, nil for a token app.
    func identity(app: String, environment: PushdConfig.Environment) -> ClientIdentity? {
        identities.withLock { $0[Key(app: app, environment: environment)] }
    }

    /// Makes `identity` the one `app` presents in `environment` from now on.
    func replace(app: String, environment: PushdConfig.Environment, with identity: ClientIdentity) {
        identities.withLock { $0[Key(app: app, environment: environment)] = identity }
    }
}
