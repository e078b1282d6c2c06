import APNsMock
import Posix
import Foundation
import PushdTestSupport
import Testing

@Suite("apns-mock transport")
struct TransportTests {
    @Test func acceptsAPushOverTLSHTTP2AndEchoesTheApnsID() throws {
        try withMockServer { server, port in
            let id = "6c1f0d3e-8b8e-4f7a-9d2c-3a4b5c6d7e8f"
            let response = try H2Client.send(.push(token: deviceToken(1), headers: ["apns-id: \(id)"]), port: port)
            #expect(response.curlCode == 0)
            #expect(response.httpVersion == 3, "CURL_HTTP_VERSION_2_0 is 3")
            #expect(response.status == 200)
            #expect(response.apnsID == id)
            #expect(response.body.isEmpty)
            #expect(server.stats.accepted == 1)
        }
    }

    @Test func makesALowercaseUUIDWhenTheRequestHasNoApnsID() throws {
        try withMockServer { _, port in
            let response = try H2Client.send(.push(token: deviceToken(2)), port: port)
            let id = try #require(response.apnsID)
            #expect(APNsID(id) != nil)
            #expect(id == id.lowercased())
            #expect(id.count == 36)
        }
    }

    @Test func multiplexesManyStreamsOnOneConnectionAndCountsEachOnce() throws {
        try withMockServer { server, port in
            let requests = (0..<300).map { TestRequest.push(token: deviceToken($0)) }
            let responses = try H2Client.send(requests, port: port)
            #expect(responses.allSatisfy { $0.status == 200 })
            #expect(server.stats.accepted == 300)
            #expect(server.stats.connectionsAccepted == 1)
            let log = server.acceptedLog
            #expect(Set(log.map(\.apnsID)).count == 300)
            #expect(Set(log.map(\.apnsID)) == Set(responses.compactMap(\.apnsID)))
        }
    }

    @Test func logsTheTokenTopicAndPayloadDigestOfEveryAcceptedNotification() throws {
        try withMockServer { server, port in
            _ = try H2Client.send(.push(token: deviceToken(7).uppercased(), topic: "com.example.app"), port: port)
            let entry = try #require(server.acceptedLog.first)
            #expect(entry.token == deviceToken(7))
            #expect(entry.topic == "com.example.app")
            #expect(entry.payloadSHA256 == sha256Hex(examplePayload))
            #expect(entry.connectionID == 1)
            #expect(entry.streamID == 1)
        }
    }

    @Test func refusesClientsThatDoNotOfferH2() throws {
        try withMockServer { server, port in
            let files = try TestCertificates.files()
            let result = try runCurlCLI([
                "--http1.1", "--cacert", files.caCertificate, "-d", "{}", "-H", "apns-topic: com.example.app",
                "https://localhost:\(port)/3/device/\(deviceToken(3))",
            ])
            #expect(result.exitCode != 0)
            #expect(server.stats.accepted == 0)
        }
    }

    @Test func certificateModeRejectsConnectionsWithoutAClientCertificate() throws {
        let files = try TestCertificates.files()
        try withMockServer({ $0.authentication = .certificate(clientCAFile: files.caCertificate) }) { server, port in
            let without = try H2Client.send(.push(token: deviceToken(4)), port: port)
            #expect(without.curlCode != 0)
            var options = H2Client.Options()
            options.clientCertificate = (files.clientCertificate, files.clientKey)
            let with = try H2Client.send(.push(token: deviceToken(4)), port: port, options: options)
            #expect(with.status == 200)
            #expect(server.stats.accepted == 1)
        }
    }

    @Test func stopClosesOpenConnectionsAndReleasesThePort() throws {
        let files = try TestCertificates.files()
        let configuration = MockConfiguration(certificateChainFile: files.serverCertificate, privateKeyFile: files.serverKey)
        let server = try APNsMockServer(configuration: configuration)
        let port = try server.start()
        #expect(try H2Client.send(.push(token: deviceToken(5)), port: port).status == 200)
        server.stop()
        let after = try H2Client.send(.push(token: deviceToken(5)), port: port)
        #expect(after.curlCode != 0)
        #expect(after.status == 0)
    }

    @Test func closesConnectionsThatNeverFinishTheHandshake() throws {
        try withMockServer({ $0.handshakeTimeoutMilliseconds = 200 }) { server, port in
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            defer { close(fd) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            #expect(connected == 0)
            #expect(eventually { server.stats.connectionsAccepted == 1 })
            #expect(eventually { server.stats.connectionsClosed == 1 })
            var byte: UInt8 = 0
            #expect(recv(fd, &byte, 1, 0) == 0, "the server closed the socket")
        }
    }

    @Test func severalLoopThreadsShareOnePort() throws {
        try withMockServer({ $0.loopThreads = 2 }) { server, port in
            var options = H2Client.Options()
            options.maxConnections = 4
            let responses = try H2Client.send((0..<200).map { TestRequest.push(token: deviceToken($0)) }, port: port, options: options)
            #expect(responses.allSatisfy { $0.status == 200 })
            #expect(server.stats.accepted == 200)
        }
    }

    @Test func startFailsWithAClearErrorForAMissingCertificate() throws {
        var configuration = MockConfiguration(certificateChainFile: "/nonexistent/server.pem", privateKeyFile: "/nonexistent/server.key")
        configuration.port = 0
        #expect {
            _ = try APNsMockServer(configuration: configuration)
        } throws: { error in
            "\(error)".contains("/nonexistent/server.pem")
        }
    }
}

func sha256Hex(_ bytes: [UInt8]) -> String {
    let result = try? runProcess("/usr/bin/openssl", ["dgst", "-sha256", "-r"], input: bytes)
    return String(result?.output.prefix(64) ?? "")
}

struct ProcessResult {
    var exitCode: Int32
    var output: String
}

func runProcess(_ executable: String, _ arguments: [String], input: [UInt8]? = nil) throws -> ProcessResult {
    let process = ChildProcess()
    process.executableURL = URL(fileURLWithPath: executable)
    process.arguments = arguments
    let output = Pipe()
    process.standardOutput = output
    process.standardError = FileHandle.nullDevice
    let inputPipe = Pipe()
    if input != nil { process.standardInput = inputPipe }
    try process.run()
    if let input {
        inputPipe.fileHandleForWriting.write(Data(input))
        try inputPipe.fileHandleForWriting.close()
    }
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return ProcessResult(exitCode: process.terminationStatus, output: String(decoding: data, as: UTF8.self))
}

func runCurlCLI(_ arguments: [String]) throws -> ProcessResult {
    try runProcess("/usr/bin/curl", ["-s", "-S", "--max-time", "10"] + arguments)
}

/// Accepted connections count every reconnect; how many were open at once, and which ones the
/// client ended, are counted apart, so a client's reconnects are not read as the mock's doing.
@Suite struct ConnectionCountTests {
    @Test func connectionsTheClientClosesAreCountedAsSuchAndThePeakOfOpenOnesIsKept() throws {
        try withMockServer({ _ in }) { server, port in
            // Three requests, each on a connection of its own that the client closes afterwards.
            for seed in 1...3 {
                let answer = try H2Client.send(.push(token: deviceToken(seed)), port: port)
                #expect(answer.status == 200)
            }
            #expect(eventually { server.stats.connectionsClosed == 3 })
            #expect(server.stats.connectionsAccepted == 3)
            #expect(server.stats.connectionsClosedByClient == 3)
            #expect(server.stats.connectionsOpenPeak == 1)
        }
    }
}
