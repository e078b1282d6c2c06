import Posix

/// What a running `pushd run` says about itself in `pushd.instances`.
public struct InstanceRegistration: Sendable, Hashable {
    /// `host/pid`: unique among live processes. A container restarted in the same pod has
    /// the same host name and pid 1, and takes over the row of the process it replaces.
    public var id: String
    public var host: String
    public var pid: Int
    public var version: String
    public var libcurlVersion: String
    /// The apps of its configuration, sorted: it claims work of these apps only.
    public var apps: [String]
    /// "app/environment" for every environment of its apps it has credentials for, and
    /// "app/token" for every app it has a token (JWT) signing key for, sorted; nil for an
    /// instance that does not say (an earlier version), which claims every environment of its
    /// apps and all their token work. An instance of the version before "app/token" names
    /// environments only: it is not known to send token work.
    public var environments: [String]?
    public var startedAt: Timestamp

    /// `id` is the instance's name (`pushd run` adds random digits to host/pid: two containers
    /// on the host network share both); host/pid when none is given.
    public init(id: String? = nil, host: String, pid: Int, version: String, libcurlVersion: String, apps: [String],
                environments: [String]? = nil, startedAt: Timestamp) {
        self.id = id ?? "\(host)/\(pid)"
        self.host = host
        self.pid = pid
        self.version = version
        self.libcurlVersion = libcurlVersion
        self.apps = apps.sorted()
        self.environments = environments?.sorted()
        self.startedAt = startedAt
    }

    /// The entry of `environments` for `app` in `environment`.
    public static func environmentEntry(app: String, environment: String) -> String { "\(app)/\(environment)" }

    /// What follows "app/" in the entry of `environments` saying the instance has a token key for the app.
    public static let tokenEntryName = "token"

    /// The entry of `environments` saying the instance has a token (JWT) signing key for `app`:
    /// it can send the work APNs takes only with token authentication.
    public static func tokenEntry(app: String) -> String { "\(app)/\(tokenEntryName)" }

    /// What follows "app/" in the entry naming the app's configured environment.
    public static let homeEntryPrefix = "home:"

    /// The entry of `environments` naming `app`'s configured environment (`apps[].environment`):
    /// where its notifications go that name no environment and whose token was registered
    /// without one. Instances that disagree on it send such notifications to both hosts.
    public static func homeEntry(app: String, environment: String) -> String { "\(app)/\(homeEntryPrefix)\(environment)" }

    /// The configured environment of `app` this instance advertises; nil when it says none
    /// (an earlier version).
    public func home(of app: String) -> String? {
        let prefix = "\(app)/\(Self.homeEntryPrefix)"
        return environments?.first { $0.hasPrefix(prefix) }.map { String($0.dropFirst(prefix.count)) }
    }

    /// Whether this instance takes the work of `entry` ("app/environment" or "app/token"): it
    /// advertises the entry, or it advertises nothing (an earlier version) and serves the app.
    /// The rule of `InstanceStore.sentElsewhereSQL`, for what reads the registry back.
    public func sends(_ entry: String) -> Bool {
        if let environments { return environments.contains(entry) }
        return apps.contains(String(entry.prefix { $0 != "/" }))
    }
}

/// One row of `pushd.instances` as read back, with how long it has been silent.
public struct InstanceRecord: Sendable, Hashable {
    public var registration: InstanceRegistration
    /// App name → why sending for it is paused (APNs rejected its credentials).
    public var paused: [String: String]
    /// App name → the lanes APNs takes none of its notifications on now, with the error.
    public var apnsUnavailable: [String: String]
    public var heartbeatAt: Timestamp
    /// Seconds since its last heartbeat, by the database's clock.
    public var silentSeconds: Double

    /// Silent for longer than `InstanceStore.goneAfterSeconds`: killed, frozen, or cut off
    /// from the database.
    public var isGone: Bool { silentSeconds > InstanceStore.goneAfterSeconds }

