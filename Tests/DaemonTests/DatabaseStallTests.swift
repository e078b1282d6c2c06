import Foundation
import Glibc
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// A database that stops answering (a network that drops packets, a stuck server) is seen and
/// said, and does not freeze the real `pushd` process: the database sits behind a relay that
/// can be frozen, which keeps the sockets open and acknowledged but forwards nothing, so no
/// TCP time-out ends the wait; only pushd's own clock can.
@Suite(.serialized) struct DatabaseStallTests {
    struct Setup {
        let harness: DaemonHarness
        let proxy: FreezableProxy
        let daemon: TLSFailurePausesAppTests.Daemon
    }

    /// pushd on the relay with `database.stall_s` 3, ready, having sent one notification.
    static func start(_ database: IsolatedDatabase, log: String) throws -> Setup {
        let harness = try DaemonHarness(database: database)
        let (proxy, proxied) = try FreezableProxy.relaying(database)
        let path = try harness.writeConfigFile()
        try FreezableProxy.route(config: path, of: database, to: proxied, settings: "  dead_peer_s: 3\n  stall_s: 3\n")
        let daemon = try TLSFailurePausesAppTests.Daemon(config: path, log: harness.directory + "/" + log)
        #expect(DaemonHarness.wait(seconds: 30) { daemon.readyz().contains("database reachable") }, "\(daemon.readyz())\n\(daemon.text)")
        let connection = try database.connect()
        try TLSFailurePausesAppTests.enqueue(connection, count: 1)
        #expect(DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1 }, "\(daemon.text)")
        return Setup(harness: harness, proxy: proxy, daemon: daemon)
    }

    static func stalledLine(_ daemon: TLSFailurePausesAppTests.Daemon) -> String? {
        daemon.text.split(separator: "\n").first { $0.contains("\"event\":\"database_stalled\"") }.map(String.init)
    }

    @Test func aFrozenDatabaseMakesPushdNotReadyWithinSecondsAndSIGTERMStillEndsIt() throws {
        try IsolatedDatabase.with { database in
            let setup = try Self.start(database, log: "pushd-frozen.log")
            defer { setup.proxy.stop() }
            let daemon = setup.daemon
            let frozenAt = Timestamp()
            setup.proxy.freeze()

            var readyz = ""
            let seen = DaemonHarness.wait(seconds: 20) {
                readyz = daemon.readyz()
                return readyz.contains("database not answering")
            }
            let noticed = Timestamp().timeIntervalSince(frozenAt)
            print("/readyz \(noticed.fixed(1))s after the freeze: \(readyz)")
            #expect(seen, "/readyz after 20 s: \(readyz)\n\(daemon.text)")
            // While the database stays frozen, /readyz keeps saying so: the health check's own
            // call fails then too (its session abandoned, a new one timing out as it connects),
            // and its failure must not turn the stall into "database unreachable: SQLSTATE 08006".
            var otherwise: [String] = []
            let heldUntil = Timestamp().addingTimeInterval(10)
            while Timestamp() < heldUntil {
                let now = daemon.readyz()
                if !now.isEmpty && !now.contains("database not answering") { otherwise.append(now) }
                Thread.sleep(forTimeInterval: 0.2)
            }
            #expect(otherwise.isEmpty, "/readyz during the stall: \(Set(otherwise))")
            let line = Self.stalledLine(daemon)
            print("log: \(line ?? "no database_stalled line")")
            #expect(line?.contains("\"level\":\"error\"") == true && line?.contains("\"session\":\"pushd-") == true, "\(daemon.text)")
            var scrape = ""
            var scrapeTook = 0.0
            #expect(DaemonHarness.wait(seconds: 15) {
                let started = Timestamp()
                scrape = daemon.metrics()
                scrapeTook = Timestamp().timeIntervalSince(started)
                return scrape.contains("\npushd_database_stalled 1")
            }, "last scrape took \(scrapeTook.fixed(1))s: \(scrape.split(separator: "\n").filter { $0.hasPrefix("pushd_database") || $0.hasPrefix("pushd_queue_depth") })")
            print("a scrape during the stall took \(scrapeTook.fixed(1))s")

            let signalled = Timestamp()
            kill(daemon.process.processIdentifier, SIGTERM)
            // drain_timeout_s is 5: the stop ends by 5 + 15 s whatever the database does.
            let exited = DaemonProcessTests.waitForExit(daemon.process, seconds: 25)
            let took = Timestamp().timeIntervalSince(signalled)
            print("SIGTERM to exit: \(exited ? "\(took.fixed(1))s" : "still running after 25 s")")
            #expect(exited, "\(daemon.text)")
            #expect(daemon.text.contains("draining"))
            for line in daemon.text.split(separator: "\n") where line.contains("SIGTERM") || line.contains("stopped") {
                print("log: \(line.prefix(400))")
            }
        }
    }

    @Test func aDatabaseAnsweringAgainIsSaidOnceAndPushdIsReadyAgain() throws {
        try IsolatedDatabase.with { database in
            let setup = try Self.start(database, log: "pushd-thaw.log")
            defer { setup.proxy.stop() }
            let daemon = setup.daemon
            setup.proxy.freeze()
            #expect(DaemonHarness.wait(seconds: 20) { Self.stalledLine(daemon) != nil }, "\(daemon.text)")
            setup.proxy.thaw()
            #expect(DaemonHarness.wait(seconds: 20) { daemon.text.contains("\"event\":\"database_recovered\"") }, "\(daemon.text)")
            var readyz = ""
            #expect(DaemonHarness.wait(seconds: 20) {
                readyz = daemon.readyz()
                return readyz.contains("database reachable")
            }, "\(readyz)")
            #expect(DaemonHarness.wait(seconds: 10) { daemon.metrics().contains("\npushd_database_stalled 0") })
            // Said once per stall: the stall and its end alternate (a later statement over
            // stall_s on a loaded machine is a stall of its own, told as one).
            let told = daemon.text.split(separator: "\n").compactMap { line -> String? in
                line.contains("\"event\":\"database_stalled\"") ? "stalled"
                    : line.contains("\"event\":\"database_recovered\"") ? "recovered" : nil
            }
            #expect(told.count >= 2 && told.prefix(2) == ["stalled", "recovered"]
                    && zip(told, told.dropFirst()).allSatisfy { $0 != $1 }, "\(told): \(daemon.text)")
            // Sending goes on after the stall.
            let before = setup.harness.mock.stats.accepted
            try TLSFailurePausesAppTests.enqueue(try database.connect(), count: 1)
            #expect(DaemonHarness.wait(seconds: 20) { setup.harness.mock.stats.accepted > before }, "\(daemon.text)")
            kill(daemon.process.processIdentifier, SIGTERM)
            #expect(DaemonProcessTests.waitForExit(daemon.process, seconds: 20))
            #expect(daemon.process.terminationStatus == 0, "\(daemon.text)")
        }
    }
}
