import APNs
import Foundation
import Testing

@Suite struct ProviderTokenTests {
    static let keyID = "ABC123DEFG"
    static let teamID = "DEF123GHIJ"

    static func loadKey() throws -> (SigningKey, TestSupport.GeneratedKey) {
        let generated = try TestSupport.generateKey()
        return (try SigningKey(contentsOfFile: generated.privateKeyPath, keyID: keyID, teamID: teamID), generated)
    }

    @Test func tokenHasTheDocumentedHeaderAndClaims() throws {
        let (key, _) = try Self.loadKey()
        let token = try ProviderTokenSigner(key: key).makeToken(issuedAt: 1_700_000_000)
        let parts = token.jwt.split(separator: ".", omittingEmptySubsequences: false)
        #expect(parts.count == 3)
        #expect(Base64URL.decode(String(parts[0])) == Array(#"{"alg":"ES256","kid":"ABC123DEFG"}"#.utf8))
        #expect(Base64URL.decode(String(parts[1])) == Array(#"{"iss":"DEF123GHIJ","iat":1700000000}"#.utf8))
        #expect(Base64URL.decode(String(parts[2]))?.count == 64)
        #expect(!token.jwt.contains("="))
        #expect(token.authorizationValue.hasPrefix("bearer "))
    }

    @Test func tokenVerifiesWithThePublicKeyFromPEMThroughEVPDigestVerify() throws {
        let (key, generated) = try Self.loadKey()
        let publicKey = try ES256PublicKey(pem: generated.publicPEM)
        for issuedAt in Int64(1_700_000_000)..<1_700_000_020 {
            let decoded = try DecodedProviderToken(jwt: try ProviderTokenSigner(key: key).makeToken(issuedAt: issuedAt).jwt)
            #expect(decoded.algorithm == "ES256")
            #expect(decoded.keyID == Self.keyID)
            #expect(decoded.issuer == Self.teamID)
            #expect(decoded.issuedAt == issuedAt)
            #expect(publicKey.verify(signature: decoded.signature, message: decoded.signingInput))
            var tampered = decoded.signingInput
            tampered[tampered.count - 1] ^= 1
            #expect(!publicKey.verify(signature: decoded.signature, message: tampered))
        }
    }

    @Test func oneKeySignsFromManyThreadsAtOnce() async throws {
        let (key, _) = try Self.loadKey()
        let publicKey = try key.publicKey
        let signer = ProviderTokenSigner(key: key)
        let results = try await withThrowingTaskGroup(of: Bool.self) { group in
            for t in 0..<8 {
                group.addTask {
                    var ok = true
                    for i in 0..<40 {
                        let decoded = try DecodedProviderToken(jwt: try signer.makeToken(issuedAt: Int64(t * 1000 + i)).jwt)
                        ok = ok && publicKey.verify(signature: decoded.signature, message: decoded.signingInput)
                    }
                    return ok
                }
            }
            var all = [Bool]()
            for try await ok in group { all.append(ok) }
            return all
        }
        #expect(results == Array(repeating: true, count: 8))
    }

    @Test func aDifferentKeyDoesNotVerify() throws {
        let (key, _) = try Self.loadKey()
        let (other, _) = try Self.loadKey()
        let decoded = try DecodedProviderToken(jwt: try ProviderTokenSigner(key: key).makeToken(issuedAt: 1).jwt)
        #expect(!(try other.publicKey).verify(signature: decoded.signature, message: decoded.signingInput))
        #expect(try key.publicKey.verify(signature: decoded.signature, message: decoded.signingInput))
    }

    /// The openssl command checks the DER form of the same signature: proof that r‖s was
    /// produced and padded correctly, independent of this module's own verifier.
    @Test func opensslCommandVerifiesTheToken() throws {
        let (key, generated) = try Self.loadKey()
        for issuedAt in Int64(1_700_000_000)..<1_700_000_005 {
            let decoded = try DecodedProviderToken(jwt: try ProviderTokenSigner(key: key).makeToken(issuedAt: issuedAt).jwt)
            let der = try #require(ECDSASignature.derFromRaw(decoded.signature))
            let dir = generated.directory
            let messagePath = dir.appendingPathComponent("input-\(issuedAt)").path
            let signaturePath = dir.appendingPathComponent("signature-\(issuedAt).der").path
            try Data(decoded.signingInput).write(to: URL(fileURLWithPath: messagePath))
            try Data(der).write(to: URL(fileURLWithPath: signaturePath))
            let output = try TestSupport.run(TestSupport.openssl, ["dgst", "-sha256", "-verify", generated.publicKeyPath, "-signature", signaturePath, messagePath])
            #expect(String(decoding: output, as: UTF8.self).contains("Verified OK"))
        }
    }

