import APNs
import QueueStore

/// Tells a token that is not for a topic from a topic that is wrong for the app's tokens.
///
/// One DeviceTokenNotForTopic answer blames its token. A run of them on one topic, with
/// nothing accepted on that topic in between, blames the topic: a wrong `bundle_id` makes
/// every answer DeviceTokenNotForTopic, and pruning on each would invalidate the app's whole
/// registry at sending speed. So answers are counted per (environment, topic) of one app; an
/// accepted notification on the topic ends the run (its prunes stand), and the
/// `threshold`-th answer of a run trips the breaker: the caller holds the topic and the
/// run's prunes are taken back — the ones already written are returned to be restored, the
/// ones not yet written are withdrawn (`toWrite` leaves them out until a transaction that left
/// them out is committed, `written` returns those it finds written after all). A tripped run
/// of a topic whose answers prune (the app's main topic) stays tripped until a notification to
/// the topic is accepted: every answer after it holds again at once, so the work kept for the hold is not failed (and its tokens pruned) a run at
/// a time each time the hold ends (after 5 minutes, or on a SIGHUP, which cannot change
/// `bundle_id`). While it is, an answer on another topic of the app in that environment
/// (`.voip`, `.complication` …) holds that topic at once: a wrong `bundle_id` is wrong for
/// them too, and their work would otherwise be failed a run at a time. Not once a
/// notification to another topic of that environment was accepted since the trip: the
/// bundle id is right, and such an answer blames its notification again (a VoIP push sent to
/// an alert token), so that it does not hold the topic for good.
///
/// BadDeviceToken answers are counted the same way per environment of the app and source of
/// the work (a campaign, or the transactional lane; any topic; `badDeviceToken`): APNs gives
/// that answer to a token of the other environment (a development build's token sent to
/// production, an App Store or TestFlight build's to sandbox), and a campaign imported for the
/// wrong environment would otherwise prune every token it reaches. Per source, so that the
/// app's good notifications in the environment (another campaign, the transactional lane) do
/// not end a campaign's run at every answer. An accepted notification of the source in the
/// environment ends its run (its prunes stand), and so does a 410 answer (the environment
/// knows that token); the `badDeviceTokenThreshold`-th answer trips it: the run's prunes are
/// taken back as above, and every BadDeviceToken answer of the source in the environment
/// after it fails its notification without pruning its token until the run ends, or until
/// `badDeviceTokenRunSeconds` passed without such an answer (a campaign that finished). Nothing
/// is held: the answer blames each notification's token and environment, not the app's
/// configuration, and holding the environment would stop the app's good notifications behind
/// a block of a campaign's development tokens.
///
/// A token is known by its lowercase hex. A plain value: the caller keeps it under a lock.
struct NotForTopicBreaker: Sendable {
    struct Key: Hashable, Sendable {
        var environment: PushdConfig.Environment
        var topic: String
        /// Where a BadDeviceToken run's work comes from; nil for a DeviceTokenNotForTopic run.
        var source: Source?
    }

    /// Where work comes from: its BadDeviceToken answers are counted apart from other work's.
    /// A plain value, made per answer without allocating.
    enum Source: Hashable, Sendable, CustomStringConvertible {
        case transactional
        case campaign(Int64)

        /// "campaign 42", "the transactional lane".
        var description: String {
            switch self {
            case .transactional: return "the transactional lane"
            case .campaign(let id): return "campaign \(id)"
            }
        }
    }

    enum Decision: Equatable, Sendable {
        /// The `count`-th answer in a row: it blames its token.
        case counted(Int)
        /// The `count`-th answer in a row reached the threshold: hold the topic (DeviceTokenNotForTopic)
        /// or keep the tokens (BadDeviceToken), and restore `restore`, the prunes of the run
        /// that were already written.
        case tripped(count: Int, restore: [TokenPrune])
        /// An answer on a topic that prunes nothing while the app's main topic in the same
        /// environment is tripped after `count` answers in a row: a wrong `bundle_id` answers
        /// every topic of the app so, and this topic is held with it rather than failing its
        /// notification.
        case heldWithMainTopic(count: Int)
    }

