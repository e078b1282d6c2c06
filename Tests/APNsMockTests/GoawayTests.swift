import APNsMock
import Foundation
import Testing

@Suite("apns-mock GOAWAY")
struct GoawayTests {
    @Test func goawayAfterStreamsProcessesExactlyTheStreamsUpToLastStreamID() throws {
        try withMockServer({ $0.faults.goawayAfterStreams = 4 }) { server, port in
            let ids = (0..<10).map { _ in UUID().uuidString.lowercased() }
            let requests = ids.enumerated().map { index, id in TestRequest.push(token: deviceToken(index), headers: ["apns-id: \(id)"]) }
            let responses = try H2Client.send(requests, port: port)
            let stats = server.stats
            let log = server.acceptedLog

            let first = try #require(stats.goaways.first { $0.connectionID == 1 })
            let onFirst = log.filter { $0.connectionID == 1 }
            #expect(onFirst.map(\.streamID).sorted() == [1, 3, 5, 7], "the four streams begun before GOAWAY")
            #expect(first.lastStreamID == 7)
            for goaway in stats.goaways {
                #expect(log.filter { $0.connectionID == goaway.connectionID }.allSatisfy { $0.streamID <= goaway.lastStreamID })
            }

            // Streams above last-stream-id were never processed, so the client could retry them:
            // every notification answered 200 is in the log exactly once, nothing twice.
            let answered = responses.filter { $0.status == 200 }.compactMap(\.apnsID)
            #expect(Set(log.map(\.apnsID)).count == log.count, "no notification accepted twice")
            #expect(Set(answered) == Set(log.map(\.apnsID)))
            #expect(Set(answered).isSubset(of: Set(ids)))
            let unanswered = responses.filter { $0.status != 200 }
            #expect(unanswered.allSatisfy { $0.curlCode != 0 }, "a stream is either answered or failed, never both")
            #expect(answered.count + unanswered.count == 10)
            // libcurl retries the refused streams on a new connection: all ten arrive, once each.
            #expect(answered.count == 10)
            #expect(stats.connectionsAccepted >= 2)
        }
    }

    @Test func goawayAfterSecondsLetsTheStreamInFlightFinish() throws {
        try withMockServer({
            $0.faults.goawayAfterSeconds = 0.5
            $0.faults.delayMilliseconds = 1000
        }) { server, port in
            let response = try H2Client.send(.push(token: deviceToken(1)), port: port)
            #expect(response.status == 200)
            #expect(server.stats.goaways == [GoawayRecord(connectionID: 1, lastStreamID: 1)])
            #expect(server.stats.accepted == 1)
            #expect(eventually { server.stats.connectionsClosed == 1 })
        }
    }

    /// Apple: "The GOAWAY frame includes JSON data in its payload with a reason key".
    @Test func goawayCarriesTheShutdownReasonAsJSON() throws {
        try withMockServer { server, port in
            let client = try RawH2Client(port: port)
            defer { client.close() }
            client.sendRequest(stream: 1)
            #expect(client.waitForFrame(type: 0x1, stream: 1))
            server.sendGoawayToAll()
            #expect(client.waitForFrame(type: 0x7))
            let payload = try #require(client.payloads(ofType: 0x7).first)
            #expect(payload.count > 8)
            #expect(Array(payload.dropFirst(4).prefix(4)) == [0, 0, 0, 0], "NO_ERROR")
            #expect(String(decoding: payload.dropFirst(8), as: UTF8.self) == #"{"reason":"Shutdown"}"#)
        }
    }

    @Test func goawayOnRequestKeepsBegunStreamsAndClosesTheConnection() throws {
        try withMockServer({ $0.faults.delayMilliseconds = 800 }) { server, port in
            let done = DispatchSemaphore(value: 0)
            let box = ResponseBox()
            let sender = Thread {
                box.responses = (try? H2Client.send((0..<3).map { .push(token: deviceToken($0)) }, port: port)) ?? []
                done.signal()
            }
            sender.start()
            #expect(eventually { server.stats.requestsReceived == 3 })
            server.sendGoawayToAll()
            done.wait()
            #expect(box.responses.count == 3)
            #expect(box.responses.allSatisfy { $0.status == 200 })
            #expect(server.stats.goaways.count == 1)
            #expect(server.stats.goaways.first?.lastStreamID == 5)
        }
    }
}

final class ResponseBox: @unchecked Sendable {
    var responses: [TestResponse] = []
}
