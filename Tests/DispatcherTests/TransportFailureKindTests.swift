import Dispatcher
import Testing

/// Which transport failures are an unreachable APNs (wait) and which a TLS certificate
/// problem no retry fixes (pause the app), from libcurl's code and its message.
@Suite struct TransportFailureKindTests {
    @Test(arguments: [
        (60, "SSL certificate problem: unable to get local issuer certificate", TransportFailureKind.serverCertificateUntrusted),
        (60, "SSL: no alternative certificate subject name matches target host name '127.0.0.2'", .serverCertificateUntrusted),
        (77, "error setting certificate file: /etc/pushd/ca.pem", .trustStoreUnusable),
        (35, "OpenSSL/3.0.15: error:0A000086:SSL routines::certificate verify failed", .serverCertificateUntrusted),
        (58, "could not load PEM client certificate from /etc/pushd/shop.pem", .clientCertificateRefused),
        (35, "OpenSSL/3.0.15: error:0A000418:SSL routines::tlsv1 alert unknown ca", .clientCertificateRefused),
        (35, "OpenSSL/3.0.15: error:0A000412:SSL routines::sslv3 alert bad certificate", .clientCertificateRefused),
        (56, "OpenSSL SSL_read: OpenSSL/3.0.15: error:0A00045C:SSL routines::tlsv13 alert certificate required, errno 0", .clientCertificateRefused),
        (55, "OpenSSL SSL_write: error:0A000418:SSL routines::tlsv1 alert unknown ca, errno 0", .clientCertificateRefused),
        (98, "client-side certificate required", .clientCertificateRefused),
        (35, "OpenSSL SSL_connect: Connection reset by peer in connection to api.push.apple.com:443", .unreachable),
        (35, "OpenSSL SSL_connect: SSL_ERROR_SYSCALL in connection to 127.0.0.1:443 (3 connection attempts failed in a row)", .unreachable),
        (56, "Recv failure: Connection reset by peer", .unreachable),
        (7, "Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to server", .unreachable),
        (6, "Could not resolve host: api.push.apple.com", .unreachable),
        (28, "Operation timed out after 10001 milliseconds with 0 bytes received", .unreachable),
        (16, "Error in the HTTP2 framing layer", .unreachable),
        (-1, "dispatcher stopped before the request completed", .unreachable),
    ])
    func eachFailureIsClassifiedByCodeAndMessage(code: Int, message: String, kind: TransportFailureKind) {
        #expect(TransportFailureKind(TransportError(code: code, message: message)) == kind)
    }

    @Test func onlyUnreachableIsWaitedOut() {
        #expect(!TransportFailureKind.unreachable.isConfigurationError)
        #expect(TransportFailureKind.serverCertificateUntrusted.isConfigurationError)
        #expect(TransportFailureKind.trustStoreUnusable.isConfigurationError)
        #expect(TransportFailureKind.clientCertificateRefused.isConfigurationError)
    }
}
