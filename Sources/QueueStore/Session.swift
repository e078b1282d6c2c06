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

    /// Connects with `defaultSettings`, overridden key by key by `settings`.
    public static func connect(url: String, applicationName: String = "pushd",
                               settings: [String: String] = [:]) throws -> PGConnection {
        try PGConnection(url: url, applicationName: applicationName,
                         settings: defaultSettings.merging(settings) { _, override in override })
    }
}
