import APNs
import Posix
import APNsMock
import Foundation
import Glibc
import PushdTestSupport
import QueueStore
import Testing
@testable import pushd

/// APNs answering 503 to everything: once pushd sees a lane down it sends only the outage
/// probe, not every waiting notification on its own backoff, and when APNs answers again what
/// waited goes out at once, each notification once.
@Suite(.serialized) struct APNsDownRetryPressureTests {
    /// Starts `pushd run` against APNs answering 503 to everything, with a campaign of `targets`
    /// and `jobs` transactional jobs, retries from `baseMilliseconds` up to 10 minutes and a probe
    /// a second; runs `during` (given the count of 503 answers so far), then APNs answers again
    /// and everything must go out once.
    static func throughAnOutage(_ database: IsolatedDatabase, targets: Int, jobs: Int, baseMilliseconds: Int,
                                during: (_ harness: DaemonHarness, _ unavailable: () -> Int) throws -> Void) throws {
        let harness = try DaemonHarness(database: database)
        let connection = try database.connect()
        let config = try APNsStormTests.configFile(harness, baseMilliseconds: baseMilliseconds, maxMilliseconds: 600_000,
                                                   extra: "  outage_probe_ms: 1000\n")
        // No chunk may be sent twice and no takeover is timed: leases a stalled renewal
        // cannot lose on a loaded machine.
        try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
        try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
        let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
        defer {
            kill(process.processIdentifier, SIGTERM)
            _ = DaemonProcessTests.waitForExit(process, seconds: 10)
        }
        let id = try CampaignLaneTests.campaign(connection, count: targets)
        try connection.query("""
            INSERT INTO pushd.jobs (app, device_token, payload)
            SELECT 'shop', lpad(to_hex(900000 + g), 16, '0') || repeat(lpad(to_hex(900000 + g), 16, '0'), 3),
                   '{"aps":{"alert":"down"}}'
            FROM generate_series(1, \(jobs)) g
            """)
        try during(harness) { harness.mock.stats.rejected["503 ServiceUnavailable"] ?? 0 }

        try harness.mock.setFaults(.none)
        let total = targets + jobs
        let back = Timestamp()
        #expect(try DaemonHarness.wait(seconds: 30) {
            try harness.mock.stats.accepted >= total && DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0
        })
        print("everything accepted \(String(format: "%.1f", Timestamp().timeIntervalSince(back))) s after APNs answered again")
        #expect(try DaemonHarness.wait(seconds: 10) { try CampaignStore().campaign(connection, id: id)?.status == .done })
        #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
        let log = harness.mock.acceptedLog
        #expect(log.count == total)
        #expect(Set(log.map(\.token)).count == total)
    }

    @Test func aDownLaneSendsOnlyItsProbesAndEverythingGoesOutOnceWhenAPNsIsBack() throws {
        try IsolatedDatabase.with { database in
            let targets = 3000, jobs = 1000
            // pushd's own retry defaults (1 s, growing with the outage).
            try Self.throughAnOutage(database, targets: targets, jobs: jobs, baseMilliseconds: 1000) { _, unavailable in
                // Every notification has been answered 503 at least once, and the lanes are down.
                #expect(try DaemonHarness.wait(seconds: 20) { unavailable() >= targets + jobs })
                Thread.sleep(forTimeInterval: 4)
                let before = unavailable(), from = Timestamp()
                let window = 10.0
                Thread.sleep(forTimeInterval: window)
                let during = unavailable() - before, elapsed = max(window, Timestamp().timeIntervalSince(from))
                // Two lanes, one app and environment each, a probe a second (±25 %): about 20 in
                // 10 s (the bound grows with a window a loaded machine made longer).
                #expect(during <= Int(4 * elapsed), "\(during) requests reached APNs in \(elapsed) s while it answered 503 to everything")
                print("down lanes: \(during) requests in \(Int(window)) s, \(unavailable()) answered 503 in all")
            }
        }
    }

    /// What APNs answered 503 in the first second of an outage, before pushd called the lanes
    /// down, was set aside on a backoff of its own (here up to 10 s, as `base_delay_ms` allows):
    /// coming due within the outage it waits for APNs with the rest instead of going into it,
    /// thousands in a few seconds, beside the probes. When APNs answers again everything goes
    /// out once.
    @Test func retriesSetAsideBeforeTheOutageWasCalledWaitWithTheRest() throws {
        try IsolatedDatabase.with { database in
            let targets = 3000, jobs = 2000
            try Self.throughAnOutage(database, targets: targets, jobs: jobs, baseMilliseconds: 10_000) { harness, unavailable in
                let log = harness.directory + "/pushd.log"
                let down = {
                    ["transactional", "campaign"].allSatisfy { lane in
                        EnvironmentOutageTests.outageLines(log, "apns_down").contains { $0.contains("\"lane\":\"\(lane)\"") }
                    }
                }
                #expect(DaemonHarness.wait(seconds: 30) { down() }, "pushd did not call both lanes down within 30 s")
                let firstWave = unavailable()
                // What was on the wire when the lanes were called down is answered meanwhile.
                Thread.sleep(forTimeInterval: 1)
                let before = unavailable(), from = Timestamp()
                let window = 8.0
                Thread.sleep(forTimeInterval: window)
                let during = unavailable() - before, elapsed = max(window, Timestamp().timeIntervalSince(from))
                print("first wave: \(firstWave) answered 503 before both lanes were called down, \(during) in the \(Int(window)) s after")
                // The wave this test is about (all 5,000 but on a loaded machine).
                #expect(firstWave >= 1000, "only \(firstWave) requests reached APNs before the lanes were called down")
                // Two lanes, a probe a second (±25 %) each, and a retry let through as the probe at
                // most every 0.75 s: about 20 in 8 s. Their own backoffs, spread over 10 s, made
                // most of the first wave due in the window: thousands.
                #expect(during <= Int(4 * elapsed), "\(during) requests reached APNs in \(elapsed) s while it answered 503 to everything")
            }
        }
    }

    /// A campaign whose lane goes down stops taking fresh targets, keeping its chunks, and
    /// resumes where it stopped when APNs answers again: its targets are not all sent once into
    /// the outage and parked. Nor are they set aside unsent one parked row each: they stay in
    /// their chunks, the parked table holds only what APNs answered (and the probes), and once
    /// APNs answers the campaign goes on at the chunks' speed, not at the parked claim's.
    @Test func aCampaignStopsSendingFreshTargetsIntoADownLaneAndResumesWhenAPNsIsBack() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let targets = 60_000
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 1000, maxMilliseconds: 600_000,
                                                       extra: "  outage_probe_ms: 1000\n")
            // No chunk may be sent twice and no takeover is timed: leases a stalled renewal
            // cannot lose on a loaded machine.
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            let id = try CampaignLaneTests.campaign(connection, count: targets)
            let process = try DaemonProcessTests.start(config: config, log: harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            // Some of it goes out, 5,000 of it timed: the campaign's pace on this machine as loaded
            // now, what its recovery is measured against. Then APNs answers 503 to everything.
            #expect(try DaemonHarness.wait(seconds: 20) { harness.mock.stats.accepted >= 1000 })
            let paceFrom = harness.mock.stats.accepted
            let paceStarted = Timestamp()
            #expect(try DaemonHarness.wait(seconds: 30) { harness.mock.stats.accepted >= 6000 })
            let pace = Double(harness.mock.stats.accepted - paceFrom) / max(0.05, Timestamp().timeIntervalSince(paceStarted))
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let unavailable = { harness.mock.stats.rejected["503 ServiceUnavailable"] ?? 0 }
            #expect(try DaemonHarness.wait(seconds: 10) { unavailable() > 0 })
            Thread.sleep(forTimeInterval: 4)
            let before = unavailable(), from = Timestamp()
            let window = 10.0
            Thread.sleep(forTimeInterval: window)
            let during = unavailable() - before, elapsed = max(window, Timestamp().timeIntervalSince(from))
            let acceptedBefore = harness.mock.stats.accepted
            let answered = unavailable()
            let parked = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(id)")
            let unsent = try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(id) AND last_error LIKE 'not sent:%'
                """)
            print("down campaign lane: \(parked) targets parked (\(unsent) set aside unsent), \(answered) requests answered 503, \(acceptedBefore) accepted before the outage")
            // What APNs answered 503 (before the lane was seen down, and the probes), not the rest of the campaign.
            #expect(parked <= answered, "\(parked) targets parked while APNs answered \(answered) requests")
            #expect(unsent < 1000, "\(unsent) of \(targets) targets parked unsent during the outage")
            // Two workers and the parked targets, a probe a second each: about 30 in 10 s.
            #expect(during <= Int(6 * elapsed), "\(during) requests reached APNs in \(elapsed) s while it answered 503 to everything")
            #expect(acceptedBefore + unavailable() < targets, "the whole campaign was sent into the outage")
            print("down campaign lane: \(during) requests in \(Int(window)) s; \(acceptedBefore) accepted and \(unavailable()) answered 503 in all")

            try harness.mock.setFaults(.none)
            let back = Timestamp()
            var resumed: Double?
            #expect(try DaemonHarness.wait(seconds: 120) {
                if resumed == nil, harness.mock.stats.accepted > acceptedBefore { resumed = Timestamp().timeIntervalSince(back) }
                return try CampaignStore().campaign(connection, id: id)?.status == .done
            })
            let recovery = Timestamp().timeIntervalSince(back)
            let remaining = Double(targets - acceptedBefore)
            // The lane is seen back by its probe (one a second ±25 %: the first answer within
            // 2.5 s, the second, which proves it back, about a second later), then what was left
            // goes at the chunks' pace measured before the outage, with room for twice the time;
            // the parked claim took 17 s for what the chunks sent in a few. Both parts scale with
            // the machine's load, not a fixed 10 s.
            let probeAllowance = 3.5 + 2
            let bound = probeAllowance + 2 * remaining / pace
            print("campaign resumed \(resumed.map { String(format: "%.1f", $0) } ?? "never") s and done \(String(format: "%.1f", recovery)) s after APNs answered again; "
                  + "\(Int(remaining)) left at a pace of \(Int(pace))/s before the outage: bound \(String(format: "%.1f", bound)) s")
            #expect((resumed ?? .infinity) < probeAllowance, "the campaign resumed \(resumed ?? -1) s after APNs answered again")
            #expect(recovery < bound, "the campaign took \(recovery) s to finish after APNs answered again (bound \(bound) s at \(Int(pace))/s)")
            let campaign = try #require(try CampaignStore().campaign(connection, id: id))
            #expect(campaign.sent == targets && campaign.failed == 0, "\(campaign.failedByReason)")
            let log = harness.mock.acceptedLog
            #expect(log.count == targets)
            #expect(Set(log.map(\.token)).count == targets)
        }
    }

    /// A campaign of the app's registered tokens, `total` of them, every `every`th (by token
    /// order) of the first `sandbox` × `every` a development build's, the others production, mixed as an
    /// app's registrations are; and the config file for the real binary, with retries that wait
    /// (1 s up to 10 minutes) and an outage probe a second. Not started.
    static func registeredTokenCampaign(_ hosts: EnvironmentRoutingTests.Hosts, _ connection: PGConnection,
                                        total: Int, sandbox: Int, every: Int = 20) throws -> (config: String, id: Int64) {
        let config = try hosts.writeConfigFile()
        let retry = "retry:\n  base_delay_ms: 10\n  max_delay_ms: 200\n"
        let yaml = try String(contentsOfFile: config, encoding: .utf8)
        #expect(yaml.contains(retry))
        try yaml.replacingOccurrences(of: retry, with: "retry:\n  base_delay_ms: 1000\n  max_delay_ms: 600000\n  outage_probe_ms: 1000\n")
            .write(toFile: config, atomically: true, encoding: .utf8)
        try connection.query("""
            INSERT INTO pushd.device_tokens (app, token, environment)
            SELECT 'shop', lpad(to_hex(g), 64, '0'), CASE WHEN g % \(every) = 0 AND g <= \(sandbox * every) THEN 'sandbox' ELSE 'production' END
            FROM generate_series(1, \(total)) g
            """)
        #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.device_tokens WHERE environment = 'sandbox'") == sandbox)
        let store = CampaignStore()
        let id = try store.create(connection, NewCampaign(app: "shop", name: "registered", payload: #"{"aps":{"alert":"hi"}}"#))
        #expect(try store.importFromDeviceTokens(connection, campaignID: id).imported == total)
        return (config, id)
    }

    /// How many chunk rows were updated so far: each lease and release of a chunk writes its
    /// row, so a lease loop shows here (`retagChunks` on the statistics' delay).
    static func chunkRowWrites(_ connection: PGConnection) throws -> Int {
        try DaemonHarness.count(connection, "SELECT n_tup_upd FROM pg_stat_user_tables WHERE schemaname = 'pushd' AND relname = 'campaign_chunks'")
    }

    /// Sets the environment the chunks of campaign `id` record, from a session of its own: a
    /// session's table statistics reach `pg_stat_user_tables` a second or more after its
    /// writes (up to 10 s while it is idle), or when it ends, so these writes made on the
    /// test's session were counted among the daemon's chunk writes
    /// `expectWaitThroughAnOutageOfBoth` measures.
    static func retagChunks(_ database: IsolatedDatabase, campaign id: Int64, environment: String) throws {
        let session = try database.connect()
        defer { session.close() }
        try session.query("UPDATE pushd.campaign_chunks SET environment = \(environment) WHERE campaign_id = \(id)")
    }

    /// Waits until the log says APNs takes none of the campaign lane's notifications to each of
    /// `environments`, then 2 s more for what was on the wire then to be answered.
    static func waitUntilDown(_ environments: [String], log: String) {
        let down = {
            environments.allSatisfy { environment in
                EnvironmentOutageTests.outageLines(log, "apns_down", environment: environment).contains { $0.contains(#""lane":"campaign""#) }
            }
        }
        #expect(DaemonHarness.wait(seconds: 30) { down() }, "pushd did not call the campaign lane down in \(environments) within 30 s of the 503s")
        Thread.sleep(forTimeInterval: 2)
    }

    /// The campaign finishes with every target sent once, each to its environment's host.
    static func expectDeliveredOnce(_ hosts: EnvironmentRoutingTests.Hosts, _ connection: PGConnection,
                                    campaign id: Int64, total: Int, sandbox sandboxCount: Int) throws {
        let store = CampaignStore()
        #expect(try DaemonHarness.wait(seconds: 90) { try store.campaign(connection, id: id)?.status == .done })
        let campaign = try #require(try store.campaign(connection, id: id))
        #expect(campaign.sent == total && campaign.failed == 0, "sent \(campaign.sent) failed \(campaign.failed) \(campaign.failedByReason)")
        let production = hosts.production.acceptedLog, sandbox = hosts.sandbox.acceptedLog
        #expect(production.count == total - sandboxCount && Set(production.map(\.token)).count == total - sandboxCount)
        #expect(sandbox.count == sandboxCount && Set(sandbox.map(\.token)).count == sandboxCount)
    }

    /// Starts `pushd run` on the campaign, turns both hosts to 503 once 1,000 are accepted, and
    /// checks the outage: few requests (the probes), no lease loop (each lease and release of a
    /// chunk writes its row), its targets not parked one row each; then APNs answers again and
    /// every target is delivered once.
    static func expectWaitThroughAnOutageOfBoth(_ hosts: EnvironmentRoutingTests.Hosts, _ connection: PGConnection, config: String,
                                                campaign id: Int64, total: Int, sandbox sandboxCount: Int, layout: String,
                                                probesEachEnvironment: Bool = false) throws {
        let store = CampaignStore()
        #expect(try store.start(connection, id: id) == .running)
        let process = try DaemonProcessTests.start(config: config, log: hosts.harness.directory + "/pushd.log")
        defer {
            kill(process.processIdentifier, SIGTERM)
            _ = DaemonProcessTests.waitForExit(process, seconds: 10)
        }
        #expect(try DaemonHarness.wait(seconds: 20) { hosts.production.stats.accepted >= 1000 })
        try hosts.production.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
        try hosts.sandbox.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
        let unavailable = {
            (hosts.production.stats.rejected["503 ServiceUnavailable"] ?? 0) + (hosts.sandbox.stats.rejected["503 ServiceUnavailable"] ?? 0)
        }
        #expect(try DaemonHarness.wait(seconds: 10) { unavailable() > 0 })
        // The window starts once pushd has called both environments down on the campaign lane:
        // until then a chunk that records no environment may go whole to one not yet seen to
        // fail (that is how its outage is found, by three failures over a second), and a loaded
        // machine can take longer than a few seconds to lease one.
        Self.waitUntilDown(["production", "sandbox"], log: hosts.harness.directory + "/pushd.log")
        let chunkWrites = { try Self.chunkRowWrites(connection) }
        let leasesByEnvironment = {
            let rows = try connection.query("""
                SELECT coalesce(environment, 'none'), sum(leases)::bigint FROM pushd.campaign_chunks WHERE campaign_id = \(id) GROUP BY 1
                """)
            return try Dictionary(uniqueKeysWithValues: (0..<rows.rowCount).map {
                (try rows.require(String.self, row: $0, column: 0), try rows.require(Int.self, row: $0, column: 1))
            })
        }
        let unsentCount = {
            try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(id) AND last_error LIKE 'not sent:%'")
        }
        let unsentBefore = try unsentCount()
        let before = unavailable(), writesBefore = try chunkWrites(), leasesBefore = try leasesByEnvironment(), from = Timestamp()
        Thread.sleep(forTimeInterval: 6)
        let during = unavailable() - before, writes = try chunkWrites() - writesBefore, leasesAfter = try leasesByEnvironment()
        let elapsed = max(6, Timestamp().timeIntervalSince(from))
        if probesEachEnvironment {
            // The lease hands out a chunk of each environment whose probe is due, not the first free one.
            for environment in ["production", "sandbox"] {
                #expect(leasesAfter[environment, default: 0] > leasesBefore[environment, default: 0],
                        "no chunk to \(environment) was leased in 6 s of the outage: \(leasesBefore) then \(leasesAfter)")
            }
        }
        let unsent = try unsentCount()
        print("\(layout), both environments down: \(during) requests answered 503 and \(writes) chunk row writes in 6 s; \(unsent) targets set aside unsent, \(unsent - unsentBefore) of them in the 6 s")
        #expect(during <= Int(10 * elapsed), "\(during) requests reached APNs in \(elapsed) s while it answered 503 to everything")
        // Two workers, a lease and a release per probe each: about 24, or 48 when each
        // environment's chunks are probed apart.
        #expect(writes <= Int(25 * elapsed), "\(writes) chunk row writes in \(elapsed) s: the campaign was leased and released in a loop")
        // Once both are down a chunk stops at its first unsent target: nothing is set aside one
        // row each. Until then, while one environment is down and the other not yet (failing,
        // but not for a second yet), a chunk that mixes both sets aside each target of the one
        // down so that the other's can go: as many as that gap lasts, which a loaded machine
        // makes longer (4,472 seen), so they are not counted here.
        #expect(unsent - unsentBefore < 100, "\(unsent - unsentBefore) targets were parked one row each in 6 s of an outage of both")

        try hosts.production.setFaults(.none)
        try hosts.sandbox.setFaults(.none)
        try Self.expectDeliveredOnce(hosts, connection, campaign: id, total: total, sandbox: sandboxCount)
    }

    /// A campaign of registered tokens, most of them production and some sandbox, waits in its
    /// chunks through a production outage as a file import's does: its chunks are grouped by
    /// environment, so a production chunk stops at its first unsent target rather than setting
    /// every target aside one parked row each (they carry their own environments, and the
    /// chunk could not tell that none of the other environment followed). When production
    /// answers again everything is delivered once, the sandbox targets to their own host.
    @Test func aCampaignOfRegisteredTokensWaitsInItsChunksThroughAnOutageOfItsEnvironment() throws {
        try IsolatedDatabase.with { database in
            let hosts = try EnvironmentRoutingTests.Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let connection = try database.connect()
            // Enough that most of it is unsent when pushd has seen a second of 503s and calls the lane down.
            let total = 61_500, sandboxCount = 3000
            let (config, id) = try Self.registeredTokenCampaign(hosts, connection, total: total, sandbox: sandboxCount)
            let store = CampaignStore()
            #expect(try store.start(connection, id: id) == .running)
            let process = try DaemonProcessTests.start(config: config, log: hosts.harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            #expect(try DaemonHarness.wait(seconds: 20) { hosts.production.stats.accepted >= 1000 })
            try hosts.production.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let unavailable = { hosts.production.stats.rejected["503 ServiceUnavailable"] ?? 0 }
            #expect(try DaemonHarness.wait(seconds: 10) { unavailable() > 0 })
            Self.waitUntilDown(["production"], log: hosts.harness.directory + "/pushd.log")
            let before = unavailable(), from = Timestamp()
            Thread.sleep(forTimeInterval: 6)
            let during = unavailable() - before, elapsed = max(6, Timestamp().timeIntervalSince(from))
            print("registered-token campaign in a production outage: \(during) requests answered 503 in 6 s once it was called down")
            // Two workers, a probe a second each, and the retries parked before the outage was seen.
            #expect(during <= Int(10 * elapsed), "\(during) requests reached APNs in \(elapsed) s while it answered 503 to everything")
            let acceptedBefore = hosts.production.stats.accepted
            let unsent = try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(id) AND last_error LIKE 'not sent:%'
                """)
            print("registered-token campaign in a production outage: \(unsent) targets set aside unsent, \(acceptedBefore) accepted before it, \(unavailable()) answered 503")
            #expect(acceptedBefore + unavailable() < total - sandboxCount, "the whole campaign was sent into the outage")
            // Retries come due in the stopped chunks (set aside, they wait parked), not the campaign.
            #expect(unsent < 1000, "\(unsent) of \(total - sandboxCount - acceptedBefore) unsent production targets were parked one row each during the outage")
            let log = try String(contentsOfFile: hosts.harness.directory + "/pushd.log", encoding: .utf8)
            #expect(log.contains("campaign \(id) of app shop waits for APNs, which takes none of the app's notifications to production"))

            try hosts.production.setFaults(.none)
            try Self.expectDeliveredOnce(hosts, connection, campaign: id, total: total, sandbox: sandboxCount)
        }
    }

    /// Registered tokens imported into a campaign that waits for a sandbox outage go out
    /// meanwhile when they are production tokens: the lease passes over the campaign's sandbox
    /// chunks, not the whole campaign (it did before schema version 35, and the later import's
    /// production chunks, behind the stopped sandbox ones, waited for as long as the sandbox
    /// outage lasted). When sandbox answers again everything is delivered once.
    /// Run uncapped and with a `rate_limit` of the campaign's own: a capped campaign's lease
    /// reserves the time its chunk's targets take at the cap, and a probe's lease of a sandbox
    /// chunk reserved a whole chunk's (2 s at 500/s, against a probe a second): when that time
    /// was up the probe was due again and took the next sandbox chunk, and the production
    /// chunks got none, until a probe's chunk gave back, as it stopped, the time its unsent
    /// targets would have taken.
    @Test(arguments: [nil, 500] as [Int?])
    func productionTokensImportedIntoACampaignWaitingForSandboxGoOutMeanwhile(cappedAt rateLimit: Int?) throws {
        try IsolatedDatabase.with { database in
            let hosts = try EnvironmentRoutingTests.Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let connection = try database.connect()
            // 1,000 production tokens, then 30 chunks of sandbox ones.
            let first = 31_000, sandboxCount = 30_000, later = rateLimit == nil ? 20_000 : 3000
            let (config, id) = try Self.registeredTokenCampaign(hosts, connection, total: first, sandbox: sandboxCount, every: 1)
            if let rateLimit { try connection.query("UPDATE pushd.campaigns SET rate_limit = \(rateLimit) WHERE id = \(id)") }
            try hosts.sandbox.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let store = CampaignStore()
            #expect(try store.start(connection, id: id) == .running)
            let process = try DaemonProcessTests.start(config: config, log: hosts.harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            let waiting = "campaign \(id) of app shop waits for APNs, which takes none of the app's notifications to sandbox"
            #expect(try DaemonHarness.wait(seconds: 20) {
                try String(contentsOfFile: hosts.harness.directory + "/pushd.log", encoding: .utf8).contains(waiting)
            })
            #expect(try DaemonHarness.wait(seconds: 10) { hosts.production.stats.accepted >= first - sandboxCount })
            // The sandbox targets sent before the outage was seen are answered meanwhile.
            Thread.sleep(forTimeInterval: 4)
            // Registered since, and imported while the campaign waits.
            try connection.query("""
                INSERT INTO pushd.device_tokens (app, token, environment)
                SELECT 'shop', lpad(to_hex(g), 64, '0'), 'production' FROM generate_series(\(first + 1), \(first + later)) g
                """)
            let sandboxRequests = { hosts.sandbox.stats.rejected["503 ServiceUnavailable"] ?? 0 }
            let chunkWrites = { try Self.chunkRowWrites(connection) }
            let requestsBefore = sandboxRequests(), writesBefore = try chunkWrites(), started = Date()
            #expect(try store.importFromDeviceTokens(connection, campaignID: id).imported == later)
            let production = first - sandboxCount + later
            let delivered = try DaemonHarness.wait(seconds: 20) { hosts.production.stats.accepted >= production }
            let seconds = Date().timeIntervalSince(started)
            let accepted = hosts.production.stats.accepted, requests = sandboxRequests() - requestsBefore, writes = try chunkWrites() - writesBefore
            print("production tokens imported into a campaign\(rateLimit.map { " capped at \($0)/s" } ?? "") waiting for sandbox: \(accepted) of \(production) production targets accepted in \(Int(seconds)) s, \(requests) sandbox requests answered 503 and \(writes) chunk row writes meanwhile")
            #expect(delivered, "\(accepted) of \(production) production targets accepted in 20 s while the campaign waited for sandbox")
            // Two workers, a probe a second each, and the parked targets' probes; the 20 production
            // chunks a lease, checkpoints and a finish each, the sandbox probes a lease and a release.
            #expect(requests <= 10 * Int(seconds.rounded(.up)) + 20, "\(requests) requests reached the sandbox in \(seconds) s while it answered 503 to everything")
            #expect(writes <= 400, "\(writes) chunk row writes in \(seconds) s: chunks were leased and released in a loop")
            #expect(try store.campaign(connection, id: id)?.status == .running)
            let unsent = try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(id) AND last_error LIKE 'not sent:%'
                """)
            #expect(unsent < 1000, "\(unsent) unsent sandbox targets were parked one row each during the outage")

            // The cap lifted: the 30,000 sandbox targets would take a minute at it.
            if rateLimit != nil { try connection.query("UPDATE pushd.campaigns SET rate_limit = NULL, next_lease_at = NULL WHERE id = \(id)") }
            try hosts.sandbox.setFaults(.none)
            try Self.expectDeliveredOnce(hosts, connection, campaign: id, total: first + later, sandbox: sandboxCount)
        }
    }

    /// A campaign whose chunks go to one environment each, alternating between them (as a
    /// campaign imported in several `--from-tokens` runs has them), through an outage of both:
    /// its chunks of both environments stop at their first unsent target and the campaign
    /// waits for both, leased again only for the probes (a lease and a release per worker and
    /// probe interval, not in a loop), its targets not parked one row each; when APNs answers
    /// everything is delivered once.
    /// Run with chunks that record their environment, as imports since schema version 35 write
    /// them (the lease passes over each environment's chunks but for its probes), and with
    /// chunks that record none, as before (the whole campaign is passed over, and a worker
    /// leaves it alone for a probe interval after each chunk of it that it stops).
    @Test(arguments: [true, false])
    func aCampaignWithChunksOfBothEnvironmentsWaitsThroughAnOutageOfBoth(recordingTheirEnvironment: Bool) throws {
        try IsolatedDatabase.with { database in
            let hosts = try EnvironmentRoutingTests.Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let connection = try database.connect()
            let total = 60_000, sandboxCount = 30_000
            let (config, id) = try Self.registeredTokenCampaign(hosts, connection, total: total, sandbox: sandboxCount, every: 2)
            // Chunk 0 production, 1 sandbox, 2 production, …, 1,000 targets each.
            try connection.query("""
                CREATE TEMP TABLE regrouped AS
                SELECT (2 * (rank / 1000) + CASE WHEN environment = 'sandbox' THEN 1 ELSE 0 END)::integer AS chunk,
                       array_agg(token ORDER BY token) AS tokens, array_agg(environment ORDER BY token) AS environments
                FROM (SELECT e.token, e.environment, row_number() OVER (PARTITION BY e.environment ORDER BY e.token) - 1 AS rank
                      FROM pushd.campaign_targets t CROSS JOIN LATERAL unnest(t.tokens, t.environments) AS e(token, environment)
                      WHERE t.campaign_id = \(id)) every
                GROUP BY 1
                """)
            try connection.query("DELETE FROM pushd.campaign_targets WHERE campaign_id = \(id)")
            try connection.query("""
                INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens, environments) SELECT \(id), chunk, tokens, environments FROM regrouped
                """)
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.campaign_targets WHERE campaign_id = \(id) AND cardinality(tokens) = 1000
                  AND environments[1] = CASE WHEN chunk % 2 = 1 THEN 'sandbox' ELSE 'production' END
                  AND environments[1] = ALL (environments)
                """) == total / 1000)
            try Self.retagChunks(database, campaign: id, environment: recordingTheirEnvironment
                                 ? "CASE WHEN chunk % 2 = 1 THEN 'sandbox' ELSE 'production' END" : "NULL")
            try Self.expectWaitThroughAnOutageOfBoth(hosts, connection, config: config, campaign: id, total: total, sandbox: sandboxCount,
                                                     layout: "chunks of one environment each\(recordingTheirEnvironment ? ", recorded" : ", not recorded")",
                                                     probesEachEnvironment: recordingTheirEnvironment)
        }
    }

    /// A campaign whose chunks mix both environments, as registered tokens were chunked before
    /// schema version 34, through an outage of both: a mixed chunk stops at its first unsent
    /// target once both are down (with one down it sets that one's targets aside, so that the
    /// other's go), the campaign waits for both, and its targets are not parked one row each;
    /// when APNs answers everything is delivered once.
    @Test func aCampaignOfMixedChunksWaitsThroughAnOutageOfBoth() throws {
        try IsolatedDatabase.with { database in
            let hosts = try EnvironmentRoutingTests.Hosts(database: database)
            defer { hosts.sandbox.stop() }
            let connection = try database.connect()
            let total = 60_000, sandboxCount = 3000
            let (config, id) = try Self.registeredTokenCampaign(hosts, connection, total: total, sandbox: sandboxCount)
            // Regrouped by token alone, as before version 34: every chunk of 1,000 has 50 sandbox targets.
            try connection.query("""
                CREATE TEMP TABLE regrouped AS
                SELECT n::integer AS chunk, array_agg(token ORDER BY token) AS tokens, array_agg(environment ORDER BY token) AS environments
                FROM (SELECT e.token, e.environment, (row_number() OVER (ORDER BY e.token) - 1) / 1000 AS n
                      FROM pushd.campaign_targets t CROSS JOIN LATERAL unnest(t.tokens, t.environments) AS e(token, environment)
                      WHERE t.campaign_id = \(id)) every
                GROUP BY n
                """)
            try connection.query("DELETE FROM pushd.campaign_targets WHERE campaign_id = \(id)")
            try connection.query("""
                INSERT INTO pushd.campaign_targets (campaign_id, chunk, tokens, environments) SELECT \(id), chunk, tokens, environments FROM regrouped
                """)
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.campaign_targets WHERE campaign_id = \(id) AND 'sandbox' = ANY (environments) AND 'production' = ANY (environments)
                """) == total / 1000)
            // Chunks imported before schema version 35 record no environment.
            try Self.retagChunks(database, campaign: id, environment: "NULL")
            try Self.expectWaitThroughAnOutageOfBoth(hosts, connection, config: config, campaign: id, total: total, sandbox: sandboxCount,
                                                     layout: "mixed chunks")
        }
    }

    /// A campaign waiting for its down environment holds no campaign worker: an older
    /// production campaign during a production outage, its unsent targets left in its chunks,
    /// while a newer sandbox campaign of the same app is sent in full; each is delivered once.
    @Test func aCampaignWaitingForItsDownEnvironmentLeavesTheWorkersToAnotherCampaign() throws {
        try IsolatedDatabase.with { database in
            let hosts = try EnvironmentRoutingTests.Hosts(database: database,
                                                          productionFaults: FaultConfiguration(serviceUnavailableRate: 1))
            defer { hosts.sandbox.stop() }
            let connection = try database.connect()
            let config = try hosts.writeConfigFile()
            let retry = "retry:\n  base_delay_ms: 10\n  max_delay_ms: 200\n"
            let yaml = try String(contentsOfFile: config, encoding: .utf8)
            #expect(yaml.contains(retry))
            try yaml.replacingOccurrences(of: retry, with: "retry:\n  base_delay_ms: 1000\n  max_delay_ms: 600000\n  outage_probe_ms: 1000\n")
                .write(toFile: config, atomically: true, encoding: .utf8)
            let store = CampaignStore()
            func campaign(_ environment: String, first: Int, count: Int) throws -> Int64 {
                let id = try store.create(connection, NewCampaign(app: "shop", name: environment, environment: environment,
                                                                  payload: #"{"aps":{"alert":"hi"}}"#))
                let targets = (first..<first + count).map { (token: DaemonHarness.token($0), payload: String?.none) }
                #expect(try store.importTargets(connection, campaignID: id, targets: targets).imported == count)
                #expect(try store.start(connection, id: id) == .running)
                return id
            }
            let down = try campaign("production", first: 1, count: 20_000)
            let process = try DaemonProcessTests.start(config: config, log: hosts.harness.directory + "/pushd.log")
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            let unavailable = { hosts.production.stats.rejected["503 ServiceUnavailable"] ?? 0 }
            #expect(try DaemonHarness.wait(seconds: 20) { unavailable() > 0 })
            Thread.sleep(forTimeInterval: 3)
            let up = try campaign("sandbox", first: 100_000, count: 3000)
            let started = Timestamp()
            #expect(try DaemonHarness.wait(seconds: 20) { try store.campaign(connection, id: up)?.status == .done })
            print("sandbox campaign done in \(String(format: "%.1f", Timestamp().timeIntervalSince(started))) s while production answered 503")
            #expect(hosts.sandbox.acceptedLog.count == 3000)
            #expect(try DaemonHarness.count(connection, """
                SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(down) AND last_error LIKE 'not sent:%'
                """) < 1000)

            try hosts.production.setFaults(.none)
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: down)?.status == .done })
            let campaign = try #require(try store.campaign(connection, id: down))
            #expect(campaign.sent == 20_000 && campaign.failed == 0, "\(campaign.failedByReason)")
            let log = hosts.production.acceptedLog
            #expect(log.count == 20_000 && Set(log.map(\.token)).count == 20_000)
            #expect(Set(hosts.sandbox.acceptedLog.map(\.token)).count == 3000)
        }
    }

    /// Jobs APNs answered 503 while their lane was down, in a batch that then waits on one slow
    /// answer while APNs comes back: `apns_back` cannot make due rows the batch holds, so the
    /// batch makes them due itself when it is written. Before, they waited the outage delay
    /// (here 7.5–10 minutes) after APNs was back.
    @Test func jobsAnsweredWhileDownInABatchThatOutlivesTheOutageAreDueWhenItIsWritten() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 200, maxMilliseconds: 600_000,
                                                       extra: "  outage_probe_ms: 1000\n")
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: log)
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            let token = DaemonHarness.token
            func insert(_ seeds: ClosedRange<Int>) throws {
                try connection.query("""
                    INSERT INTO pushd.jobs (app, device_token, payload)
                    SELECT 'shop', lpad(to_hex(g), 16, '0') || repeat(lpad(to_hex(g), 16, '0'), 3), '{"aps":{"alert":"slow"}}'
                    FROM generate_series(\(seeds.lowerBound), \(seeds.upperBound)) g
                    """)
            }
            // Jobs that call the transactional lane down, then wait for APNs (and are its probes).
            try insert(1...20)
            #expect(DaemonHarness.wait(seconds: 30) {
                EnvironmentOutageTests.outageLines(log, "apns_down").contains { $0.contains("\"lane\":\"transactional\"") }
            }, "pushd did not call the transactional lane down within 30 s")
            // One batch while the lane is down: 30 jobs answered 503 at once, one answered 8 s late.
            let slow = token(100)
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1, delayedTokens: [slow: 8000]))
            let quick = (101...130).map(token)
            try insert(100...130)
            #expect(DaemonHarness.wait(seconds: 10) { quick.allSatisfy { (harness.mock.stats.perToken[$0]?.rejected ?? 0) > 0 } },
                    "the 30 quick jobs were not answered 503 within 10 s")
            // APNs answers again: the probes see it back while the batch waits on its slow answer.
            try harness.mock.setFaults(.none)
            let back = Timestamp()
            let settled = try DaemonHarness.wait(seconds: 30) { try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs") == 0 }
            let waiting = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.jobs")
            #expect(settled, "\(waiting) jobs still waiting 30 s after APNs answered again")
            if settled { print("every job accepted \(String(format: "%.1f", Timestamp().timeIntervalSince(back))) s after APNs answered again") }
            let backLines = EnvironmentOutageTests.outageLines(log, "apns_back").filter { $0.contains("\"lane\":\"transactional\"") }
            #expect(!backLines.isEmpty, "pushd did not say the transactional lane was back")
            let accepted = harness.mock.acceptedLog.map(\.token)
            #expect(accepted.count == 51 && Set(accepted) == Set((1...20).map(token) + [slow] + quick))
            #expect(try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.dead_jobs") == 0)
        }
    }

    /// The campaign lane's sibling: parked targets of a batch sent into the outage (their last
    /// error no outage's, so not held back) and answered 503 while the lane was down, the batch
    /// then waiting on one slow answer while APNs comes back, are due when it is written.
    @Test func parkedTargetsAnsweredWhileDownInABatchThatOutlivesTheOutageAreDueWhenItIsWritten() throws {
        try IsolatedDatabase.with { database in
            let harness = try DaemonHarness(database: database)
            let connection = try database.connect()
            let config = try APNsStormTests.configFile(harness, baseMilliseconds: 200, maxMilliseconds: 600_000,
                                                       extra: "  outage_probe_ms: 1000\n")
            try DaemonHarness.setLeaseSeconds(10, inConfigFile: config)
            // Its 20 targets call the campaign lane down, then wait for APNs (and are its probes).
            let down = try CampaignLaneTests.campaign(connection, count: 20)
            // All of its chunks sent; 31 targets parked after a 500 (no outage's error), due in an hour.
            let store = CampaignStore()
            let parked = try store.create(connection, NewCampaign(app: "shop", name: "parked", pushType: "alert",
                                                                  payload: #"{"aps":{"alert":"parked"}}"#))
            let tokens = (1001...1031).map(DaemonHarness.token)
            #expect(try store.importTargets(connection, campaignID: parked, targets: tokens.map { ($0, String?.none) }).imported == 31)
            #expect(try store.start(connection, id: parked) == .running)
            try connection.query("""
                UPDATE pushd.campaign_chunks SET checkpoint = size, finished_at = now(), lease_owner = NULL, lease_until = NULL
                WHERE campaign_id = $1
                """, [parked])
            try connection.query("UPDATE pushd.campaigns SET chunks_done = chunks_total WHERE id = $1", [parked])
            try connection.query("""
                INSERT INTO pushd.campaign_retries (campaign_id, chunk, position, token, due_at, attempts, first_attempt_at, last_error)
                SELECT $1, 0, g - 1, t, now() + interval '1 hour', 1, now(), 'InternalServerError'
                FROM unnest($2::text[]) WITH ORDINALITY AS u(t, g)
                """, [parked, tokens])
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1))
            let log = harness.directory + "/pushd.log"
            let process = try DaemonProcessTests.start(config: config, log: log)
            defer {
                kill(process.processIdentifier, SIGTERM)
                _ = DaemonProcessTests.waitForExit(process, seconds: 10)
            }
            #expect(DaemonHarness.wait(seconds: 30) {
                EnvironmentOutageTests.outageLines(log, "apns_down").contains { $0.contains("\"lane\":\"campaign\"") }
            }, "pushd did not call the campaign lane down within 30 s")
            // One parked batch while the lane is down: 30 answered 503 at once, one 8 s late.
            let slow = tokens[0], quick = Array(tokens.dropFirst())
            try harness.mock.setFaults(FaultConfiguration(serviceUnavailableRate: 1, delayedTokens: [slow: 8000]))
            try connection.query("UPDATE pushd.campaign_retries SET due_at = now() WHERE campaign_id = $1", [parked])
            #expect(DaemonHarness.wait(seconds: 10) { quick.allSatisfy { (harness.mock.stats.perToken[$0]?.rejected ?? 0) > 0 } },
                    "the 30 quick targets were not answered 503 within 10 s")
            // APNs answers again: the probes see it back while the batch waits on its slow answer.
            try harness.mock.setFaults(.none)
            let back = Timestamp()
            let finished = try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: parked)?.status == .done }
            let waiting = try DaemonHarness.count(connection, "SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = \(parked)")
            #expect(finished, "\(waiting) parked targets still waiting 30 s after APNs answered again")
            if finished { print("parked campaign done \(String(format: "%.1f", Timestamp().timeIntervalSince(back))) s after APNs answered again") }
            #expect(try DaemonHarness.wait(seconds: 30) { try store.campaign(connection, id: down)?.status == .done })
            let accepted = harness.mock.acceptedLog.map(\.token).filter { Set(tokens).contains($0) }
            #expect(accepted.count == 31 && Set(accepted) == Set(tokens))
            let campaign = try #require(try store.campaign(connection, id: parked))
            #expect(campaign.failed == 0, "\(campaign.failedByReason)")
        }
    }
}
