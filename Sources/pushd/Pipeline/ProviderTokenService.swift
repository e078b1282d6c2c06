import APNs
import Foundation
import QueueStore
import Synchronization

/// Hands out the provider token (JWT) of each signing key, shared by every pushd
/// instance through `pushd.provider_tokens`: read from the table while it is younger
/// than `refreshAge`, minted under the table's row lock by whichever instance notices
/// first, so all instances send one token per key and APNs never sees it change more
/// often than every 20 minutes.
///
/// Thread rule: any thread may ask for a token. The in-memory copy is under `state`;
/// the database connection is used only under `database`, which also serialises refreshes.
final class ProviderTokenService: @unchecked Sendable {
    struct Key: Hashable, Sendable {
        var keyID: String
        var teamID: String
    }

    struct Current: Sendable {
        var jwt: String
        var issuedAt: Int64
    }

    /// APNs rejects tokens older than 60 minutes; refresh at 50.
    let refreshAge: Int64
    /// Never replace a token younger than this (TooManyProviderTokenUpdates).
    let minimumAge: Int64 = 20 * 60
    private let databaseURL: String
    private let instance: String
    private let signers: [Key: ProviderTokenSigner]
    private let state = Mutex<[Key: Current]>([:])
    private let database = Mutex<PGConnection?>(nil)
    private let logger: Logger
    private let onRefresh: @Sendable (Key) -> Void
    private let onDatabaseError: @Sendable (any Error) -> Void

    init(databaseURL: String, instance: String, signers: [Key: ProviderTokenSigner], refreshAge: Int64 = 50 * 60,
         logger: Logger, onRefresh: @escaping @Sendable (Key) -> Void,
         onDatabaseError: @escaping @Sendable (any Error) -> Void) {
        self.databaseURL = databaseURL
        self.instance = instance
        self.signers = signers
        self.refreshAge = refreshAge
        self.logger = logger
        self.onRefresh = onRefresh
        self.onDatabaseError = onDatabaseError
    }

    static func now() -> Int64 { Int64(Date().timeIntervalSince1970) }

    /// The `authorization` header value for `key`.
    func authorization(_ key: Key) throws -> String {
        let now = Self.now()
        if let current = state.withLock({ $0[key] }), now - current.issuedAt < refreshAge {
            return "bearer " + current.jwt
        }
        return "bearer " + (try refresh(key, maxAge: refreshAge)).jwt
    }

    /// APNs answered ExpiredProviderToken: replace the token if it is old enough to be
    /// replaced; a younger one is kept (the clocks disagree, and minting would only earn
    /// TooManyProviderTokenUpdates).
    func reportExpired(_ key: Key) {
        let now = Self.now()
        guard let current = state.withLock({ $0[key] }) else { return }
        let age = now - current.issuedAt
        guard age >= minimumAge else {
            logger.warning("APNs called a provider token expired that is only \(age)s old; keeping it",
                           ("key_id", .string(key.keyID)))
            return
        }
        _ = try? refresh(key, maxAge: refreshAge, rejected: current.jwt)
    }

    /// Age in seconds of the token in use per key, for the `pushd_jwt_age_seconds` gauge.
    func ages() -> [(Key, Double)] {
        let now = Self.now()
        return state.withLock { $0.map { ($0.key, Double(now - $0.value.issuedAt)) } }
    }

    private func refresh(_ key: Key, maxAge: Int64, rejected: String? = nil) throws -> Current {
        guard let signer = signers[key] else {
            throw CommandContext.Failure("no signing key \(key.keyID) for team \(key.teamID) is configured")
        }
        return try database.withLock { connection -> Current in
            let now = Self.now()
            if let current = state.withLock({ $0[key] }), now - current.issuedAt < maxAge, current.jwt != rejected {
                return current
            }
            let mint = { () throws -> (token: String, issuedAt: Date) in
                let token = try signer.makeToken(issuedAt: Self.now())
                return (token.jwt, Date(timeIntervalSince1970: Double(token.issuedAt)))
            }
            let fresh: Current
            do {
                if connection == nil {
                    connection = try QueueSession.connect(url: databaseURL, applicationName: "pushd-tokens")
                }
                let store = ProviderTokenStore()
                var shared = try store.providerToken(connection!, keyID: key.keyID, teamID: key.teamID,
                                                     maxAge: TimeInterval(maxAge), instance: instance,
                                                     rejected: rejected, mint: mint)
                // The token's own `iat` is what APNs judges, so ages are measured from it; a
                // stored token whose row looks fresh but whose `iat` is old is replaced.
                var issuedAt = Self.issuedAt(of: shared)
                if now - issuedAt >= maxAge {
                    shared = try store.providerToken(connection!, keyID: key.keyID, teamID: key.teamID,
                                                     maxAge: TimeInterval(maxAge), instance: instance,
                                                     rejected: shared.token, mint: mint)
                    issuedAt = Self.issuedAt(of: shared)
                }
                fresh = Current(jwt: shared.token, issuedAt: issuedAt)
                if shared.minted {
                    logger.info("minted a provider token and shared it", ("key_id", .string(key.keyID)))
                }
            } catch {
                // Without the database, a token minted here keeps the app sending; the next
                // refresh through the table brings every instance back to one token.
                onDatabaseError(error)
                connection?.close()
                connection = nil
                let local = try mint()
                fresh = Current(jwt: local.token, issuedAt: Int64(local.issuedAt.timeIntervalSince1970))
                logger.warning("could not share the provider token through the database; minted one locally",
                               ("key_id", .string(key.keyID)), ("error", .string("\(error)")))
            }
            let changed = state.withLock { states -> Bool in
                let changed = states[key]?.jwt != fresh.jwt
                states[key] = fresh
                return changed
            }
            if changed { onRefresh(key) }
            return fresh
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
