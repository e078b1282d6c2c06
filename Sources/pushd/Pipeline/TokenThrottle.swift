import Posix
import Locking

/// Device tokens APNs is throttling (429 TooManyRequests is about one token: too many
/// notifications to the same device), and until when. A throttled token's other
/// notifications wait too instead of drawing more 429s; every other token keeps flowing.
/// Shared by every worker of the process.
final class TokenThrottle: Sendable {
    private let until = Lock<[String: Timestamp]>([:])
    /// Expired entries are swept once the table grows past this.
    private let sweepAbove: Int

    init(sweepAbove: Int = 10_000) {
        self.sweepAbove = sweepAbove
    }

    /// APNs throttled `token`: hold its sends until `time` (the throttled notification's retry).
    func throttle(_ token: String, until time: Timestamp, now: Timestamp = Timestamp()) {
        until.withLock { table in
            if table.count >= sweepAbove { table = table.filter { $0.value > now } }
            table[token] = max(table[token] ?? time, time)
        }
    }

    /// When `token` may be sent to again, or nil when it may be now.
    /// `token` is made only when some token is throttled (a campaign keeps its tokens raw).
    func heldUntil(_ token: @autoclosure () -> String, now: Timestamp = Timestamp()) -> Timestamp? {
        until.withLock { table in
            // Almost always nothing is throttled: no need to make or hash the token for that.
            guard !table.isEmpty else { return nil }
            let token = token()
            guard let time = table[token] else { return nil }
            if time <= now {
                table[token] = nil
                return nil
            }
            return time
        }
    }
}
