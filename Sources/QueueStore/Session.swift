import Glibc
import Synchronization

/// How pushd's own database sessions are opened.
///
/// A claimed batch of transactional jobs is an open transaction (see `JobQueue`), so
/// `idle_in_transaction_session_timeout` is what returns the jobs of a hung worker
/// to the queue; `statement_timeout` bounds any single statement.
public enum QueueSession {
    public static let defaultSettings: [String: String] = [
        "statement_timeout": "30s",
        "idle_in_transaction_session_timeout": "60s",
        "lock_timeout": "10s",
    ]

    /// `idle_in_transaction_session_timeout`, in seconds, for a session whose transactions
    /// wait on APNs' answers (a claimed batch of jobs, a parked batch of campaign targets) for
    /// up to `answerWaitSeconds`: twice that, and at least 120.
    public static func idleInTransactionSeconds(waitingOnAnswersFor answerWaitSeconds: Double) -> Int {
        max(120, Int(answerWaitSeconds) * 2)
    }

    /// `database.dead_peer_s`: how long a session may wait on a server that is gone before
    /// libpq gives up (see `connectionDefaults`). Set once from the configuration at start-up.
    public static let deadPeerSeconds = Atomic<Int>(30)

    /// Bounds on connecting and on a peer that vanished, so that no call waits forever on a
    /// network that drops packets: `connect_timeout`, TCP keepalives that find an idle dead
    /// peer within `seconds` (idle `seconds`/2, then 3 probes `seconds`/6 apart), and
    /// `tcp_user_timeout`, which ends a connection whose sent bytes stay unacknowledged for
    /// `seconds`. A keyword the database URL sets itself wins, and so does libpq's own
    /// `PGCONNECT_TIMEOUT` in the process's environment: a keyword given here would override the
    /// variable, which operators set for every libpq client of a host.
    public static func connectionDefaults(deadPeerSeconds seconds: Int) -> [String: String] {
        let seconds = max(2, seconds)
        var defaults = [
            "connect_timeout": "\(seconds)",
            "keepalives": "1",
            "keepalives_idle": "\(max(1, seconds / 2))",
            "keepalives_interval": "\(max(1, seconds / 6))",
            "keepalives_count": "3",
            "tcp_user_timeout": "\(seconds * 1000)",
        ]
        if let variable = getenv("PGCONNECT_TIMEOUT"), variable.pointee != 0 { defaults["connect_timeout"] = nil }
        return defaults
    }

    /// Connects with `defaultSettings`, overridden key by key by `settings`, and with
    /// `connectionDefaults` for `deadPeerSeconds` unless the URL sets them.
    public static func connect(url: String, applicationName: String = "pushd",
                               settings: [String: String] = [:]) throws -> PGConnection {
        try PGConnection(url: url, applicationName: applicationName,
                         settings: defaultSettings.merging(settings) { _, override in override },
                         defaults: connectionDefaults(deadPeerSeconds: deadPeerSeconds.load(ordering: .relaxed)))
    }
}
