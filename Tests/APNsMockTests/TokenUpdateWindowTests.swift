import APNs
@testable import APNsMock
import Foundation
import Testing

/// TooManyProviderTokenUpdates: a token change on a connection within the update window
/// (APNs's 20 minutes, configurable for tests) of the previous change.
@Suite("apns-mock provider token update window")
struct TokenUpdateWindowTests {
    static let now: Int64 = 1_800_000_000

    private func verifier(_ key: TestProviderKey) throws -> ProviderTokenVerifier {
        ProviderTokenVerifier(keys: [key.keyID: .init(teamID: key.teamID, publicKey: try ES256PublicKey(pem: key.publicKeyPEM))])
    }

    private func bearer(_ key: TestProviderKey, issuedAt: Int64) throws -> String {
        try key.signer.makeToken(issuedAt: issuedAt).authorizationValue
    }

    @Test func aConnectionsFirstTokenIsFreeButItsCreationCountsAsAChange() throws {
        let key = try TestProviderKey()
        let verifier = try verifier(key)
        var state = ProviderTokenState()
        // A connection opened with a token minted 30 minutes ago may switch at once...
        #expect(state.authorize(try bearer(key, issuedAt: Self.now - 1800), now: Self.now, verifier: verifier) == .accepted(first: true))
        #expect(state.authorize(try bearer(key, issuedAt: Self.now), now: Self.now + 1, verifier: verifier) == .accepted(first: false))
        // ...but not again within 20 minutes of that switch, whatever the new token's age.
        #expect(state.authorize(try bearer(key, issuedAt: Self.now + 1000), now: Self.now + 1200, verifier: verifier)
                == .rejected(status: 429, reason: .tooManyProviderTokenUpdates))
        #expect(state.authorize(try bearer(key, issuedAt: Self.now + 1000), now: Self.now + 1201, verifier: verifier) == .accepted(first: false))
    }

    @Test func switchingAwayFromATokenTakenOverLateIsRefusedWithinTheWindowOfTheSwitch() throws {
        let key = try TestProviderKey()
        let verifier = try verifier(key)
        var state = ProviderTokenState()
        #expect(state.authorize(try bearer(key, issuedAt: Self.now), now: Self.now, verifier: verifier) == .accepted(first: true))
        // A token minted at +1200 taken over at +2000, then left at +2400 when it is 20 minutes old:
        // only 400 s after the previous change.
        #expect(state.authorize(try bearer(key, issuedAt: Self.now + 1200), now: Self.now + 2000, verifier: verifier) == .accepted(first: false))
        #expect(state.authorize(try bearer(key, issuedAt: Self.now + 2400), now: Self.now + 2400, verifier: verifier)
                == .rejected(status: 429, reason: .tooManyProviderTokenUpdates))
    }

    @Test func theWindowIsConfigurable() throws {
        let key = try TestProviderKey()
        let verifier = try verifier(key)
        var state = ProviderTokenState(updateWindowSeconds: 5)
        #expect(state.authorize(try bearer(key, issuedAt: Self.now), now: Self.now, verifier: verifier) == .accepted(first: true))
        #expect(state.authorize(try bearer(key, issuedAt: Self.now + 4), now: Self.now + 4, verifier: verifier)
                == .rejected(status: 429, reason: .tooManyProviderTokenUpdates))
        #expect(state.authorize(try bearer(key, issuedAt: Self.now + 5), now: Self.now + 5, verifier: verifier) == .accepted(first: false))
    }

    @Test func aServerWithAShortWindowAcceptsAChangeItsDefaultWindowRefuses() throws {
        let key = try TestProviderKey()
        for (window, expected) in [(1200, [200, 429]), (2, [200, 200])] {
            try withMockServer({ configuration in
                configuration.authentication = .token(keys: [key.trusted], startAtOneStream: false)
                configuration.providerTokenUpdateWindowSeconds = window
            }) { server, port in
                // Two tokens 5 and 10 seconds old on one connection: the change comes at least
                // 5 seconds after the creation of the token it replaces, whichever goes first.
                let answers = try H2Client.send([.push(token: deviceToken(1), headers: [try key.header(age: 10)]),
                                                  .push(token: deviceToken(2), headers: [try key.header(age: 5)])], port: port)
                #expect(answers.map(\.status).sorted() == expected, "window \(window) s")
                #expect(server.stats.connectionsAccepted == 1)
            }
        }
    }

    @Test func theCommandLineSetsTheWindowAndRefusesZero() throws {
        guard case .serve(let configuration, _) = try MockCommandLine.parse(
            ["--cert", "c.pem", "--key", "k.pem", "--token-update-window", "3"]) else {
            Issue.record("not a serve command")
            return
        }
        #expect(configuration.providerTokenUpdateWindowSeconds == 3)
        #expect(throws: MockServerError.self) {
            _ = try MockCommandLine.parse(["--cert", "c.pem", "--key", "k.pem", "--token-update-window", "0"])
        }
    }
}
