import APNs
import Posix
import QueueStore
import Locking

/// Hands out the provider token (JWT) of each signing key, shared by every pushd
/// instance through `pushd.provider_tokens`, on `ProviderTokenPolicy`: a token is read
/// from the table while the policy may adopt it, minted under the table's row lock by
/// whichever instance needs one first, so all instances send one token per key, and each
/// instance holds what it adopted for the update window, so APNs never sees a connection's
/// token change more often than every 20 minutes.
///
/// An instance adopts a stored token only if its own key file verifies the signature: an
/// instance with a different `.p8` for the same key id (a rotation gone wrong, a copied file)
/// must not lend the fleet a token that APNs refuses. A token it cannot verify is replaced
/// in the table by one of its own (one error line and `pushd_provider_tokens_foreign_total`
/// per such token); the instances' key files differ, and the right one is the one APNs
/// accepts. Each instance still changes its own token only when the policy says so, so the
/// row changing hands does not change any connection's token more often. A token APNs called
/// invalid is removed from the table (`reportInvalid`), so no instance is handed it again.
///
/// A key whose `.p8` changed on SIGHUP (`replaceKey`) signs the next token; the token the
/// old key signed is neither kept nor taken back from the table.
///
/// Thread rule: any thread may ask for a token. The in-memory copy is under `state`;
/// the database connection is used only under `database`, which also serialises refreshes;
/// the keys are under `keys`, taken inside `database` or alone, never the other way round.
final class ProviderTokenService: @unchecked Sendable {
    struct Key: Hashable, Sendable {
        var keyID: String
        var teamID: String
    }

    let policy: ProviderTokenPolicy
    private let databaseURL: String
    private let instance: String
    /// What signs for one key: the `.p8`, its public half (a stored token is adopted only if it
    /// verifies) and the file it was read from (for the lines that name it).
    private struct Signing {
        var signer: ProviderTokenSigner
        var publicKey: ES256PublicKey
        var file: String?
        /// A token the key replaced by a reload signed: the table must not hand it back.
        var superseded: String?
    }

    private let keys: Lock<[Key: Signing]>
    /// Whether this instance's key signed a stored token, by token: a signature is checked
    /// once per token, and a foreign one is reported once.
    private let verdicts = Lock<[String: Bool]>([:])
    private let onForeign: @Sendable (Key) -> Void
    /// A token held and its `authorization` header value, built once when it is adopted:
    /// every request asks for the header, and the same string costs no allocation and
    /// compares equal to the one a campaign's packed headers were built with at once.
    private struct Entry {
        var held: ProviderTokenPolicy.Held
        var header: String
        /// APNs called this token expired while it was kept, and that was logged.
        var warnedExpired = false
    }

    private let state = Lock<[Key: Entry]>([:])
    private let database = Lock<PGConnection?>(nil)
    private let logger: Logger
    private let onRefresh: @Sendable (Key) -> Void
    private let onDatabaseError: @Sendable (any Error) -> Void
    private let clock: @Sendable () -> Int64
    /// Whether a stored token another key file signed is replaced by this key's (an instance:
    /// the right key file is the one APNs accepts), or left to the fleet while this process
    /// signs one for itself alone (a command, which must not displace the fleet's token).
    private let replacesForeignTokens: Bool

    init(databaseURL: String, instance: String, signers: [Key: ProviderTokenSigner], keyFiles: [Key: String] = [:],
         policy: ProviderTokenPolicy, logger: Logger, onRefresh: @escaping @Sendable (Key) -> Void,
         onForeign: @escaping @Sendable (Key) -> Void = { _ in },
         onDatabaseError: @escaping @Sendable (any Error) -> Void,
         clock: @escaping @Sendable () -> Int64 = ProviderTokenService.now, replacesForeignTokens: Bool = true) throws {
        self.databaseURL = databaseURL
        self.instance = instance
        var signings = [Key: Signing]()
        for (key, signer) in signers {
            signings[key] = try Self.signing(key, signer: signer, file: keyFiles[key])
        }
        keys = Lock(signings)
        self.onForeign = onForeign
        self.policy = policy
        self.logger = logger
        self.onRefresh = onRefresh
        self.onDatabaseError = onDatabaseError
        self.clock = clock
        self.replacesForeignTokens = replacesForeignTokens
    }

    @Sendable static func now() -> Int64 { Int64(Timestamp().timeIntervalSince1970) }

    private static func signing(_ key: Key, signer: ProviderTokenSigner, file: String?) throws -> Signing {
        do {
            return Signing(signer: signer, publicKey: try signer.key.publicKey, file: file)
        } catch {
            throw CommandContext.Failure("signing key \(key.keyID) of team \(key.teamID)\(file.map { " (\($0))" } ?? ""): "
                                         + "cannot derive its public key to check shared provider tokens: \(error)")
        }
    }

