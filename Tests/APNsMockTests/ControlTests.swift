import APNsMock
import Foundation
import PushdTestSupport
import Testing

@Suite("apns-mock control endpoint and executable")
struct ControlTests {
    private func control(_ port: UInt16, _ method: String, _ path: String, body: String? = nil) throws -> (status: Int, body: String) {
        var arguments = ["-s", "--max-time", "5", "-X", method, "-w", "\n%{http_code}", "http://127.0.0.1:\(port)\(path)"]
        if let body { arguments += ["--data-binary", body] }
        let output = try runProcess("/usr/bin/curl", arguments).output
        let lines = output.split(separator: "\n", omittingEmptySubsequences: false)
        return (Int(lines.last ?? "") ?? 0, lines.dropLast().joined(separator: "\n"))
    }

    @Test func putFaultsChangesAnswersAndMetricsCountThem() throws {
        try withMockServer({ $0.controlPort = 0 }) { server, port in
            let controlPort = try #require(server.controlPort)
            let token = deviceToken(0x410)
            let put = try control(controlPort, "PUT", "/faults", body: #"{"unregisteredTokens":{"\#(token)":1700000000000}}"#)
            #expect(put.status == 200)
            #expect(put.body.contains(token))
            let response = try H2Client.send(.push(token: token), port: port)
            #expect(response.status == 410)
            let metrics = try control(controlPort, "GET", "/metrics")
            #expect(metrics.status == 200)
            #expect(metrics.body.contains(#"apns_mock_rejected_total{status="410",reason="Unregistered"} 1"#))
            let faults = try control(controlPort, "GET", "/faults")
            #expect(faults.body.contains(token))
        }
    }

    @Test func badFaultJSONIsRefusedAndTheOldFaultsStay() throws {
        try withMockServer({
            $0.controlPort = 0
            $0.faults.delayMilliseconds = 1
        }) { server, _ in
            let controlPort = try #require(server.controlPort)
            let notJSON = try control(controlPort, "PUT", "/faults", body: "{delay")
            #expect(notJSON.status == 400)
            #expect(notJSON.body.contains("fault configuration"))
            let outOfRange = try control(controlPort, "PUT", "/faults", body: #"{"resetRate":3}"#)
            #expect(outOfRange.status == 400)
            #expect(outOfRange.body.contains("resetRate"))
            #expect(server.faults.delayMilliseconds == 1)
        }
    }

    @Test func statsAcceptedLogResetAndUnknownPaths() throws {
        try withMockServer({ $0.controlPort = 0 }) { server, port in
            let controlPort = try #require(server.controlPort)
            let responses = try H2Client.send((0..<3).map { .push(token: deviceToken($0)) }, port: port)
            let accepted = try control(controlPort, "GET", "/accepted")
            let entries = try JSONDecoder().decode([AcceptedNotification].self, from: Data(accepted.body.utf8))
            #expect(Set(entries.map(\.apnsID)) == Set(responses.compactMap(\.apnsID)))
            let stats = try JSONDecoder().decode(MockStats.self, from: Data(try control(controlPort, "GET", "/stats").body.utf8))
            #expect(stats.accepted == 3)
            #expect(try control(controlPort, "POST", "/reset").status == 200)
            #expect(server.stats.accepted == 0)
            #expect(server.acceptedLog.isEmpty)
            #expect(try control(controlPort, "GET", "/nothing").status == 404)
            #expect(try control(controlPort, "DELETE", "/faults").status == 405)
        }
    }

    @Test func postGoawayClosesIdleConnections() throws {
        try withMockServer({
            $0.controlPort = 0
            $0.faults.delayMilliseconds = 800
        }) { server, port in
            let controlPort = try #require(server.controlPort)
            let box = ResponseBox()
            let done = DispatchSemaphore(value: 0)
            let sender = Thread {
                box.responses = (try? H2Client.send([.push(token: deviceToken(1))], port: port)) ?? []
                done.signal()
            }
            sender.start()
            #expect(eventually { server.stats.requestsReceived == 1 })
            #expect(try control(controlPort, "POST", "/goaway").status == 200)
            done.wait()
            #expect(box.responses.first?.status == 200)
            #expect(server.stats.goaways == [GoawayRecord(connectionID: 1, lastStreamID: 1)])
        }
    }

    @Test func executableGeneratesCertificatesServesAndReloadsFaultsOnSIGHUP() throws {
        let executable = try apnsMockExecutable()
        let directory = try TestCertificates.files().directory + "/exe-\(UUID().uuidString)"
        let generated = try runProcess(executable, ["gen-certs", directory])
        #expect(generated.exitCode == 0)
        let faultsFile = directory + "/faults.json"
        try #"{"badDeviceTokens":[]}"#.write(toFile: faultsFile, atomically: true, encoding: .utf8)

        let process = ChildProcess()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = ["--cert", directory + "/server.pem", "--key", directory + "/server.key", "--port", "0",
                             "--control-port", "0", "--faults", faultsFile]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        defer { if process.isRunning { process.terminate() } }
        let firstLine = String(decoding: output.fileHandleForReading.availableData, as: UTF8.self)
        let ports = firstLine.split(separator: " ").compactMap { word -> UInt16? in
            guard word.hasPrefix("127.0.0.1:") else { return nil }
            return UInt16(word.dropFirst("127.0.0.1:".count).trimmingCharacters(in: CharacterSet(charactersIn: ",() \n")))
        }
        let port = try #require(ports.first, "no port in: \(firstLine)")
        let token = deviceToken(0xbad)
        let url = "https://localhost:\(port)/3/device/\(token)"
        let curl = ["--http2", "--cacert", directory + "/ca.pem", "-o", "/dev/null", "-w", "%{http_code}",
                    "-H", "apns-topic: com.example.app", "-d", #"{"aps":{}}"#, url]
        #expect(try runCurlCLI(curl).output == "200")

        try #"{"badDeviceTokens":["\#(token)"]}"#.write(toFile: faultsFile, atomically: true, encoding: .utf8)
        kill(process.processIdentifier, SIGHUP)
        // Each try a curl process and a TLS handshake: seconds apiece on a loaded machine.
        #expect(eventually(within: 20) { (try? runCurlCLI(curl).output) == "400" })

        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        let rest = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        // Requests polled while the reload was in flight may have been accepted too.
        let acceptedLine = rest.split(separator: "\n").first { $0.hasPrefix("apns_mock_accepted_total ") }
        #expect((acceptedLine.flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0) >= 1)
        #expect(rest.contains(#"reason="BadDeviceToken""#))
    }

    @Test func executableExplainsItsFlagsAndRejectsUnknownOnes() throws {
        let executable = try apnsMockExecutable()
        let help = try runProcess(executable, ["--help"])
        #expect(help.exitCode == 0)
        #expect(help.output.contains("gen-certs DIR"))
        let bad = try runProcess(executable, ["--cert", "a", "--key", "b", "--frobnicate"])
        #expect(bad.exitCode == 2)
    }
}

/// The apns-mock binary built beside the test bundle (same configuration and triple).
func apnsMockExecutable() throws -> String {
    let testBinary = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
    var directory = testBinary.deletingLastPathComponent()
    for _ in 0..<4 {
        let candidate = directory.appendingPathComponent("apns-mock").path
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        directory = directory.deletingLastPathComponent()
    }
    let fallback = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".build/debug/apns-mock").path
    guard FileManager.default.isExecutableFile(atPath: fallback) else {
        throw CocoaError(.fileNoSuchFile, userInfo: [NSLocalizedDescriptionKey: "apns-mock is not built; run swift build --build-tests first"])
    }
    return fallback
}
