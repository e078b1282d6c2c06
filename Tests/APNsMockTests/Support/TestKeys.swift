import APNs
import Posix
import APNsMock
import Foundation

/// A P-256 provider key made with the openssl command, as Apple's .p8 keys are.
struct TestProviderKey {
    let signer: ProviderTokenSigner
    let publicKeyPEM: String
    var keyID: String { signer.key.keyID }
    var teamID: String { signer.key.teamID }

    init(keyID: String = "KEY1234567", teamID: String = "TEAM123456") throws {
        let directory = try TestCertificates.files().directory
        let file = directory + "/provider-\(UUID().uuidString).p8"
        _ = try runProcess("/usr/bin/openssl", ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", file])
        let publicKey = try runProcess("/usr/bin/openssl", ["pkey", "-in", file, "-pubout"])
        signer = ProviderTokenSigner(key: try SigningKey(contentsOfFile: file, keyID: keyID, teamID: teamID))
        publicKeyPEM = publicKey.output
    }

    var trusted: ProviderKey { ProviderKey(keyID: keyID, teamID: teamID, publicKeyPEM: publicKeyPEM) }

    /// "authorization: bearer …" for a token issued `age` seconds ago.
    func header(age: Int64 = 0) throws -> String {
        "authorization: " + (try signer.makeToken(issuedAt: Int64(Timestamp().timeIntervalSince1970) - age)).authorizationValue
    }
}
