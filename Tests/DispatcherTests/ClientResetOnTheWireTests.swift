import APNs
import APNsMock
import Dispatcher
import Foundation
import Testing

/// libcurl 8 is the baseline because libcurl 7.88 reset nearly every answered stream, and
/// servers that count client resets (apns-mock among them, with nghttp2's default guard)
/// end such connections.
@Suite struct ClientResetOnTheWireTests {
    @Test func oneHundredThousandAnsweredRequestsCostNoClientResetAndNoConnection() async throws {
        try await withMock({ configuration, _ in
            configuration.logsAccepted = false
        }) { server, port, material in
            let total = 100_000
            let summary = try await sendThroughEngine(configurationForMock(port: port, material: material), total: total,
                                                      seconds: 600).collector.snapshot()
            #expect(summary.results.values.allSatisfy { $0.response?.status == 200 })
            #expect(summary.timesReported.values.allSatisfy { $0 == 1 })
            let stats = server.stats
            #expect(stats.accepted == total)
            #expect(stats.clientResetsAfterAnswer == 0)
            #expect(stats.clientResets == 0)
            // Two engine threads, one connection each: none was ended and replaced.
            #expect(stats.connectionsAccepted == 2)
        }
    }
}
