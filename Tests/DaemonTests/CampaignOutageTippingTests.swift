import APNsMock
import Foundation
import Locking
import Posix
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// The answer that shows APNs down for a campaign (`OperatorLog`: the third failure in a row,
/// a second after the first) is counted before its target's verdict, as in the other lanes:
/// that target waits for the outage probe like every one after it. Before, the campaign lane
/// counted it after the verdict, and that target alone was sent again on its own backoff into
/// an APNs just reported down.
@Suite(.serialized) struct CampaignOutageTippingTests {
    @Test func theAnswerThatShowsAnOutageWaitsForTheProbe() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database, faults: FaultConfiguration(serviceUnavailableRate: 1))
            var config = harness.config()
            // Up to 0.3 s between the sends of the one target until the outage is seen (the
            // backoff within an APNs trouble's budget grows with the time waited), 45 to 60 s
            // while APNs is down; no probe in the seconds watched.
            config.retry.baseDelayMilliseconds = 300
            config.retry.maxDelayMilliseconds = 60_000
            config.retry.outageProbeMilliseconds = 20_000
            let connection = try database.connect()
            defer { connection.close() }
            _ = try CampaignLaneTests.campaign(connection, count: 1)
            let mock = harness.mock
            func sends() -> Int { mock.stats.rejected("ServiceUnavailable") }
            // The mock's count when the line is written, as the answer that shows the outage
            // is counted and before its verdict: read later, a quick resend would be in it.
            let log = SendsAtOutageLine(sends)
            let pipeline = try harness.pipeline(config, log: log)
            pipeline.start()
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }

            #expect(DaemonHarness.wait(seconds: 20) { log.atDown != nil }, "no outage was reported")
            let atDown = log.atDown ?? 0
            #expect(atDown >= 3)
            Thread.sleep(forTimeInterval: 3)
            #expect(sends() == atDown, "the target was sent \(sends() - atDown) more times after APNs was reported down (\(atDown) before)")
        }
    }
}

/// Keeps the mock's send count of the moment the campaign lane's `apns_down` line is written.
final class SendsAtOutageLine: LogSink, @unchecked Sendable {
    private let sends: () -> Int
    private let seen = Lock<Int?>(nil)
    init(_ sends: @escaping () -> Int) { self.sends = sends }
    var atDown: Int? { seen.withLock { $0 } }
    func write(_ line: String) {
        guard line.contains("\"event\":\"apns_down\""), line.contains("\"lane\":\"campaign\"") else { return }
        let count = sends()
        seen.withLock { if $0 == nil { $0 = count } }
    }
    func reopen() {}
}
