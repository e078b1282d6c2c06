/// One APNs environment's share of the waiting work, for the statements that make work due
/// during and after an outage of that environment: Apple's production and sandbox hosts are
/// separate services that fail apart, so a sandbox outage touches only the work going to
/// sandbox. A row goes where the sender sends it: its own environment, else its token's
/// registered one (jobs), its channel's (broadcasts) or its campaign's (parked targets),
/// else its app's configured one, `home`.
public struct OutageEnvironment: Sendable, Equatable {
    /// `production` or `sandbox`.
    public var name: String
    /// App → its configured environment.
    public var home: [String: String]

    public init(name: String, home: [String: String]) {
        self.name = name
        self.home = home
    }

    /// The home environments of `apps`, in their order ("" for an app not in `home`); one
    /// empty string per app when there is no filter, so the statement's arrays line up.
    static func homes(_ environment: OutageEnvironment?, apps: [String]) -> [String] {
        apps.map { environment?.home[$0] ?? "" }
    }

    /// The condition a statement puts on a row whose environment resolves to `resolved`: true
    /// for every row when `$parameter` (the filter's name) is NULL.
    static func matches(_ resolved: String, parameter: Int) -> String {
        "($\(parameter)::text IS NULL OR \(resolved) = $\(parameter)::text)"
    }
}
