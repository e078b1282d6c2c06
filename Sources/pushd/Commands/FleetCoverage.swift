import QueueStore

/// What each live instance advertises in `pushd.instances.environments` for each of its apps,
/// and what that leaves to the rest of the fleet: a pure function of the registry, so
/// `pushd status` reads from any machine what each instance's
/// `pushd_work_left_to_other_instances{app,reason}` says (by the same rule as the instance's
/// heartbeat, `InstanceRegistration.sends`).
struct FleetCoverage: Sendable {
    /// One app of one live instance.
    struct Row: Sendable, Hashable {
        var instance: String
        var app: String
        /// The environments it has credentials for; nil when it does not say (an earlier
        /// version, which claims every environment and all token work of its apps).
        var environments: [String]?
        /// It has a token (JWT) signing key for the app; nil when it does not say.
        var token: Bool?
        /// Work it cannot send that another live instance takes ("sandbox", "token"), as
        /// `pushd_work_left_to_other_instances` at 1 on it.
        var leftToOthers: [Left]
    }

    /// One gap of an instance that another live instance fills.
    struct Left: Sendable, Hashable {
        /// "production", "sandbox" or "token".
        var what: String
        /// The `reason` label of `pushd_work_left_to_other_instances`.
        var reason: String
    }

    var rows: [Row]
    /// Apps some live instance serves whose token-only work (Live Activity and location pushes)
    /// no live instance has a token key for: it is dead-lettered.
    var appsWithoutTokenKey: [String]

    /// The environments an instance advertises, in the configuration's order.
    static let environments = PushdConfig.Environment.allCases.map(\.rawValue)

    init(live: [InstanceRegistration]) {
        var rows = [Row]()
        for instance in live {
            let others = live.filter { $0.id != instance.id }
            for app in instance.apps {
                let tokenEntry = InstanceRegistration.tokenEntry(app: app)
                guard instance.environments != nil else {
                    rows.append(Row(instance: instance.id, app: app, environments: nil, token: nil, leftToOthers: []))
                    continue
                }
                let environments = Self.environments.filter {
                    instance.sends(InstanceRegistration.environmentEntry(app: app, environment: $0))
                }
                var left = [Left]()
                for environment in Self.environments where !environments.contains(environment) {
                    let entry = InstanceRegistration.environmentEntry(app: app, environment: environment)
                    if others.contains(where: { $0.sends(entry) }) {
                        left.append(Left(what: environment, reason: EnvironmentCoverage.environmentReason))
                    }
                }
                let token = instance.sends(tokenEntry)
                if !token && others.contains(where: { $0.sends(tokenEntry) }) {
                    left.append(Left(what: InstanceRegistration.tokenEntryName, reason: EnvironmentCoverage.tokenReason))
                }
                rows.append(Row(instance: instance.id, app: app, environments: environments, token: token, leftToOthers: left))
            }
        }
        self.rows = rows.sorted { ($0.instance, $0.app) < ($1.instance, $1.app) }
        let served = Set(live.flatMap(\.apps))
        appsWithoutTokenKey = served.filter { app in
            !live.contains { $0.sends(InstanceRegistration.tokenEntry(app: app)) }
        }.sorted()
    }

    /// The note `pushd status` prints for an app no live instance has a token key for.
    static func noTokenKeyNote(app: String) -> String {
        "no live instance has a token key for app \(app): its Live Activity and location pushes, which APNs takes only with "
            + "token authentication, are dead-lettered (TokenAuthenticationRequired; its broadcasts and channel requests go "
            + "with its certificate; "
            + "the instances log no_token_key_in_fleet when they do); give app \(app) a token key (team_id, key_id, key_file) "
            + "in the configuration of an instance"
    }
}