    /// Answers in a row that trip the breaker.
    let threshold: Int
    /// BadDeviceToken answers in a row in an environment that trip its run.
    let badDeviceTokenThreshold: Int
    /// The reasons whose prunes a tripped run takes back.
    static let runReasons: Set<String> = [APNsReason.deviceTokenNotForTopic.rawValue, APNsReason.badDeviceToken.rawValue]
    /// The topic of an environment's BadDeviceToken run: it counts every topic (no topic is empty).
    static let everyTopic = ""
    /// A BadDeviceToken run that counted no answer for this long is forgotten (a campaign that
    /// finished): a counting one's prunes stand, a tripped one's source is judged afresh.
    static let badDeviceTokenRunSeconds = 600.0

    private struct Run {
        var count = 0
        /// Tokens this run's answers asked to prune (at most `threshold - 1`).
        var decided = Set<String>()
        /// Those of them written to the registry, as the prune outcome named them.
        var written = [TokenPrune]()
        /// The run reached the threshold: its answers blame the topic (or the environment), none its token.
        var tripped = false
        /// When the run last counted an answer (monotonic seconds): a BadDeviceToken run is
        /// forgotten `badDeviceTokenRunSeconds` after it.
        var lastAnswer = 0.0
        /// Since this tripped run, a notification to another topic of the app in its
        /// environment was accepted: the bundle id is right there, and that topic's answers
        /// are not held with this one.
        var otherTopicAccepted = false
    }

    private var runs = [Key: Run]()
    /// Tokens whose run tripped before their prune was written: it is not written.
    /// Each as its reason and lowercase hex (`mark`): a token withdrawn for one reason is not
    /// for the other.
    private var withdrawn = Set<String>()
    /// A withdrawn token leaves the set when its prune comes to be written; a prune never
    /// written (its batch lost with the database) would stay: this bounds them.
    static let withdrawnLimit = 100_000

    init(threshold: Int, badDeviceTokenThreshold: Int = 25) {
        self.threshold = max(1, threshold)
        self.badDeviceTokenThreshold = max(1, badDeviceTokenThreshold)
    }

    /// Whether any run is being counted: an accepted notification has nothing to end otherwise.
    var counting: Bool { !runs.isEmpty }
    /// Whether a tripped run left prunes to leave out.
    var withdrawing: Bool { !withdrawn.isEmpty }
    /// The answers in a row on `key` so far.
    func count(_ key: Key) -> Int { runs[key]?.count ?? 0 }

    /// A notification to `key` was accepted: the topic is right, and the run's prunes stand.
    /// The BadDeviceToken run of `source` in its environment ends too: the environment takes its
    /// tokens. BadDeviceToken runs that counted nothing for `badDeviceTokenRunSeconds` before
    /// `now` are forgotten.
    mutating func accepted(_ key: Key, source: Source, now: Double) {
        runs[key] = nil
        tokenKnown(key.environment, source: source, now: now)
        for (other, run) in runs where run.tripped && !run.otherTopicAccepted && other.environment == key.environment {
            runs[other]?.otherTopicAccepted = true
        }
    }

    /// APNs answered DeviceTokenNotForTopic for `token` on `key`. `prunes` says whether the
    /// caller will prune the token for it (it does only on the app's main topic).
    mutating func notForTopic(_ key: Key, token: String, prunes: Bool) -> Decision {
        // Only a topic whose answers prune (the app's main topic) stays tripped.
        if !prunes, let main = runs.first(where: { $0.key.environment == key.environment && $0.key.topic != Self.everyTopic
                                                      && $0.value.tripped && !$0.value.otherTopicAccepted }) {
            return .heldWithMainTopic(count: main.value.count)
        }
        return answered(key, token: token, prunes: prunes, threshold: threshold)
    }

    /// APNs answered 410 (Unregistered, ExpiredToken) to a notification of `source` in
    /// `environment`, or accepted one: the environment knows its token, and the source's
    /// BadDeviceToken run there ends. Stale BadDeviceToken runs are forgotten.
    mutating func tokenKnown(_ environment: PushdConfig.Environment, source: Source, now: Double) {
        runs[Key(environment: environment, topic: Self.everyTopic, source: source)] = nil
        for (key, run) in runs where key.topic == Self.everyTopic && now - run.lastAnswer > Self.badDeviceTokenRunSeconds {
            runs[key] = nil
        }
    }