    /// The other direction: a signature made by the openssl command verifies here.
    @Test func opensslCommandSignatureVerifiesAfterConversionToRaw() throws {
        let generated = try TestSupport.generateKey()
        let message = Array("header.claims".utf8)
        let messagePath = generated.directory.appendingPathComponent("m").path
        try Data(message).write(to: URL(fileURLWithPath: messagePath))
        let der = try TestSupport.run(TestSupport.openssl, ["dgst", "-sha256", "-sign", generated.privateKeyPath, messagePath])
        let raw = try #require(ECDSASignature.rawFromDER(der))
        #expect(raw.count == 64)
        #expect(try ES256PublicKey(pem: generated.publicPEM).verify(signature: raw, message: message))
    }

    @Test func derConversionPadsShortIntegers() throws {
        var raw = [UInt8](repeating: 0, count: 64)
        raw[31] = 1
        raw[32] = 0x80
        let der = try #require(ECDSASignature.derFromRaw(raw))
        #expect(der[0...4] == [0x30, 0x26, 0x02, 0x01, 0x01])
        #expect(der[5...7] == [0x02, 0x21, 0x00])
        #expect(ECDSASignature.rawFromDER(der) == raw)
        #expect(ECDSASignature.derFromRaw([1, 2]) == nil)
        #expect(ECDSASignature.rawFromDER([0x30, 0x02, 0x02, 0x00]) == nil)
    }

