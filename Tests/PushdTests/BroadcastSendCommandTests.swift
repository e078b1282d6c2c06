import APNs
import APNsMock
import Foundation
import Testing
@testable import pushd

/// `pushd send --channel` against an in-process apns-mock over TLS HTTP/2.
@Suite struct BroadcastSendCommandTests {
    static let update = #"{"aps":{"timestamp":1700000000,"event":"update","content-state":{"score":"2-1"}}}"#

    @Test func aBroadcastToAChannelIsAcceptedAndCountedForIt() throws {
        var setup = try SendCommandTests.Setup()
        try SendCommandTests.withMock(&setup) { server, setup in
            let channel = try #require(server.createChannel(bundleID: "com.example.shop", storagePolicy: .noMessageStored))
            let run = try SendCommandTests.send(setup, ["--channel", channel, "--payload", Self.update, "--priority", "5"])
            #expect(run.exitCode == 0, "\(run.output.text)\n\(run.output.errorText)")
            #expect(run.output.output.first?.hasPrefix("POST https://127.0.0.1:\(server.port)/4/broadcasts/apps/com.example.shop") == true)
            #expect(run.output.output.last?.hasPrefix("200 accepted") == true)
            #expect(server.stats.broadcastsAccepted == [channel: 1])
        }
    }

    /// APNs takes a broadcast with the app's certificate (Apple, "Sending broadcast push
    /// notification requests to APNs"): a certificate app's goes on a connection presenting
    /// it, to a mock that requires a client certificate, with no authorization header.
    @Test func aCertificateAppsBroadcastIsSentWithItsCertificate() throws {
        let certificates = try SendCommandTests.certificates.get()
        var configuration = MockConfiguration(certificateChainFile: certificates.serverCertificate, privateKeyFile: certificates.serverKey)
        configuration.authentication = .certificate(clientCAFile: certificates.caCertificate)
        let server = try APNsMockServer(configuration: configuration)
        let port = try server.start()
        defer { server.stop() }
        let channel = try #require(server.createChannel(bundleID: "com.example.shop", storagePolicy: .noMessageStored))
        var setup = try SendCommandTests.Setup()
        try setup.writeConfig(port: port, credentials: """
                certificate:
                  cert_file: \(certificates.clientCertificate)
                  key_file: \(certificates.clientKey)
            """)
        let dryRun = try SendCommandTests.send(setup, ["--channel", channel, "--payload", Self.update, "--dry-run"])
        #expect(dryRun.exitCode == 0, "\(dryRun.output.text)\n\(dryRun.output.errorText)")
        #expect(!dryRun.output.text.contains("authorization"), "\(dryRun.output.text)")
        let run = try SendCommandTests.send(setup, ["--channel", channel, "--payload", Self.update])
        #expect(run.exitCode == 0, "\(run.output.text)\n\(run.output.errorText)")
        #expect(run.output.output.last?.hasPrefix("200 accepted") == true, "\(run.output.text)")
        #expect(server.stats.broadcastsAccepted == [channel: 1])
    }

    @Test func anUnknownChannelIsReportedWithApnsReason() throws {
        var setup = try SendCommandTests.Setup()
        try SendCommandTests.withMock(&setup) { _, setup in
            let run = try SendCommandTests.send(setup, ["--channel", "bm8tc3VjaC1jaGFubmVs", "--payload", Self.update])
            #expect(run.exitCode == 1)
            #expect(run.output.text.contains("400 ChannelNotRegistered"), "\(run.output.text)")
        }
    }

    @Test func refusesWhatCannotBeABroadcastBeforeSending() throws {
        var setup = try SendCommandTests.Setup()
        try SendCommandTests.withMock(&setup) { server, setup in
            let alert = try SendCommandTests.send(setup, ["--channel", "bm8tc3VjaC1jaGFubmVs", "--payload", #"{"aps":{"alert":"hi"}}"#])
            #expect(alert.exitCode == 1)
            #expect(alert.output.errorText.contains("liveactivity-timestamp"), "\(alert.output.errorText)")
            let both = try SendCommandTests.send(setup, ["--channel", "bm8tc3VjaC1jaGFubmVs", "--token", SendCommandTests.token,
                                                         "--payload", Self.update])
            #expect(both.output.errorText.contains("--channel and --token exclude each other"))
            let malformed = try SendCommandTests.send(setup, ["--channel", "not base64!", "--payload", Self.update])
            #expect(malformed.output.errorText.contains("--channel: the channel id"))
            #expect(server.stats.requestsReceived == 0)
        }
    }
}