    /// APNs answered BadDeviceToken for `token` of `source` in `environment` at `now`. The token
    /// is pruned for it while the decision is `.counted`; once `.tripped`, the notification
    /// fails with its token kept, until the run ends.
    mutating func badDeviceToken(_ environment: PushdConfig.Environment, source: Source, token: String, now: Double) -> Decision {
        let key = Key(environment: environment, topic: Self.everyTopic, source: source)
        if let run = runs[key], now - run.lastAnswer > Self.badDeviceTokenRunSeconds { runs[key] = nil }
        return answered(key, token: token, prunes: true, threshold: badDeviceTokenThreshold, now: now)
    }

    private mutating func answered(_ key: Key, token: String, prunes: Bool, threshold: Int, now: Double = 0) -> Decision {
        var run = runs[key] ?? Run()
        run.count += 1
        run.lastAnswer = now
        if run.tripped {
            runs[key] = run
            return .tripped(count: run.count, restore: [])
        }
        if run.count >= threshold {
            // Kept tripped on a topic whose answers prune (the app's main topic: a wrong
            // bundle_id would fail the work and prune the tokens a run at a time; and an
            // environment's BadDeviceToken run, which would prune a run at a time). On another
            // topic each answer fails only its notification, keeps its token, and may be a
            // push type sent to tokens of another (a VoIP push to an alert token): there a
            // new run starts, so that such work at the head of the queue drains, 24 failed per
            // hold, rather than holding the topic for good (unless the main topic is tripped).
            runs[key] = prunes ? Run(count: run.count, tripped: true, lastAnswer: now) : nil
            let written = Set(run.written.map { $0.token.lowercased() })
            if withdrawn.count + run.decided.count > Self.withdrawnLimit { withdrawn.removeAll() }
            let reason = Self.reason(of: key)
            withdrawn.formUnion(run.decided.subtracting(written).map { Self.mark(reason, $0) })
            return .tripped(count: run.count, restore: run.written)
        }
        if prunes { run.decided.insert(token.lowercased()) }
        runs[key] = run
        return .counted(run.count)
    }

    /// The prunes of `prunes` to write, and those withheld: a DeviceTokenNotForTopic or
    /// BadDeviceToken prune whose run tripped is left out. Nothing changes here: the transaction
    /// that writes them may be rolled back (its session ended) and the batch written again on a
    /// new one, which must leave them out too. `withheldCommitted` forgets them once that transaction went through.
    func toWrite(_ prunes: [TokenPrune]) -> (write: [TokenPrune], withheld: [TokenPrune]) {
        guard !withdrawn.isEmpty else { return (prunes, []) }
        var write = [TokenPrune]()
        var withheld = [TokenPrune]()
        for prune in prunes {
            if Self.runReasons.contains(prune.reason) && withdrawn.contains(Self.mark(prune.reason, prune.token.lowercased())) {
                withheld.append(prune)
            } else {
                write.append(prune)
            }
        }
        return (write, withheld)
    }

    /// The transaction that left `withheld` out (`toWrite`) was committed: their tokens are no
    /// longer withdrawn, and a later prune of one of them is written.
    mutating func withheldCommitted(_ withheld: [TokenPrune]) {
        for prune in withheld { withdrawn.remove(Self.mark(prune.reason, prune.token.lowercased())) }
    }

    /// Learns which DeviceTokenNotForTopic and BadDeviceToken prunes were written
    /// (`invalidated`: the prune outcome's). Those of a run of their reason still counting join
    /// it; those whose run tripped meanwhile are returned, to be restored now. Those of a run
    /// an accepted notification ended stand.
    mutating func written(_ invalidated: [TokenPrune]) -> [TokenPrune] {
        var restore = [TokenPrune]()
        for prune in invalidated where Self.runReasons.contains(prune.reason) {
            let token = prune.token.lowercased()
            if let key = runs.first(where: { Self.reason(of: $0.key) == prune.reason && $0.value.decided.contains(token)
                                                 && (prune.reason != APNsReason.badDeviceToken.rawValue || prune.environment == $0.key.environment.rawValue) })?.key {
                runs[key]!.written.append(prune)
            } else if withdrawn.remove(Self.mark(prune.reason, token)) != nil {
                restore.append(prune)
            }
        }
        return restore
    }

    /// The reason whose answers the run of `key` counts.
    private static func reason(of key: Key) -> String {
        key.topic == everyTopic ? APNsReason.badDeviceToken.rawValue : APNsReason.deviceTokenNotForTopic.rawValue
    }

    /// How a withdrawn prune is known: its reason and its token's lowercase hex.
    private static func mark(_ reason: String, _ token: String) -> String {
        reason + " " + token
    }
}