    @Test func missingFileIsAClearError() {
        #expect(throws: SigningKeyError.fileNotFound(path: "/nonexistent/AuthKey.p8")) {
            try SigningKey(contentsOfFile: "/nonexistent/AuthKey.p8", keyID: Self.keyID, teamID: Self.teamID)
        }
    }

    @Test func devicesAndDirectoriesAreNotReadAsKeys() {
        #expect(throws: SigningKeyError.unreadableFile(path: "/dev/zero", detail: "it is not a regular file")) {
            try SigningKey(contentsOfFile: "/dev/zero", keyID: Self.keyID, teamID: Self.teamID)
        }
        #expect(throws: SigningKeyError.unreadableFile(path: "/tmp", detail: "it is a directory")) {
            try SigningKey(contentsOfFile: "/tmp", keyID: Self.keyID, teamID: Self.teamID)
        }
    }

    @Test func aKeyFileFarLargerThanAKeyIsRefusedBeforeReading() throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("huge-\(UUID().uuidString).p8").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect(FileManager.default.createFile(atPath: path, contents: Data(count: 100_000)))
        #expect(throws: SigningKeyError.unreadableFile(path: path, detail: "100000 bytes is far too large for a key file")) {
            try SigningKey(contentsOfFile: path, keyID: Self.keyID, teamID: Self.teamID)
        }
    }

    @Test func keyFilesReadableByOthersAreFlagged() throws {
        let generated = try TestSupport.generateKey()
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: generated.privateKeyPath)
        #expect(SigningKey.permissionWarning(forKeyFile: generated.privateKeyPath) == nil)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: generated.privateKeyPath)
        #expect(SigningKey.permissionWarning(forKeyFile: generated.privateKeyPath)?.contains("every user") == true)
    }

    @Test func encryptedKeyFailsInsteadOfPromptingForAPassword() throws {
        let generated = try TestSupport.generateKey()
        let encrypted = generated.directory.appendingPathComponent("encrypted.p8").path
        try TestSupport.run(TestSupport.openssl, ["pkcs8", "-topk8", "-in", generated.privateKeyPath, "-out", encrypted, "-passout", "pass:secret"])
        #expect(throws: SigningKeyError.self) { try SigningKey(contentsOfFile: encrypted, keyID: Self.keyID, teamID: Self.teamID) }
    }

    @Test func keyThatIsNotP256IsRejected() throws {
        let p384 = try TestSupport.generateKey(algorithm: ["-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-384"])
        do {
            _ = try SigningKey(pem: p384.privatePEM, keyID: Self.keyID, teamID: Self.teamID)
            Issue.record("P-384 key accepted")
        } catch {
            #expect(error.description.contains("secp384r1"))
            #expect(error.description.contains("P-256"))
        }
        let rsa = try TestSupport.generateKey(algorithm: ["-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:1024"])
        #expect(throws: SigningKeyError.self) { try SigningKey(pem: rsa.privatePEM, keyID: Self.keyID, teamID: Self.teamID) }
        #expect(throws: ES256PublicKeyError.self) { try ES256PublicKey(pem: rsa.publicPEM) }
    }

    @Test func garbageIsNotAKey() {
        #expect(throws: SigningKeyError.self) { try SigningKey(pem: "hello", keyID: Self.keyID, teamID: Self.teamID) }
        #expect(throws: ES256PublicKeyError.self) { try ES256PublicKey(pem: "hello") }
        #expect(throws: ES256PublicKeyError.self) { try ES256PublicKey(subjectPublicKeyInfoDER: [0x30, 0x00]) }
    }

    @Test(arguments: ["ABC123DEF", "ABC123DEFGH", "ABC123DEF!", ""])
    func malformedKeyIDAndTeamIDAreRejected(bad: String) throws {
        let generated = try TestSupport.generateKey()
        #expect(throws: SigningKeyError.invalidKeyID(bad)) { try SigningKey(pem: generated.privatePEM, keyID: bad, teamID: Self.teamID) }
        #expect(throws: SigningKeyError.invalidTeamID(bad)) { try SigningKey(pem: generated.privatePEM, keyID: Self.keyID, teamID: bad) }
    }

    @Test func verifierAnswersLikeAPNs() throws {
        let (key, _) = try Self.loadKey()
        let (stranger, _) = try Self.loadKey()
        let verifier = ProviderTokenVerifier(keys: [Self.keyID: .init(teamID: Self.teamID, publicKey: try key.publicKey)])
        let now: Int64 = 1_700_000_000
        let good = try ProviderTokenSigner(key: key).makeToken(issuedAt: now - 10)
        #expect(verifier.check(authorization: good.authorizationValue, now: now) == nil)
        #expect(verifier.check(authorization: "Bearer " + good.jwt, now: now) == nil)
        #expect(verifier.check(authorization: nil, now: now) == .missingProviderToken)
        #expect(verifier.check(authorization: "bearer abc.def", now: now) == .invalidProviderToken)
        #expect(verifier.check(authorization: good.jwt, now: now) == .invalidProviderToken)
        #expect(verifier.check(authorization: good.authorizationValue, now: now + 3700) == .expiredProviderToken)
        #expect(verifier.check(authorization: good.authorizationValue, now: now - 3600) == .invalidProviderToken)
        let forged = try ProviderTokenSigner(key: stranger).makeToken(issuedAt: now)
        #expect(verifier.check(authorization: forged.authorizationValue, now: now) == .invalidProviderToken)
        let otherTeam = try SigningKey(pem: try String(contentsOfFile: TestSupport.generateKey().privateKeyPath, encoding: .utf8), keyID: Self.keyID, teamID: "ZZZZZZZZZZ")
        #expect(verifier.check(authorization: try ProviderTokenSigner(key: otherTeam).makeToken(issuedAt: now).authorizationValue, now: now) == .invalidProviderToken)
    }

    @Test(arguments: ["", "a", "a.b", "a.b.c.d", "....", "e30.e30.", "!!.!!.!!"])
    func decodingMalformedTokensFailsCleanly(jwt: String) {
        #expect(throws: ProviderTokenDecodingError.self) { try DecodedProviderToken(jwt: jwt) }
    }

    @Test func base64URLRoundTripsEveryLength() {
        var generator = SeededGenerator(seed: 7)
        for length in 0..<70 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            let text = Base64URL.encode(bytes)
            #expect(!text.contains("=") && !text.contains("+") && !text.contains("/"))
            #expect(Base64URL.decode(text) == bytes)
        }
        #expect(Base64URL.decode("A") == nil)
        #expect(Base64URL.decode("AB==") == nil)
        #expect(Base64URL.decode("AA") == [0])
        #expect(Base64URL.decode("AB") == nil, "non-zero trailing bits")
    }
}

@Suite struct ProviderTokenCacheTests {
    static func makeCache(refresh: Int64 = 3000) throws -> ProviderTokenCache {
        let generated = try TestSupport.generateKey()
        return ProviderTokenCache(key: try SigningKey(pem: generated.privatePEM, keyID: "ABC123DEFG", teamID: "DEF123GHIJ"),
                                  policy: try ProviderTokenPolicy(refreshSeconds: refresh))
    }

    @Test func sameTokenUntilFiftyMinutesOld() throws {
        let cache = try Self.makeCache()
        let t0: Int64 = 1_700_000_000
        let first = try cache.token(now: t0)
        #expect(try cache.token(now: t0 + 2999) == first)
        let second = try cache.token(now: t0 + 3000)
        #expect(second != first)
        #expect(second.issuedAt == t0 + 3000)
        #expect(cache.mintCount == 2)
    }

