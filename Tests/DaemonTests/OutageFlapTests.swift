import APNsMock
import Foundation
import Glibc
import Posix
import PushdTestSupport
import Testing
@testable import pushd

/// APNs failing for 1.5 s and answering for half a second by turns, while jobs keep coming:
/// the real `pushd run` logs the outage once and its end once, not a pair of lines per flip.
@Suite(.serialized) struct OutageFlapTests {
    static func lines(_ log: String, event: String) -> [Substring] {
        let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").filter { $0.contains("\"event\":\"\(event)\"") }
    }

    @Test func anApnsFailingByTurnsIsLoggedAsOneOutage() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: try harness.writeConfigFile(), log: log)
            defer { FleetStatusTests.stop(process) }
            let failing = FaultConfiguration(internalServerErrorRate: 1)
            let started = Timestamp()
            var flips = 0
            var jobs = 0
            var wasFailing = false
            // Answering phases this thread, held up on a loaded machine, let last long enough to
            // end the outage (a second of answers): each may rightly add a back and a down line.
            var answeringSince: Timestamp?
            var longAnswering = 0
            while Timestamp().timeIntervalSince(started) < 15 {
                // Failing long enough to be an outage (a second without an answer), answering
                // too briefly to end it (a second of answers).
                let failingNow = Timestamp().timeIntervalSince(started).truncatingRemainder(dividingBy: 2) < 1.5
                if failingNow != wasFailing || flips == 0 {
                    try harness.mock.setFaults(failingNow ? failing : .none)
                    if failingNow, let since = answeringSince, Timestamp().timeIntervalSince(since) >= 0.9 { longAnswering += 1 }
                    answeringSince = failingNow ? nil : Timestamp()
                    flips += 1
                    wasFailing = failingNow
                }
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex(700000 + $1::int + g), 64, '0'), '{"aps":{"alert":"flap"}}'
                    FROM generate_series(0, 19) g
                    """, [jobs])
                jobs += 20
                Thread.sleep(forTimeInterval: 0.25)
            }
            try harness.mock.setFaults(.none)
            #expect(try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 })
            // The lane is back once answers have come for a second without a failure.
            #expect(DaemonHarness.wait(seconds: 10) { !Self.lines(log, event: "apns_back").isEmpty })
            let down = Self.lines(log, event: "apns_down")
            let back = Self.lines(log, event: "apns_back")
            print("\(flips) flips in 15 s (\(longAnswering) answering for 0.9 s or more): \(down.count) outage lines, \(back.count) back lines")
            #expect(down.count >= 1)
            #expect(down.count + back.count <= 6 + 2 * longAnswering,
                    "\(down.count) outage and \(back.count) back lines for \(flips) flips, \(longAnswering) answering phases of 0.9 s or more")
            #expect(harness.mock.stats.rejected("InternalServerError") > 0)
        }
    }
}
