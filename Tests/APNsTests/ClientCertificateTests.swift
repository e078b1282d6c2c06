import APNs
import Posix
import Foundation
import Testing

@Suite struct ClientCertificateTests {
    struct Files {
        var directory: URL
        var certificate: String
        var key: String
    }

    static func hex(_ bytes: [UInt8]) -> String { bytes.map { String(format: "%02X", $0) }.joined() }

    static func utf8String(_ s: String) -> [UInt8] { [0x0C, UInt8(s.utf8.count)] + Array(s.utf8) }
    static func sequence(_ content: [UInt8]) -> [UInt8] { [0x30, UInt8(content.count)] + content }

    /// A certificate shaped like Apple's, made with the openssl command.
    static func makeCertificate(extensions: [String]) throws -> Files {
        let dir = try TestSupport.temporaryDirectory()
        let cert = dir.appendingPathComponent("cert.pem").path
        let key = dir.appendingPathComponent("key.pem").path
        var arguments = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key, "-out", cert,
                         "-days", "30", "-subj", "/UID=com.example.app/CN=Apple Push Services: com.example.app"]
        for e in extensions { arguments += ["-addext", e] }
        try TestSupport.run(TestSupport.openssl, arguments)
        return Files(directory: dir, certificate: cert, key: key)
    }

    @Test func readsSubjectDatesAndDevelopmentEnvironment() throws {
        let files = try Self.makeCertificate(extensions: ["1.2.840.113635.100.6.3.1=DER:0500"])
        let info = try ClientCertificate.inspectPEM(certificateFile: files.certificate, keyFile: files.key)
        #expect(info.userID == "com.example.app")
        #expect(info.commonName == "Apple Push Services: com.example.app")
        #expect(info.environments == [.sandbox])
        #expect(info.topics == ["com.example.app"])
        #expect(info.notAfter.timeIntervalSince(info.notBefore) == 30 * 86400)
        #expect(info.problems(environment: .sandbox, topic: "com.example.app") == [])
        #expect(info.problems(environment: .sandbox, topic: "com.example.app.voip") == [], "suffixes of the bundle id are covered")
        #expect(info.problems(environment: .production, topic: "com.example.app").first?.contains("not production") == true)
        #expect(info.problems(environment: .sandbox, topic: "com.other.app").first?.contains("not com.other.app") == true)
        #expect(info.problems(environment: .sandbox, topic: nil, now: Timestamp().addingTimeInterval(40 * 86400)).first?.contains("expired") == true)
    }

    @Test func universalCertificateListsItsTopicsAndBothEnvironments() throws {
        let topics = Self.sequence(Self.utf8String("com.example.app") + Self.sequence(Self.utf8String("app"))
                                   + Self.utf8String("com.example.app.voip") + Self.sequence(Self.utf8String("voip")))
        let files = try Self.makeCertificate(extensions: [
            "1.2.840.113635.100.6.3.1=DER:0500", "1.2.840.113635.100.6.3.2=DER:0500",
            "1.2.840.113635.100.6.3.6=DER:" + Self.hex(topics),
        ])
        let info = try ClientCertificate.inspectPEM(certificateFile: files.certificate, keyFile: files.key)
        #expect(info.environments == [.sandbox, .production])
        #expect(info.topics == ["com.example.app", "com.example.app.voip"])
        #expect(info.problems(environment: .production, topic: "com.example.app.voip") == [])
    }

    @Test func certificateAndKeyInOneFile() throws {
        let files = try Self.makeCertificate(extensions: [])
        let combined = try String(contentsOfFile: files.certificate, encoding: .utf8) + String(contentsOfFile: files.key, encoding: .utf8)
        let path = files.directory.appendingPathComponent("combined.pem").path
        try combined.write(toFile: path, atomically: true, encoding: .utf8)
        let info = try ClientCertificate.inspectPEM(certificateFile: path)
        #expect(info.environments.isEmpty)
        #expect(info.problems(environment: .production, topic: "com.example.app") == [])
    }

    @Test func pkcs12WithPassword() throws {
        let files = try Self.makeCertificate(extensions: ["1.2.840.113635.100.6.3.2=DER:0500"])
        let p12 = files.directory.appendingPathComponent("cert.p12").path
        try TestSupport.run(TestSupport.openssl, ["pkcs12", "-export", "-in", files.certificate, "-inkey", files.key, "-out", p12, "-passout", "pass:secret"])
        let info = try ClientCertificate.inspectPKCS12(file: p12, password: "secret")
        #expect(info.userID == "com.example.app")
        #expect(info.environments == [.production])
        #expect(throws: ClientCertificateError.self) { try ClientCertificate.inspectPKCS12(file: p12, password: "wrong") }
    }

    @Test func mismatchedKeyIsAClearError() throws {
        let a = try Self.makeCertificate(extensions: [])
        let b = try Self.makeCertificate(extensions: [])
        #expect(throws: ClientCertificateError("the private key in \(b.key) does not belong to the certificate in \(a.certificate)", in: .key)) {
            try ClientCertificate.inspectPEM(certificateFile: a.certificate, keyFile: b.key)
        }
    }

    @Test func missingAndGarbageFiles() throws {
        #expect(throws: ClientCertificateError("certificate file /nonexistent/cert.pem does not exist")) {
            try ClientCertificate.inspectPEM(certificateFile: "/nonexistent/cert.pem")
        }
        let files = try Self.makeCertificate(extensions: [])
        #expect(throws: ClientCertificateError.self) { try ClientCertificate.inspectPEM(certificateFile: files.key) }
        #expect(throws: ClientCertificateError.self) { try ClientCertificate.inspectPEM(certificateFile: files.certificate) }
        #expect(throws: ClientCertificateError.self) { try ClientCertificate.inspectPKCS12(Array("garbage".utf8), password: "") }
    }

    /// The loader keeps what the TLS layer needs in memory: the certificate with the chain
    /// certificates after it in its file, and the key unencrypted; read back, they are the
    /// same certificate and key, and the files can change without changing them.
    @Test func loadKeepsTheCertificateItsChainAndItsKeyInMemory() throws {
        let leaf = try Self.makeCertificate(extensions: [])
        let issuer = try Self.makeCertificate(extensions: [])
        let chained = leaf.directory.appendingPathComponent("chained.pem").path
        try (String(contentsOfFile: leaf.certificate, encoding: .utf8) + String(contentsOfFile: issuer.certificate, encoding: .utf8))
            .write(toFile: chained, atomically: true, encoding: .utf8)
        let identity = try ClientCertificate.load(certificateFile: chained, keyFile: leaf.key)
        let pem = String(decoding: identity.certificateChainPEM, as: UTF8.self)
        #expect(pem.components(separatedBy: "-----BEGIN CERTIFICATE-----").count == 3)
        #expect(String(decoding: identity.privateKeyPEM, as: UTF8.self).hasPrefix("-----BEGIN PRIVATE KEY-----"))
        #expect(identity.fingerprint.count == 64)
        #expect(!identity.description.contains("PRIVATE"))
        // Read back from memory: the same certificate, and the key still belongs to it.
        let again = try ClientCertificate.load(pemCertificate: identity.certificateChainPEM, key: identity.privateKeyPEM)
        #expect(again.info == identity.info)
        #expect(again.fingerprint == identity.fingerprint)
        #expect(again.certificateChainPEM == identity.certificateChainPEM)
        // The files change; what was loaded does not.
        try "garbage".write(toFile: chained, atomically: true, encoding: .utf8)
        #expect(identity.info.subject == again.info.subject)
        #expect(throws: ClientCertificateError.self) { try ClientCertificate.load(certificateFile: chained, keyFile: leaf.key) }

        let p12 = leaf.directory.appendingPathComponent("cert.p12").path
        try TestSupport.run(TestSupport.openssl, ["pkcs12", "-export", "-in", leaf.certificate, "-inkey", leaf.key, "-certfile", issuer.certificate,
                                                  "-out", p12, "-passout", "pass:secret"])
        let bundled = try ClientCertificate.load(pkcs12File: p12, password: "secret")
        #expect(bundled.fingerprint == identity.fingerprint)
        #expect(String(decoding: bundled.certificateChainPEM, as: UTF8.self).components(separatedBy: "-----BEGIN CERTIFICATE-----").count == 3)
        #expect(try ClientCertificate.load(pemCertificate: bundled.certificateChainPEM, key: bundled.privateKeyPEM).fingerprint
                == identity.fingerprint)
    }
}