    /// The key file `key` signs with now.
    func keyFile(_ key: Key) -> String? { keys.withLock { $0[key]?.file } }

    /// Whether `signer` holds the same key as the one `key` signs with now.
    func signsWith(_ key: Key, sameAs signer: ProviderTokenSigner) -> Bool {
        guard let current = keys.withLock({ $0[key]?.signer }) else { return false }
        guard let now = try? current.key.publicKeyDER, let candidate = try? signer.key.publicKeyDER else { return false }
        return now == candidate
    }

    /// After a reload: `key` signs with `signer` (read from `file`) from now on. The token the
    /// old key signed is dropped, so the next request mints one with the new key (or adopts one
    /// the new key verifies); it is not taken back from the shared table either.
    func replaceKey(_ key: Key, signer: ProviderTokenSigner, file: String) throws {
        var signing = try Self.signing(key, signer: signer, file: file)
        database.withLock { _ in
            let old = state.withLock { entries -> String? in
                defer { entries[key] = nil }
                return entries[key]?.held.jwt
            }
            signing.superseded = old
            keys.withLock { $0[key] = signing }
            // Verdicts were given with the old key's public half.
            verdicts.withLock { $0.removeAll() }
        }
    }

    /// The `authorization` header value for `key`.
    func authorization(_ key: Key) throws -> String {
        if let entry = state.withLock({ $0[key] }), !policy.isDue(entry.held, now: clock()) {
            return entry.header
        }
        return Self.bearer + (try refresh(key)).jwt
    }

    /// APNs answered ExpiredProviderToken to a request that carried `authorization` (the
    /// header value it was built with), judged by `ProviderTokenPolicy.afterExpired`: an answer
    /// about a token this instance has replaced since changes nothing (one debug line); the
    /// token held is replaced unless the policy keeps it (held for less than the update window:
    /// the clocks disagree, and minting would only earn TooManyProviderTokenUpdates). Returns
    /// true when the token held was issued less than the update window ago by this host's
    /// clock: APNs counts over an hour, so this host's clock is off by more than 40 minutes,
    /// and every token it mints will be called expired too.
    @discardableResult
    func reportExpired(_ key: Key, carried authorization: String) -> Bool {
        let now = clock()
        guard let held = state.withLock({ $0[key]?.held }) else { return false }
        let carried = Self.jwt(authorization)
        switch policy.afterExpired(carried: carried, held: held, now: now) {
        case .stale:
            logger.debug("APNs called a provider token expired that this instance has replaced since the request was built; "
                         + "the token held is \(now - held.issuedAt)s old", ("key_id", .string(key.keyID)))
            return false
        case .replace:
            _ = try? refresh(key, rejected: held.jwt)
            return false
        case .keep(let clockOff):
            let warned = state.withLock { entries -> Bool in
                guard let entry = entries[key], entry.held.jwt == held.jwt else { return true }
                defer { entries[key]?.warnedExpired = true }
                return entry.warnedExpired
            }
            if !warned {
                logger.warning("APNs called a provider token expired that is \(now - held.issuedAt)s old and held "
                               + "\(now - held.adoptedAt)s; keeping it for the update window",
                               ("key_id", .string(key.keyID)))
            }
            return clockOff
        }
    }

    private static let bearer = "bearer "

    /// Whether a request that carried `authorization` was signed by the key `key` signs with
    /// now: it carried the token held, or one that key's public half verifies. A request built
    /// before a reload replaced the key file (SIGHUP) carried the old key's token: APNs's
    /// InvalidProviderToken answer to it judges the old key, not the one signing now, and is
    /// counted (`refusedReplacedKey`) instead of pausing the app that was just fixed.
    func signedByCurrentKey(_ key: Key, authorization: String) -> Bool {
        let carried = Self.jwt(authorization)
        if state.withLock({ $0[key]?.held.jwt }) == carried { return true }
        guard let publicKey = keys.withLock({ $0[key]?.publicKey }),
              let decoded = try? DecodedProviderToken(jwt: carried) else { return true }
        return decoded.keyID == key.keyID && decoded.issuer == key.teamID
            && publicKey.verify(signature: decoded.signature, message: decoded.signingInput)
    }

    /// InvalidProviderToken answers to requests signed by a key replaced since, per key, counted
    /// since the last line about them: one line a minute says how many.
    private let replacedKeyRefusals = Lock<[Key: (count: Int, loggedAt: Int64)]>([:])

