import Posix

/// One row of `pushd.jobs` as handed to a sender.
public struct Job: Sendable, Hashable {
    public var id: Int64
    public var app: String
    /// Lower-case hexadecimal.
    public var deviceToken: String
    /// The JSON object exactly as the application stored it.
    public var payload: String
    /// One of APNs' push types (`alert`, `background`, …).
    public var pushType: String
    /// 10, 5 or 1.
    public var priority: Int
    public var expiration: Timestamp?
    public var collapseID: String?
    public var apnsID: APNsID?
    public var dedupeKey: String?
    public var userID: String?
    /// `production` or `sandbox`; nil means the app's configured environment.
    public var environment: String?
    public var runAt: Timestamp
    /// Failed attempts so far.
    public var attempts: Int
    public var lastError: String?
    public var createdAt: Timestamp
    /// When pushd first sent it; nil until then. Retry windows and the outage budget count
    /// from here, not from `createdAt`: a job scheduled for later has not started waiting.
    public var firstAttemptAt: Timestamp?
    /// The environment its token was registered with in `pushd.device_tokens`, read with the
    /// claim for a job that names no environment of its own; nil otherwise. Not a column.
    public var registeredEnvironment: String?

    public init(id: Int64, app: String, deviceToken: String, payload: String, pushType: String = "alert",
                priority: Int = 10, expiration: Timestamp? = nil, collapseID: String? = nil, apnsID: APNsID? = nil,
                dedupeKey: String? = nil, userID: String? = nil, environment: String? = nil,
                runAt: Timestamp, attempts: Int = 0, lastError: String? = nil, createdAt: Timestamp, firstAttemptAt: Timestamp? = nil) {
        self.id = id
        self.app = app
        self.deviceToken = deviceToken
        self.payload = payload
        self.pushType = pushType
        self.priority = priority
        self.expiration = expiration
        self.collapseID = collapseID
        self.apnsID = apnsID
        self.dedupeKey = dedupeKey
        self.userID = userID
        self.environment = environment
        self.runAt = runAt
        self.attempts = attempts
        self.lastError = lastError
        self.createdAt = createdAt
        self.firstAttemptAt = firstAttemptAt
    }
}

/// A job to try again later.
public struct JobRetry: Sendable, Hashable {
    public var id: Int64
    public var runAt: Timestamp
    public var error: String
    /// False for a job put back without being tried (its app is paused): it keeps its
    /// attempt budget for when the app works again.
    public var countsAsAttempt: Bool
    /// When the job was first sent, recorded if it has none yet; nil when it was put back
    /// without being sent.
    public var sentAt: Timestamp?

    public init(id: Int64, runAt: Timestamp, error: String, countsAsAttempt: Bool = true, sentAt: Timestamp? = nil) {
        self.id = id
        self.runAt = runAt
        self.error = error
        self.countsAsAttempt = countsAsAttempt
        self.sentAt = sentAt
    }
}

/// A job that can never succeed, kept in `pushd.dead_jobs`.
public struct JobFailure: Sendable, Hashable {
    public var id: Int64
    /// The HTTP status APNs answered, nil when pushd itself refused the job.
    public var status: Int?
    public var reason: String

    public init(id: Int64, status: Int?, reason: String) {
        self.id = id
        self.status = status
        self.reason = reason
    }
}

/// A retried job that could not be queued again because a CHECK constraint of `pushd.jobs`
/// refused the row, typically one a migration added NOT VALID after the job was queued: it
/// went to `pushd.dead_jobs` with `reason`.
public struct RefusedRetry: Sendable, Hashable {
    public var job: Job
    /// The constraint's name, when the server gave one.
    public var check: String?
    /// What the check said, for example "pushd.jobs.priority must be 5 for a background push …".
    public var message: String

    public init(job: Job, check: String?, message: String) {
        self.job = job
        self.check = check
        self.message = message
    }

    /// The dead letter's reason: the check, what it said, and the retry the job was due for.
    public var reason: String {
        "could not be queued again for its retry (\(job.lastError ?? "no error")): "
            + "\(check.map { "CHECK \($0), added after the job was queued, " } ?? "")refuses it: \(message)"
    }
}

/// What happened to every job of a claimed batch. Each claimed job must appear in
/// exactly one of the three lists.
public struct JobOutcomes: Sendable, Hashable {
    public var delivered: [Int64]
    public var retries: [JobRetry]
    public var failures: [JobFailure]

    public init(delivered: [Int64] = [], retries: [JobRetry] = [], failures: [JobFailure] = []) {
        self.delivered = delivered
        self.retries = retries
        self.failures = failures
    }
}

extension JobOutcomes {
    /// The outcomes of the jobs `ids` names only.
    public func restricted(to ids: Set<Int64>) -> JobOutcomes {
        JobOutcomes(delivered: delivered.filter { ids.contains($0) },
                    retries: retries.filter { ids.contains($0.id) },
                    failures: failures.filter { ids.contains($0.id) })
    }
}

/// A batch taken from the transactional lane. Its jobs are deleted in a transaction
/// that stays open on the claiming connection until `JobQueue.finish` or
/// `JobQueue.abandon`; if the connection dies first, the jobs are back in the queue.
public struct ClaimedJobs: Sendable, Hashable {
    public var jobs: [Job]
    /// Rows the claim took and could not read, already moved to `pushd.dead_jobs`.
    public var unreadable: [UnreadableJob]
    /// The id of the transaction that holds the jobs (`TransactionFate.currentIDSQL`), nil
    /// when none does: asked about on a new session when its session ends while it commits.
    public var transaction: Int64?
    public var isEmpty: Bool { jobs.isEmpty }

    public init(jobs: [Job], unreadable: [UnreadableJob] = [], transaction: Int64? = nil) {
        self.jobs = jobs
        self.unreadable = unreadable
        self.transaction = transaction
    }
}

/// A claimed row pushd could not read (`JobQueue.claim`), and why; it is in `pushd.dead_jobs`.
public struct UnreadableJob: Sendable, Hashable {
    public var id: Int64
    public var app: String
    public var reason: String
}

/// A misuse of the queue API that pushd can report precisely.
public struct QueueError: Error, CustomStringConvertible, Sendable, Hashable {
    public var message: String
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
