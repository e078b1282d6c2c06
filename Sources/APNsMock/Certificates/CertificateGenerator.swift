import Posix
import Spawn

/// Files written by `CertificateGenerator.generate(into:)`.
public struct GeneratedCertificates: Sendable, Equatable {
    public var directory: String
    public var caCertificate: String { directory + "/ca.pem" }
    public var caKey: String { directory + "/ca.key" }
    /// Server certificate for localhost and 127.0.0.1, followed by nothing else (the CA is separate).
    public var serverCertificate: String { directory + "/server.pem" }
    public var serverKey: String { directory + "/server.key" }
    /// Client certificate for the certificate-auth mode.
    public var clientCertificate: String { directory + "/client.pem" }
    public var clientKey: String { directory + "/client.key" }
}

/// Makes a throwaway CA, a server certificate for localhost/127.0.0.1 and a client
/// certificate with the `openssl` command, for tests and the demo. Never for production.
public enum CertificateGenerator {
    public static func generate(into directory: String, openssl: String = "/usr/bin/openssl") throws(MockServerError) -> GeneratedCertificates {
        let files = GeneratedCertificates(directory: directory)
        do {
            try FileSystem.createDirectory(directory)
        } catch {
            throw .configuration("cannot create certificate directory \(directory): \(ErrorReason.of(error))")
        }
        let serverExtensions = directory + "/server.ext"
        let clientExtensions = directory + "/client.ext"
        do {
            try FileSystem.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n", to: serverExtensions)
            try FileSystem.write("basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=clientAuth\n", to: clientExtensions)
        } catch {
            throw .configuration("cannot write into \(directory): \(ErrorReason.of(error))")
        }
        let ecKey = ["genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out"]
        try run(openssl, ecKey + [files.caKey], in: directory)
        try run(openssl, ["req", "-x509", "-new", "-key", files.caKey, "-sha256", "-days", "3650",
                          "-subj", "/CN=apns-mock test CA", "-out", files.caCertificate], in: directory)
        for (name, key, certificate, extensions) in [
            ("localhost", files.serverKey, files.serverCertificate, serverExtensions),
            ("apns-mock client", files.clientKey, files.clientCertificate, clientExtensions),
        ] {
            let request = certificate + ".csr"
            try run(openssl, ecKey + [key], in: directory)
            try run(openssl, ["req", "-new", "-key", key, "-subj", "/CN=\(name)", "-out", request], in: directory)
            try run(openssl, ["x509", "-req", "-in", request, "-CA", files.caCertificate, "-CAkey", files.caKey,
                              "-CAcreateserial", "-days", "825", "-sha256", "-extfile", extensions, "-out", certificate], in: directory)
            try? FileSystem.remove(request)
        }
        for file in [serverExtensions, clientExtensions, directory + "/ca.srl"] { try? FileSystem.remove(file) }
        return files
    }

    /// Runs one openssl command; its output goes to a file of its own, shown when it fails.
    private static func run(_ executable: String, _ arguments: [String], in directory: String) throws(MockServerError) {
        let output = directory + "/openssl.out"
        try? FileSystem.remove(output)
        defer { try? FileSystem.remove(output) }
        do {
            try Subprocess.run([executable] + arguments, outputPath: output)
        } catch {
            throw .configuration("\(error)")
        }
    }
}