    public init(registration: InstanceRegistration, paused: [String: String], apnsUnavailable: [String: String] = [:],
                heartbeatAt: Timestamp, silentSeconds: Double) {
        self.registration = registration
        self.paused = paused
        self.apnsUnavailable = apnsUnavailable
        self.heartbeatAt = heartbeatAt
        self.silentSeconds = silentSeconds
    }
}

/// The fleet in numbers, for the gauges every instance exports.
public struct FleetSummary: Sendable, Hashable {
    public var alive: Int
    public var gone: Int
    /// Distinct versions among live instances: above 1 during a rolling upgrade.
    public var versions: Int
    /// Distinct app sets among live instances: above 1 means some work is claimed by only
    /// part of the fleet.
    public var appSets: Int
    /// Apps whose configured environment live instances disagree on (`homeEntry`), sorted.
    public var environmentDisagreements: [String]

    public init(alive: Int, gone: Int, versions: Int, appSets: Int, environmentDisagreements: [String] = []) {
        self.alive = alive
        self.gone = gone
        self.versions = versions
        self.appSets = appSets
        self.environmentDisagreements = environmentDisagreements
    }
}

/// The registry of running instances. Every `pushd run` upserts its row every
/// `heartbeatSeconds`; a row silent for `goneAfterSeconds` is shown as gone, and one silent
/// for `removedAfterSeconds` is deleted by the next heartbeat of any instance. An instance
/// that stops cleanly deletes its own row.
public struct InstanceStore: Sendable {
    public static let heartbeatSeconds = 5.0
    public static let goneAfterSeconds = 60.0
    public static let removedAfterSeconds = 900.0

    public init() {}

    static let heartbeatSQL = """
        WITH removed AS (
            DELETE FROM pushd.instances
            WHERE heartbeat_at < now() - make_interval(secs => $9) AND id <> $1
        )
        INSERT INTO pushd.instances (id, host, pid, version, libcurl_version, apps, paused, apns_unavailable, started_at, heartbeat_at,
                                     environments)
        VALUES ($1, $2, $3, $4, $5, $6::text[], jsonb_object($7::text[], $8::text[]), jsonb_object($11::text[], $12::text[]), $10, now(),
                $13::text[])
        ON CONFLICT (id) DO UPDATE SET
            host = EXCLUDED.host, pid = EXCLUDED.pid, version = EXCLUDED.version,
            libcurl_version = EXCLUDED.libcurl_version, apps = EXCLUDED.apps, paused = EXCLUDED.paused,
            apns_unavailable = EXCLUDED.apns_unavailable, environments = EXCLUDED.environments,
            started_at = EXCLUDED.started_at, heartbeat_at = now()
        """

    static let summarySQL = """
        SELECT count(*) FILTER (WHERE heartbeat_at >= now() - make_interval(secs => $1)),
               count(*) FILTER (WHERE heartbeat_at < now() - make_interval(secs => $1)),
               count(DISTINCT version) FILTER (WHERE heartbeat_at >= now() - make_interval(secs => $1)),
               count(DISTINCT apps) FILTER (WHERE heartbeat_at >= now() - make_interval(secs => $1)),
               ARRAY(SELECT split_part(e, '/', 1) FROM pushd.instances l, unnest(l.environments) AS e
                     WHERE l.heartbeat_at >= now() - make_interval(secs => $1) AND starts_with(split_part(e, '/', 2), 'home:')
                     GROUP BY 1 HAVING count(DISTINCT split_part(e, '/', 2)) > 1 ORDER BY 1)
        FROM pushd.instances
        """

    static let listSQL = """
        SELECT id, host, pid, version, libcurl_version, apps,
               ARRAY(SELECT key FROM jsonb_each_text(paused) ORDER BY key),
               ARRAY(SELECT value FROM jsonb_each_text(paused) ORDER BY key),
               started_at, heartbeat_at, extract(epoch FROM now() - heartbeat_at)::float8,
               ARRAY(SELECT key FROM jsonb_each_text(apns_unavailable) ORDER BY key),
               ARRAY(SELECT value FROM jsonb_each_text(apns_unavailable) ORDER BY key),
               environments
        FROM pushd.instances ORDER BY host, pid
        """