    /// APNs called a token of a key replaced since invalid (`signedByCurrentKey` is false): the
    /// notification goes out again with the current key. One line a minute per key.
    func refusedReplacedKey(_ key: Key) {
        let now = clock()
        let count = replacedKeyRefusals.withLock { counts -> Int? in
            var entry = counts[key] ?? (0, Int64.min)
            entry.count += 1
            defer { counts[key] = entry }
            guard entry.loggedAt == Int64.min || now - entry.loggedAt >= 60 else { return nil }
            defer { entry = (0, now) }
            return entry.count
        }
        guard let count else { return }
        logger.warning("APNs called \(count) provider token(s) of key \(key.keyID) team \(key.teamID) invalid that the key file "
                       + "replaced on reload had signed; the key signing now is not judged by them, and their notifications "
                       + "are sent again with it",
                       ("event", "provider_token_of_replaced_key_refused"), ("key_id", .string(key.keyID)),
                       ("team_id", .string(key.teamID)), ("answers", .int(Int64(count))))
    }

    private static func jwt(_ authorization: String) -> String {
        authorization.hasPrefix(bearer) ? String(authorization.dropFirst(bearer.count)) : authorization
    }

    /// APNs answered InvalidProviderToken to a request that carried `authorization` (the token
    /// held when nil): removes that token from the shared table if the row still holds it, so
    /// that no instance adopts it again and the next to ask mints anew. This instance keeps
    /// the token it holds: its own key signed it, so another from the same key would fare no
    /// better, and the app is paused meanwhile.
    func reportInvalid(_ key: Key, carried authorization: String? = nil) {
        guard let refused = authorization.map(Self.jwt) ?? state.withLock({ $0[key]?.held.jwt }) else { return }
        database.withLock { connection in
            do {
                if connection == nil {
                    connection = try QueueSession.connect(url: databaseURL, applicationName: "pushd-tokens")
                }
                if try ProviderTokenStore().forget(connection!, keyID: key.keyID, teamID: key.teamID, token: refused) {
                    logger.warning("APNs called the shared provider token of key \(key.keyID) team \(key.teamID) invalid; "
                                   + "removed it from pushd.provider_tokens so that no instance takes it over",
                                   ("event", "provider_token_forgotten"), ("key_id", .string(key.keyID)),
                                   ("team_id", .string(key.teamID)))
                }
            } catch {
                onDatabaseError(error)
                connection?.close()
                connection = nil
                logger.warning("could not remove the provider token APNs called invalid from the database",
                               ("key_id", .string(key.keyID)), ("error", .string("\(error)")))
            }
        }
    }

    /// Whether this instance's own key signed `jwt` for `key`; the first time a token fails,
    /// one error line and `onForeign`. Called under `database`.
    private func isOwn(_ jwt: String, key: Key, mintedBy: String?) -> Bool {
        if let verdict = verdicts.withLock({ $0[jwt] }) { return verdict }
        var verdict = false
        let signing = keys.withLock { $0[key] }
        if let publicKey = signing?.publicKey, let decoded = try? DecodedProviderToken(jwt: jwt) {
            verdict = decoded.algorithm == "ES256" && decoded.keyID == key.keyID && decoded.issuer == key.teamID
                && publicKey.verify(signature: decoded.signature, message: decoded.signingInput)
        }
        verdicts.withLock {
            // Tokens change every hour or so per key: a handful is all there ever is to remember.
            if $0.count >= 64 { $0.removeAll() }
            $0[jwt] = verdict
        }
        if !verdict {
            let file = signing?.file ?? "(unknown)"
            let by = mintedBy.map { " (stored by instance \($0))" } ?? ""
            logger.error("the provider token stored for key \(key.keyID) team \(key.teamID)\(by) is not signed by this "
                         + "instance's key file \(file): the instances' key files differ, and the right one is the one APNs "
                         + "accepts; this instance signs with its own and stores that in place of it",
                         ("event", "provider_token_foreign"), ("key_id", .string(key.keyID)), ("team_id", .string(key.teamID)),
                         ("key_file", .string(file)), ("minted_by", .string(mintedBy ?? "")))
            onForeign(key)
        }
        return verdict
    }

    /// Age in seconds of the token in use per key, for the `pushd_jwt_age_seconds` gauge.
    func ages() -> [(Key, Double)] {
        let now = clock()
        return state.withLock { $0.map { ($0.key, Double(now - $0.value.held.issuedAt)) } }
    }

    /// The token `key` holds now, if any (for tests and status).
    func held(_ key: Key) -> ProviderTokenPolicy.Held? { state.withLock { $0[key]?.held } }