    @Test func theShortestRefreshStillKeepsATokenBeyondTwentyMinutes() throws {
        let cache = try Self.makeCache(refresh: 1200)
        let t0: Int64 = 1_700_000_000
        let first = try cache.token(now: t0)
        #expect(try cache.token(now: t0 + 1200) == first)
        #expect(try cache.token(now: t0 + 1201) != first)
    }

    @Test func expiredProviderTokenForcesAMintOnlyForAnOldCurrentToken() throws {
        let cache = try Self.makeCache()
        let t0: Int64 = 1_700_000_000
        let first = try cache.token(now: t0)
        #expect(try cache.tokenAfterExpiredProviderToken(rejected: first.jwt, now: t0 + 600) == first, "too young to replace")
        let second = try cache.tokenAfterExpiredProviderToken(rejected: first.jwt, now: t0 + 1300)
        #expect(second != first)
        #expect(try cache.tokenAfterExpiredProviderToken(rejected: first.jwt, now: t0 + 1400) == second, "already replaced")
        #expect(try cache.tokenAfterExpiredProviderToken(rejected: first.jwt, now: t0 + 2600) == second,
                "an answer about the replaced token does not replace the one held, even outside the window")
        #expect(cache.mintCount == 2)
    }

    @Test func clockSteppingFarBackReplacesATokenFromTheFuture() throws {
        let cache = try Self.makeCache()
        let first = try cache.token(now: 1_700_000_000)
        #expect(try cache.token(now: 1_700_000_000 - 60) == first, "a small step back keeps the token")
        let second = try cache.token(now: 1_700_000_000 - 3600)
        #expect(second != first)
        #expect(second.issuedAt == 1_700_000_000 - 3600)
        #expect(try cache.token(now: 1_700_000_000 - 3500) == second)
    }

    @Test func tokensReadBackFromTheirText() throws {
        let cache = try Self.makeCache()
        let minted = try cache.token(now: 1_700_000_000)
        #expect(try ProviderToken(jwt: minted.jwt) == minted)
        #expect(throws: ProviderTokenDecodingError.self) { try ProviderToken(jwt: "x.y.z") }
    }

    @Test func manyThreadsGetOneToken() async throws {
        let cache = try Self.makeCache()
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<64 { group.addTask { try cache.token(now: 1_700_000_000).jwt } }
            var all = Set<String>()
            for try await jwt in group { all.insert(jwt) }
            return all
        }
        #expect(tokens.count == 1)
        #expect(cache.mintCount == 1)
    }
}

/// `ProviderTokenPolicy` over hours of simulated time.
@Suite struct ProviderTokenPolicyTests {
    static let t0: Int64 = 1_800_000_000

    private func held(issuedAt: Int64, adoptedAt: Int64? = nil) -> ProviderTokenPolicy.Held {
        ProviderTokenPolicy.Held(jwt: "jwt-\(issuedAt)", issuedAt: issuedAt, adoptedAt: adoptedAt ?? issuedAt)
    }