    /// Registers or refreshes `instance` with the apps it has paused now and those APNs takes
    /// no notifications of, removes rows silent for longer than `removedAfterSeconds`, and
    /// returns the fleet's numbers.
    @discardableResult
    public func heartbeat(_ connection: PGConnection, _ instance: InstanceRegistration,
                          paused: [String: String], apnsUnavailable: [String: String] = [:]) throws -> FleetSummary {
        let pausedApps = paused.keys.sorted()
        let unavailableApps = apnsUnavailable.keys.sorted()
        try connection.query(connection.prepared(Self.heartbeatSQL), [
            instance.id, instance.host, instance.pid, instance.version, instance.libcurlVersion, instance.apps,
            pausedApps, pausedApps.map { paused[$0] ?? "" }, Self.removedAfterSeconds, instance.startedAt,
            unavailableApps, unavailableApps.map { apnsUnavailable[$0] ?? "" }, instance.environments,
        ])
        return try summary(connection)
    }

    static let sentElsewhereSQL = """
        SELECT DISTINCT wanted.entry
        FROM unnest($2::text[]) AS wanted(entry)
        JOIN pushd.instances i
          ON i.id <> $1 AND i.heartbeat_at >= now() - make_interval(secs => $3)
         AND (wanted.entry = ANY (i.environments)
              OR (i.environments IS NULL AND split_part(wanted.entry, '/', 1) = ANY (i.apps)))
        """

    /// Which of `wanted` ("app/environment" and "app/token" entries,
    /// `InstanceRegistration.environmentEntry`, `tokenEntry`) another live instance than `id`
    /// can send: it advertises the entry, or it advertises no environments (an earlier version)
    /// and serves the app, so it claims that work as before.
    public func sentElsewhere(_ connection: PGConnection, id: String, wanted: [String]) throws -> Set<String> {
        guard !wanted.isEmpty else { return [] }
        let result = try connection.query(connection.prepared(Self.sentElsewhereSQL), [id, wanted, Self.goneAfterSeconds])
        return Set(try result.rows.map { try $0.require(0) as String })
    }

    public func summary(_ connection: PGConnection) throws -> FleetSummary {
        let row = try connection.query(connection.prepared(Self.summarySQL), [Self.goneAfterSeconds])[0]
        return FleetSummary(alive: try row.require(0), gone: try row.require(1),
                            versions: try row.require(2), appSets: try row.require(3), environmentDisagreements: try row.require(4))
    }

    /// Deletes the row of an instance that stops cleanly.
    public func remove(_ connection: PGConnection, id: String) throws {
        try connection.query("DELETE FROM pushd.instances WHERE id = $1", [id])
    }

    /// Every registered instance, live and gone, by host and pid.
    public func instances(_ connection: PGConnection) throws -> [InstanceRecord] {
        try connection.query(Self.listSQL).rows.map { row in
            var registration = InstanceRegistration(host: try row.require(1), pid: try row.require(2), version: try row.require(3),
                                                    libcurlVersion: try row.require(4), apps: try row.require(5),
                                                    environments: try row.get(13), startedAt: try row.require(8))
            registration.id = try row.require(0)
            let keys: [String] = try row.require(6)
            let reasons: [String] = try row.require(7)
            let unavailableApps: [String] = try row.require(11)
            let unavailableErrors: [String] = try row.require(12)
            return InstanceRecord(registration: registration,
                                  paused: Dictionary(zip(keys, reasons), uniquingKeysWith: { first, _ in first }),
                                  apnsUnavailable: Dictionary(zip(unavailableApps, unavailableErrors), uniquingKeysWith: { first, _ in first }),
                                  heartbeatAt: try row.require(9), silentSeconds: try row.require(10))
        }
    }
}
