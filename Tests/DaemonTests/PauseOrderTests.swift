import Dispatcher
import Foundation
import Posix
import PushdTestSupport
import Testing
@testable import pushd

/// An app paused for 5 minutes (its credentials refused) stays so when libcurl then fails to
/// load the CA certificates for one connection (a 30 s pause): the shorter pause took the
/// longer one's place and reason, and the app sent again after 30 s with its credentials still
/// refused. The other way round, the longer pause replaces the shorter one and is logged.
@Suite(.serialized) struct PauseOrderTests {
    static let unusable = TransportFailureKind.trustStoreUnusable.explanation + " (libcurl error 77: error setting certificate file: /etc/pushd/ca.pem)"

    @Test func aShorterPauseNeitherShortensNorRenamesALongerOne() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let log = MemoryLogSink()
            let pipeline = try harness.pipeline(harness.config(), log: log)
            defer { pipeline.stop(deadline: Timestamp().addingTimeInterval(5)) }
            let context = pipeline.context
            let sender = try #require(context.senders["shop"])
            func pausedLines() -> [String] { log.lines.filter { $0.contains("is paused, its jobs are kept") } }

            #expect(context.pause(sender, reason: "MissingProviderToken"))
            #expect(context.pause(sender, reason: Self.unusable))
            #expect(sender.pausedReason == "MissingProviderToken")
            #expect(pausedLines().count == 1, "\(pausedLines())")

            sender.resumeSending()
            #expect(context.pause(sender, reason: Self.unusable))
            #expect(context.pause(sender, reason: "MissingProviderToken"))
            #expect(sender.pausedReason == "MissingProviderToken")
            let lines = pausedLines()
            #expect(lines.count == 3 && lines[2].contains("MissingProviderToken") && lines[2].contains("5 minutes"), "\(lines)")
            #expect(lines[1].contains("tried again in 30 s"), "\(lines)")
        }
    }
}
