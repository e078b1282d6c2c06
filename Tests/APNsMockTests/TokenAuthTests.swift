import APNs
import APNsMock
import Foundation
import Testing

@Suite("apns-mock token authentication")
struct TokenAuthTests {
    private func withTokenServer<T>(
        startAtOneStream: Bool = false, _ body: (APNsMockServer, UInt16, TestProviderKey) throws -> T
    ) throws -> T {
        let key = try TestProviderKey()
        return try withMockServer({ $0.authentication = .token(keys: [key.trusted], startAtOneStream: startAtOneStream) }) { server, port in
            try body(server, port, key)
        }
    }

    @Test func acceptsASignedTokenAndVerifiesItOncePerConnection() throws {
        try withTokenServer { server, port, key in
            let header = try key.header()
            let responses = try H2Client.send((0..<50).map { .push(token: deviceToken($0), headers: [header]) }, port: port)
            #expect(responses.allSatisfy { $0.status == 200 })
            #expect(server.stats.accepted == 50)
            #expect(server.stats.providerTokenVerifications == 1)
        }
    }

    @Test func answersMissingProviderTokenWithoutAuthorization() throws {
        try withTokenServer { _, port, _ in
            let response = try H2Client.send(.push(token: deviceToken(1)), port: port)
            #expect(response.status == 403)
            #expect(response.reason == "MissingProviderToken")
        }
    }

    @Test func answersInvalidProviderTokenForAnUnknownKeyAWrongTeamOrABadSignature() throws {
        try withTokenServer { server, port, trusted in
            let unknownKey = try TestProviderKey(keyID: "OTHERKEY12", teamID: trusted.teamID)
            let wrongTeam = try TestProviderKey(keyID: trusted.keyID, teamID: "OTHERTEAM1")
            let forged = try TestProviderKey(keyID: trusted.keyID, teamID: trusted.teamID)
            for header in [try unknownKey.header(), try wrongTeam.header(), try forged.header(), "authorization: bearer not.a.jwt",
                           "authorization: basic abc"] {
                let response = try H2Client.send(.push(token: deviceToken(1), headers: [header]), port: port)
                #expect(response.status == 403)
                #expect(response.reason == "InvalidProviderToken", "for \(header.prefix(40))")
            }
            #expect(server.stats.rejected("InvalidProviderToken") == 5)
        }
    }

    @Test func answersBadEnvironmentKeyInTokenToAKeyBoundToTheOtherEnvironment() throws {
        let sandboxKey = try TestProviderKey(keyID: "SANDBOXKEY")
        let productionKey = try TestProviderKey(keyID: "PRODKEY123")
        let anyKey = try TestProviderKey(keyID: "BOTHKEY123")
        var sandboxTrusted = sandboxKey.trusted
        sandboxTrusted.environment = .sandbox
        var productionTrusted = productionKey.trusted
        productionTrusted.environment = .production
        for development in [false, true] {
            try withMockServer({
                $0.authentication = .token(keys: [sandboxTrusted, productionTrusted, anyKey.trusted], startAtOneStream: false)
                $0.development = development
            }) { server, port in
                let wrong = development ? productionKey : sandboxKey
                let right = development ? sandboxKey : productionKey
                let refused = try H2Client.send(.push(token: deviceToken(1), headers: [try wrong.header()]), port: port)
                #expect(refused.status == 403)
                #expect(refused.reason == "BadEnvironmentKeyInToken", "development: \(development)")
                // The token is validated first: a forged one of the bound key is only invalid.
                let forged = try TestProviderKey(keyID: wrong.keyID, teamID: wrong.teamID)
                let invalid = try H2Client.send(.push(token: deviceToken(2), headers: [try forged.header()]), port: port)
                #expect(invalid.reason == "InvalidProviderToken")
                for key in [right, anyKey] {
                    let accepted = try H2Client.send(.push(token: deviceToken(3), headers: [try key.header()]), port: port)
                    #expect(accepted.status == 200, "\(key.keyID), development: \(development)")
                }
                #expect(server.stats.rejected("BadEnvironmentKeyInToken") == 1)
            }
        }
    }

    @Test func answersExpiredProviderTokenWhenIssuedMoreThanAnHourAgo() throws {
        try withTokenServer { _, port, key in
            let response = try H2Client.send(.push(token: deviceToken(1), headers: [try key.header(age: 3700)]), port: port)
            #expect(response.status == 403)
            #expect(response.reason == "ExpiredProviderToken")
            let fresh = try H2Client.send(.push(token: deviceToken(1), headers: [try key.header(age: 3500)]), port: port)
            #expect(fresh.status == 200)
        }
    }

    @Test func refusesATokenIssuedInTheFuture() throws {
        try withTokenServer { _, port, key in
            let response = try H2Client.send(.push(token: deviceToken(1), headers: [try key.header(age: -600)]), port: port)
            #expect(response.status == 403)
            #expect(response.reason == "InvalidProviderToken")
        }
    }

    @Test func answersTooManyProviderTokenUpdatesWhenAConnectionChangesTokenWithinTwentyMinutes() throws {
        try withTokenServer { server, port, key in
            let first = try key.header(age: 10)
            let second = try key.header(age: 0)
            #expect(first != second)
            let responses = try H2Client.send(
                [.push(token: deviceToken(1), headers: [first]), .push(token: deviceToken(2), headers: [second])], port: port)
            #expect(responses.map(\.status).sorted() == [200, 429])
            #expect(responses.compactMap(\.reason) == ["TooManyProviderTokenUpdates"])
            #expect(server.stats.connectionsAccepted == 1)
            let other = try H2Client.send(.push(token: deviceToken(3), headers: [second]), port: port)
            #expect(other.status == 200, "a new connection may use the new token at once")
        }
    }

    @Test func startsAtOneStreamAndRaisesTheLimitAfterTheFirstValidToken() throws {
        try withTokenServer(startAtOneStream: true) { _, port, key in
            let header = try key.header()
            let trace = try runNghttp(port: port, tokens: [deviceToken(1), deviceToken(2)], headers: ["apns-topic: com.example.app", header])
            #expect(trace.maxConcurrentStreamsReceived == [1, 1000])
        }
    }

    @Test func staysAtOneStreamWhileTokensAreInvalid() throws {
        try withTokenServer(startAtOneStream: true) { _, port, _ in
            let trace = try runNghttp(port: port, tokens: [deviceToken(1)], headers: ["apns-topic: com.example.app"])
            #expect(trace.maxConcurrentStreamsReceived == [1])
        }
    }

    @Test func rejectsAProviderKeyThatIsNotAPublicKeyWithTheKeyIDNamed() throws {
        let files = try TestCertificates.files()
        var configuration = MockConfiguration(certificateChainFile: files.serverCertificate, privateKeyFile: files.serverKey)
        configuration.authentication = .token(keys: [ProviderKey(keyID: "BROKENKEY1", teamID: "TEAM123456", publicKeyPEM: "nonsense")], startAtOneStream: true)
        #expect {
            _ = try APNsMockServer(configuration: configuration)
        } throws: { error in
            "\(error)".contains("BROKENKEY1")
        }
    }
}
