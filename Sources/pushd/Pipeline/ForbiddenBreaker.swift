/// Tells a request APNs does not allow from credentials APNs refuses, for 403 Forbidden.
///
/// Apple documents Forbidden as "The specified action is not allowed" and advises against
/// sending such a request again unchanged: one Forbidden answer blames its notification, which
/// is failed, not retried. Refused credentials make every answer of the app's environment a
/// 403, though, and failing on each would empty the queue at sending speed. So answers are
/// counted per environment of one app; an accepted notification in that environment (any
/// lane) ends the run, and the `threshold`-th answer of a run trips the breaker: the caller
/// takes it as the credentials of that environment refused (holds that environment of the app,
/// keeps the notification; the other environment's run is its own). A tripped run stays
/// tripped until a notification is accepted: every Forbidden answer after it holds again, as
/// an answer refusing the credentials does, so the work kept for the hold is not failed one
/// notification at a time when the hold runs out, or is ended by a SIGHUP that changed
/// nothing. A reload that replaced the app's key or certificate starts every run afresh
/// (`reset`).
///
/// A plain value: the caller keeps it under a lock.
struct ForbiddenBreaker: Sendable {
    enum Decision: Equatable, Sendable {
        /// The `count`-th answer in a row: it blames its notification.
        case counted(Int)
        /// The `count`-th answer in a row, at or past the threshold: the credentials are refused.
        case tripped(count: Int)
    }

    /// Answers in a row that trip the breaker.
    let threshold: Int
    private var runs = [PushdConfig.Environment: Int]()

    init(threshold: Int) {
        self.threshold = max(1, threshold)
    }

    /// Whether any run is being counted: an accepted notification has nothing to end otherwise.
    var counting: Bool { !runs.isEmpty }
    /// The answers in a row in `environment` so far.
    func count(_ environment: PushdConfig.Environment) -> Int { runs[environment] ?? 0 }

    /// A notification in `environment` was accepted: the credentials work there.
    mutating func accepted(_ environment: PushdConfig.Environment) {
        runs[environment] = nil
    }

    /// The credentials changed (a reload replaced them): every run is forgotten, so the first
    /// Forbidden answer after it counts from one instead of holding again at once.
    mutating func reset() {
        runs.removeAll()
    }

    /// APNs answered 403 Forbidden to a notification in `environment`.
    mutating func forbidden(_ environment: PushdConfig.Environment) -> Decision {
        let count = (runs[environment] ?? 0) + 1
        runs[environment] = count
        return count >= threshold ? .tripped(count: count) : .counted(count)
    }
}
