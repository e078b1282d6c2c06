import PushdTestSupport
import Posix
import Foundation
import QueueStore
import Locking
import Synchronization
import Testing

@Suite struct ProviderTokenStoreTests {
    let store = ProviderTokenStore()

    @Test func aFreshTokenIsReadWithoutMintingAndAStaleOneIsReplaced() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let first = try store.providerToken(connection, keyID: "KEY1", teamID: "TEAM", maxAge: 3000) { ("jwt-1", Timestamp()) }
            #expect(first.minted && first.token == "jwt-1")
            let second = try store.providerToken(connection, keyID: "KEY1", teamID: "TEAM", maxAge: 3000) {
                Issue.record("minted although a fresh token was stored")
                return ("jwt-unexpected", Timestamp())
            }
            #expect(!second.minted && second.token == "jwt-1")
            try connection.query("UPDATE pushd.provider_tokens SET issued_at = now() - interval '51 minutes'")
            let third = try store.providerToken(connection, keyID: "KEY1", teamID: "TEAM", maxAge: 3000) { ("jwt-2", Timestamp()) }
            #expect(third.minted && third.token == "jwt-2")
            let otherKey = try store.providerToken(connection, keyID: "KEY2", teamID: "TEAM", maxAge: 3000) { ("jwt-k2", Timestamp()) }
            #expect(otherKey.token == "jwt-k2")
        }
    }

    @Test func instancesAskingAtOnceShareOneMintedToken() throws {
        try IsolatedDatabase.with { database in
            let mints = Atomic<Int>(0)
            let seen = Lock<Set<String>>([])
            let failures = Lock<[String]>([])
            DispatchQueue.concurrentPerform(iterations: 6) { instance in
                do {
                    let connection = try database.connect()
                    let token = try store.providerToken(connection, keyID: "KEY", teamID: "TEAM", maxAge: 3000,
                                                        instance: "instance-\(instance)") {
                        mints.add(1, ordering: .relaxed)
                        usleep(50_000)
                        return ("jwt-from-\(instance)", Timestamp())
                    }
                    seen.withLock { _ = $0.insert(token.token) }
                } catch {
                    failures.withLock { $0.append("\(error)") }
                }
            }
            #expect(failures.withLock { $0 } == [])
            #expect(mints.load(ordering: .relaxed) == 1)
            #expect(seen.withLock { $0.count } == 1)
        }
    }

    @Test func aFailingMintLeavesTheStoredTokenUntouched() throws {
        struct SigningFailed: Error {}
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            _ = try store.providerToken(connection, keyID: "K", teamID: "T", maxAge: 3000) { ("old", Timestamp()) }
            try connection.query("UPDATE pushd.provider_tokens SET issued_at = now() - interval '2 hours'")
            #expect(throws: SigningFailed.self) {
                _ = try store.providerToken(connection, keyID: "K", teamID: "T", maxAge: 3000) { throw SigningFailed() }
            }
            #expect(try connection.query("SELECT token FROM pushd.provider_tokens").require(String.self, row: 0, column: 0) == "old")
        }
    }

    /// A token APNs refused goes from the table only while the row still holds it: a row
    /// another instance has replaced meanwhile keeps its newer token.
    @Test func forgettingARefusedTokenRemovesOnlyThatToken() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            _ = try store.providerToken(connection, keyID: "KEY", teamID: "TEAM", maxAge: 3000, instance: "a") { ("jwt-a", Timestamp()) }
            let read = try store.providerToken(connection, keyID: "KEY", teamID: "TEAM", maxAge: 3000) { ("jwt-unexpected", Timestamp()) }
            #expect(read.mintedBy == "a")
            #expect(try !store.forget(connection, keyID: "KEY", teamID: "TEAM", token: "jwt-other"))
            #expect(try store.forget(connection, keyID: "KEY", teamID: "TEAM", token: "jwt-a"))
            let next = try store.providerToken(connection, keyID: "KEY", teamID: "TEAM", maxAge: 3000, instance: "b") { ("jwt-b", Timestamp()) }
            #expect(next.minted && next.token == "jwt-b")
        }
    }
}