    @Test func refreshSettingsOutsideTwentyToFiftyFiveMinutesAreRefusedWithTheRange() throws {
        for refresh: Int64 in [0, 60, 1199, 3301, 3600, 7200] {
            #expect(throws: ProviderTokenPolicyError.refreshOutOfRange(refresh, 1200...3300)) {
                try ProviderTokenPolicy(refreshSeconds: refresh)
            }
        }
        for refresh: Int64 in [1200, 3000, 3300] { _ = try ProviderTokenPolicy(refreshSeconds: refresh) }
        #expect(try ProviderTokenPolicy().refreshSeconds == 3000)
        #expect("\(ProviderTokenPolicyError.refreshOutOfRange(60, 1200...3300))".contains("outside 1200–3300 s"))
        #expect(throws: ProviderTokenPolicyError.updateWindowOutOfRange(1201)) {
            try ProviderTokenPolicy(refreshSeconds: 3000, updateWindowSeconds: 1201)
        }
    }

    @Test func aTokenIsReplacedAtTheRefreshAgeAndNotBefore() throws {
        let policy = try ProviderTokenPolicy(refreshSeconds: 3000)
        #expect(policy.isDue(nil, now: Self.t0))
        let token = held(issuedAt: Self.t0)
        #expect(!policy.isDue(token, now: Self.t0 + 2999))
        #expect(policy.isDue(token, now: Self.t0 + 3000))
    }

    @Test func aTokenTakenOverIsHeldForTheWindowBeyondItsRefreshAge() throws {
        let policy = try ProviderTokenPolicy(refreshSeconds: 1200)
        // Minted elsewhere at t0, taken over at t0 + 1000.
        let token = held(issuedAt: Self.t0, adoptedAt: Self.t0 + 1000)
        #expect(!policy.isDue(token, now: Self.t0 + 1200))
        #expect(!policy.isDue(token, now: Self.t0 + 2200))
        #expect(policy.isDue(token, now: Self.t0 + 2201))
    }

    @Test func onlyTokensThatCanBeHeldForTheWindowBeforeTheHourAreTakenOver() throws {
        let policy = try ProviderTokenPolicy(refreshSeconds: 3300)
        // 3600 − 300 of margin − 1200 of hold.
        #expect(policy.adoptableAgeSeconds == 2100)
        #expect(policy.mayAdopt(issuedAt: Self.t0 - 2099, now: Self.t0))
        #expect(!policy.mayAdopt(issuedAt: Self.t0 - 2100, now: Self.t0))
        #expect(!policy.mayAdopt(issuedAt: Self.t0 + 301, now: Self.t0), "an iat in the future")
        #expect(try ProviderTokenPolicy(refreshSeconds: 1500).adoptableAgeSeconds == 1500)
    }

    @Test func expiredProviderTokenReplacesOnlyOutsideTheWindow() throws {
        let policy = try ProviderTokenPolicy()
        let token = held(issuedAt: Self.t0, adoptedAt: Self.t0 + 100)
        #expect(!policy.mayReplaceAfterExpired(token, now: Self.t0 + 1300))
        #expect(policy.mayReplaceAfterExpired(token, now: Self.t0 + 1301))
    }

    /// Five requests with one token in flight, all answered ExpiredProviderToken: the first
    /// answer replaces the token, and the other four are about the token replaced, not the one
    /// just minted, which a clock 40 minutes off would explain.
    @Test func anExpiryIsJudgedAgainstTheTokenTheRequestCarried() throws {
        let policy = try ProviderTokenPolicy(refreshSeconds: 3300)
        let old = held(issuedAt: Self.t0)
        #expect(policy.afterExpired(carried: old.jwt, held: old, now: Self.t0 + 3000) == .replace)
        let new = held(issuedAt: Self.t0 + 3000)
        #expect(policy.afterExpired(carried: old.jwt, held: new, now: Self.t0 + 3000) == .stale)
        #expect(policy.afterExpired(carried: old.jwt, held: new, now: Self.t0 + 3001) == .stale)
        // The token just minted called expired itself: this host's clock is off.
        #expect(policy.afterExpired(carried: new.jwt, held: new, now: Self.t0 + 3001) == .keep(clockOff: true))
        // A token taken over near its hour and called expired within the window of adopting it: kept, the clock is fine.
        let adopted = held(issuedAt: Self.t0, adoptedAt: Self.t0 + 2000)
        #expect(policy.afterExpired(carried: adopted.jwt, held: adopted, now: Self.t0 + 2100) == .keep(clockOff: false))
    }

    /// One holder sending every minute for six hours, taking over whatever a fleet shares:
    /// its token never changes twice within the window and is never sent older than 55 minutes.
    @Test func overSixHoursNoChangeComesWithinTheWindowAndNoTokenIsSentExpired() throws {
        for refresh: Int64 in [1200, 2000, 3000, 3300] {
            let policy = try ProviderTokenPolicy(refreshSeconds: refresh)
            var current: ProviderTokenPolicy.Held?
            var lastChange: Int64?
            // The fleet's shared token, minted by another instance every `refresh` seconds
            // starting 17 minutes before this holder's first send.
            func shared(at now: Int64) -> Int64 { now - ((now - (Self.t0 - 1020)) % refresh) }
            for now in stride(from: Self.t0, to: Self.t0 + 6 * 3600, by: 60) {
                if policy.isDue(current, now: now) {
                    let offered = shared(at: now)
                    let issuedAt = policy.mayAdopt(issuedAt: offered, now: now) && offered != current?.issuedAt ? offered : now
                    if current != nil, let lastChange { #expect(now - lastChange > policy.updateWindowSeconds) }
                    if current != nil { lastChange = now }
                    current = ProviderTokenPolicy.Held(jwt: "\(issuedAt)", issuedAt: issuedAt, adoptedAt: now)
                }
                let age = now - current!.issuedAt
                #expect(age < 3300, "refresh \(refresh): token \(age) s old at \(now - Self.t0)")
            }
        }
    }
}
