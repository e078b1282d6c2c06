import Foundation
import Posix
import PushdTestSupport
import QueueStore
import Testing

/// pushd.instances: registration, heartbeat, paused apps, the fleet's numbers, clean-up.
@Suite struct InstanceStoreTests {
    static func registration(_ host: String, apps: [String] = ["shop"], version: String = "1.0.0") -> InstanceRegistration {
        InstanceRegistration(host: host, pid: 42, version: version, libcurlVersion: "8.14.1", apps: apps,
                             startedAt: Timestamp(timeIntervalSince1970: 1_800_000_000))
    }

    @Test func aHeartbeatRegistersTheInstanceAndTheNextOneRecordsPausedApps() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let store = InstanceStore()
            let first = try store.heartbeat(connection, Self.registration("a", apps: ["shop", "news"]), paused: [:])
            #expect(first == FleetSummary(alive: 1, gone: 0, versions: 1, appSets: 1))
            try store.heartbeat(connection, Self.registration("a", apps: ["shop", "news"]), paused: ["shop": "InvalidProviderToken"])
            let records = try store.instances(connection)
            #expect(records.count == 1)
            let record = try #require(records.first)
            #expect(record.registration == Self.registration("a", apps: ["news", "shop"]))
            #expect(record.registration.id == "a/42")
            #expect(record.paused == ["shop": "InvalidProviderToken"])
            #expect(record.silentSeconds < 5)
            #expect(!record.isGone)
        }
    }

    @Test func summaryCountsVersionsAndAppSetsOfLiveInstancesOnly() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let store = InstanceStore()
            try store.heartbeat(connection, Self.registration("a"), paused: [:])
            try store.heartbeat(connection, Self.registration("b", version: "1.1.0"), paused: [:])
            try store.heartbeat(connection, Self.registration("c", apps: ["news"], version: "0.9.0"), paused: [:])
            #expect(try store.summary(connection) == FleetSummary(alive: 3, gone: 0, versions: 3, appSets: 2))
            try connection.query("UPDATE pushd.instances SET heartbeat_at = now() - interval '61 seconds' WHERE host = 'c'")
            #expect(try store.summary(connection) == FleetSummary(alive: 2, gone: 1, versions: 2, appSets: 1))
        }
    }

    /// The apps whose configured environment live instances advertise differently; an instance
    /// gone silent, or one that advertises none (an earlier version), does not count.
    @Test func summaryNamesTheAppsLiveInstancesDisagreeOnTheEnvironmentOf() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let store = InstanceStore()
            func registration(_ host: String, _ homes: [String: String]) -> InstanceRegistration {
                var registration = Self.registration(host, apps: homes.keys.sorted())
                registration.environments = homes.map { InstanceRegistration.homeEntry(app: $0.key, environment: $0.value) }
                    + homes.map { "\($0.key)/\($0.value)" }
                return registration
            }
            try store.heartbeat(connection, registration("a", ["shop": "sandbox", "news": "production"]), paused: [:])
            try store.heartbeat(connection, registration("b", ["shop": "production", "news": "production"]), paused: [:])
            try store.heartbeat(connection, Self.registration("c", apps: ["blog"]), paused: [:])
            #expect(try store.summary(connection).environmentDisagreements == ["shop"])
            #expect(registration("a", ["shop": "sandbox"]).home(of: "shop") == "sandbox")
            try connection.query("UPDATE pushd.instances SET heartbeat_at = now() - interval '61 seconds' WHERE host = 'b'")
            #expect(try store.summary(connection).environmentDisagreements == [])
        }
    }

    @Test func rowsSilentForFifteenMinutesAreRemovedByAnyHeartbeatAndACleanStopRemovesItsOwn() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let store = InstanceStore()
            try store.heartbeat(connection, Self.registration("a"), paused: [:])
            try store.heartbeat(connection, Self.registration("b"), paused: [:])
            try store.heartbeat(connection, Self.registration("c"), paused: [:])
            try connection.query("UPDATE pushd.instances SET heartbeat_at = now() - interval '14 minutes' WHERE host = 'b'")
            try connection.query("UPDATE pushd.instances SET heartbeat_at = now() - interval '16 minutes' WHERE host = 'c'")
            try store.heartbeat(connection, Self.registration("a"), paused: [:])
            #expect(try store.instances(connection).map(\.registration.host) == ["a", "b"])
            try store.remove(connection, id: "a/42")
            #expect(try store.instances(connection).map(\.registration.host) == ["b"])
        }
    }

    @Test func anEnvironmentIsSentElsewhereByALiveInstanceAdvertisingItOrByAnEarlierVersionServingTheApp() throws {
        try IsolatedDatabase.with { database in
            let connection = try database.connect()
            let store = InstanceStore()
            func registration(_ host: String, apps: [String], environments: [String]?) -> InstanceRegistration {
                InstanceRegistration(host: host, pid: 42, version: "1.0.0", libcurlVersion: "8.14.1", apps: apps,
                                     environments: environments, startedAt: Timestamp(timeIntervalSince1970: 1_800_000_000))
            }
            let wanted = ["shop/sandbox", "news/sandbox", "blog/production"]
            let me = registration("me", apps: ["shop", "news", "blog"], environments: ["shop/production", "news/production", "blog/sandbox"])
            try store.heartbeat(connection, me, paused: [:])
            #expect(try store.sentElsewhere(connection, id: me.id, wanted: wanted).isEmpty)
            try store.heartbeat(connection, registration("b", apps: ["shop", "news"], environments: ["shop/production", "shop/sandbox", "news/production"]),
                                paused: [:])
            #expect(try store.sentElsewhere(connection, id: me.id, wanted: wanted) == ["shop/sandbox"])
            // An earlier version says nothing: it claims every environment of its apps, as before.
            try store.heartbeat(connection, registration("old", apps: ["news"], environments: nil), paused: [:])
            #expect(try store.sentElsewhere(connection, id: me.id, wanted: wanted) == ["shop/sandbox", "news/sandbox"])
            #expect(try store.instances(connection).first { $0.registration.host == "b" }?.registration.environments
                    == ["news/production", "shop/production", "shop/sandbox"])
            // A gone instance sends nothing.
            try connection.query("UPDATE pushd.instances SET heartbeat_at = now() - interval '61 seconds' WHERE host <> 'me'")
            #expect(try store.sentElsewhere(connection, id: me.id, wanted: wanted).isEmpty)
        }
    }
}