    /// Replaces the held token (or `rejected`, the one APNs called expired) with the shared
    /// one, minting a new one when the table's may not be adopted.
    private func refresh(_ key: Key, rejected: String? = nil) throws -> ProviderTokenPolicy.Held {
        return try database.withLock { connection -> ProviderTokenPolicy.Held in
            guard let signing = keys.withLock({ $0[key] }) else {
                throw CommandContext.Failure("no signing key \(key.keyID) for team \(key.teamID) is configured")
            }
            let signer = signing.signer
            let now = clock()
            let held = state.withLock { $0[key]?.held }
            if let held, held.jwt != rejected, !policy.isDue(held, now: now) { return held }
            let mint = { () throws -> (token: String, issuedAt: Timestamp) in
                let token = try signer.makeToken(issuedAt: self.clock())
                return (token.jwt, Timestamp(timeIntervalSince1970: Double(token.issuedAt)))
            }
            let maxAge = Double(policy.adoptableAgeSeconds)
            let fresh: (jwt: String, issuedAt: Int64)
            do {
                if connection == nil {
                    connection = try QueueSession.connect(url: databaseURL, applicationName: "pushd-tokens")
                }
                let store = ProviderTokenStore()
                // The held token is being replaced, so the table must not hand it back.
                var shared = try store.providerToken(connection!, keyID: key.keyID, teamID: key.teamID,
                                                     maxAge: maxAge, instance: instance,
                                                     rejected: rejected ?? held?.jwt ?? signing.superseded, mint: mint)
                // The token's own `iat` is what APNs judges, so ages are measured from it; a
                // stored token whose row looks fresh but whose `iat` is old is replaced.
                var issuedAt = Self.issuedAt(of: shared)
                var stored = true
                if !shared.minted, !replacesForeignTokens, !isOwn(shared.token, key: key, mintedBy: shared.mintedBy) {
                    // Signed with another key file, and this process does not replace it (nor
                    // re-mint over it below).
                    let local = try mint()
                    shared = SharedProviderToken(token: local.token, issuedAt: local.issuedAt, minted: true)
                    issuedAt = Self.issuedAt(of: shared)
                    stored = false
                }
                if stored, !policy.mayAdopt(issuedAt: issuedAt, now: now) {
                    shared = try store.providerToken(connection!, keyID: key.keyID, teamID: key.teamID,
                                                     maxAge: maxAge, instance: instance,
                                                     rejected: shared.token, mint: mint)
                    issuedAt = Self.issuedAt(of: shared)
                }
                if stored, !shared.minted, !isOwn(shared.token, key: key, mintedBy: shared.mintedBy) {
                    // Signed with another key file: never sent from here. Replaced under the
                    // row lock by this instance's own, unless an instance with this key file
                    // stored one meanwhile.
                    shared = try store.providerToken(connection!, keyID: key.keyID, teamID: key.teamID,
                                                     maxAge: maxAge, instance: instance,
                                                     rejected: shared.token, mint: mint)
                    issuedAt = Self.issuedAt(of: shared)
                    if !shared.minted, !isOwn(shared.token, key: key, mintedBy: shared.mintedBy) || !policy.mayAdopt(issuedAt: issuedAt, now: now) {
                        // Yet another key file stored its token in between: use one of our own, unshared.
                        let local = try mint()
                        shared = SharedProviderToken(token: local.token, issuedAt: local.issuedAt, minted: true)
                        issuedAt = Self.issuedAt(of: shared)
                        stored = false
                    }
                }
                fresh = (shared.token, issuedAt)
                if shared.minted {
                    logger.info(stored ? "minted a provider token and shared it" : "minted a provider token for this instance alone",
                                ("key_id", .string(key.keyID)))
                }
            } catch {
                // Without the database, a token minted here keeps the app sending; the next
                // refresh through the table brings every instance back to one token.
                onDatabaseError(error)
                connection?.close()
                connection = nil
                let local = try mint()
                fresh = (local.token, Int64(local.issuedAt.timeIntervalSince1970))
                logger.warning("could not share the provider token through the database; minted one locally",
                               ("key_id", .string(key.keyID)), ("error", .string("\(error)")))
            }
            if let held, held.jwt == fresh.jwt { return held }
            let adopted = ProviderTokenPolicy.Held(jwt: fresh.jwt, issuedAt: fresh.issuedAt, adoptedAt: now)
            state.withLock { $0[key] = Entry(held: adopted, header: Self.bearer + adopted.jwt) }
            onRefresh(key)
            return adopted
        }
    }

    private static func issuedAt(of token: QueueStore.SharedProviderToken) -> Int64 {
        (try? DecodedProviderToken(jwt: token.token).issuedAt) ?? Int64(token.issuedAt.timeIntervalSince1970.rounded())
    }

    func close() {
        database.withLock { connection in
            connection?.close()
            connection = nil
        }
    }
}
