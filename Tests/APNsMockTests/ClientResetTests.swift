import APNsMock
import Foundation
import Testing

/// RST_STREAM from clients: counted, and limited by nghttp2's rapid-reset guard as servers
/// that count client resets do.
@Suite("apns-mock client resets", .serialized)
struct ClientResetTests {
    @Test func countsResetsOfAnsweredStreamsApartFromResetsOfStreamsStillWaiting() throws {
        try withMockServer { server, port in
            let client = try RawH2Client(port: port)
            defer { client.close() }
            client.sendRequest(stream: 1)
            #expect(client.waitForFrame(type: 0x0, stream: 1, endingStream: true), "the answer to stream 1")
            client.sendReset(stream: 1)
            #expect(eventually { server.stats.clientResets == 1 })
            #expect(server.stats.clientResetsAfterAnswer == 1)

            try server.setFaults(FaultConfiguration(delayMilliseconds: 5000))
            client.sendRequest(stream: 3)
            client.sendReset(stream: 3)
            #expect(eventually { server.stats.clientResets == 2 })
            #expect(server.stats.clientResetsAfterAnswer == 1)
            #expect(server.metricsText.contains("apns_mock_client_resets_total 2\n"))
            #expect(server.metricsText.contains("apns_mock_client_resets_after_answer_total 1\n"))
        }
    }

    @Test func aClientResettingStreamsRapidlyLosesItsConnection() throws {
        try withMockServer { server, port in
            let client = try RawH2Client(port: port)
            defer { client.close() }
            // nghttp2's default guard allows a burst of 1,000 resets, then 33 a second.
            for index in 0..<1500 {
                let stream = UInt32(2 * index + 1)
                guard client.sendRequest(stream: stream), client.sendReset(stream: stream) else { break }
            }
            #expect(client.waitForFrame(type: 0x7), "GOAWAY from the server")
            #expect(eventually { server.stats.connectionsClosed == 1 })
            #expect(server.stats.clientResets >= 1000)
        }
    }
}
