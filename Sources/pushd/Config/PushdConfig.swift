import APNs
import QueueStore

/// Everything pushd reads from its configuration file, after environment overrides.
struct PushdConfig: Sendable, Equatable {
    enum Environment: String, Sendable, CaseIterable {
        case production, sandbox

        /// The APNs host family of this environment.
        var apns: APNsEnvironment { self == .production ? .production : .sandbox }

        /// One byte, not the raw value's text: an enum with raw values hashes its text unless
        /// told otherwise, and the answer path looks up a metric or a template by environment
        /// for every notification.
        func hash(into hasher: inout Hasher) { hasher.combine(self == .production) }
    }
    enum LogLevel: String, Sendable, CaseIterable, Comparable {
        case debug, info, notice, warning, error
        static func < (a: LogLevel, b: LogLevel) -> Bool {
            allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
        }
    }

    enum Credentials: Sendable, Equatable {
        /// Token-based auth: a `.p8` signing key, its key id and the team id.
        case token(teamID: String, keyID: String, keyFile: String)
        /// Certificate-based auth: PEM certificate and key, or a PKCS#12 bundle.
        case certificate(certificateFile: String?, keyFile: String?, pkcs12File: String?, password: String?)
    }

    struct App: Sendable, Equatable {
        var name: String
        var bundleID: String
        var environment: Environment
        var credentials: Credentials
        /// Sends per second for this app's campaigns when the campaign sets none; nil is unlimited.
        var campaignRate: Int?
        /// A certificate app's certificate for the environment other than `environment`
        /// (APNs issues a certificate for one environment); token apps need none.
        var otherCertificates: [Environment: Credentials] = [:]
        /// A token app's signing key for the environment other than `environment`
        /// (`<env>_token`), for a key restricted to one environment, as Apple recommends; without
        /// one, `credentials` signs for both.
        var environmentKeys: [Environment: Credentials] = [:]

        /// The credentials that reach `target`'s host, nil when the app has none there:
        /// a signing key serves both environments unless the other has its own, a certificate
        /// only its own.
        func credentials(for target: Environment) -> Credentials? {
            if target == environment { return credentials }
            if case .token = credentials { return environmentKeys[target] ?? credentials }
            return otherCertificates[target]
        }

        /// Every signing key of a token app, the app's own first: none for a certificate app.
        var signingKeys: [(teamID: String, keyID: String, keyFile: String)] {
            ([credentials] + Environment.allCases.compactMap { environmentKeys[$0] }).compactMap { credentials in
                guard case .token(let teamID, let keyID, let keyFile) = credentials else { return nil }
                return (teamID, keyID, keyFile)
            }
        }

        /// Whether `credentials(for: target)` is not nil, without copying the credentials out:
        /// a campaign asks it for every target.
        func hasCredentials(for target: Environment) -> Bool {
            if target == environment { return true }
            if case .token = credentials { return true }
            return otherCertificates[target] != nil
        }
    }

    struct APNs: Sendable, Equatable {
        /// `host[:port]` replacing Apple's hosts, for apns-mock.
        var hostOverride: String?
        /// `host[:port]` replacing the sandbox host only (a second apns-mock for development builds).
        var sandboxHostOverride: String?
        /// `host[:port]` replacing Apple's channel management hosts (2195/2196), for apns-mock.
        var channelHostOverride: String?
        /// Extra CA to trust (PEM), for apns-mock's throwaway CA. TLS verification stays on.
        var caFile: String?
        var proxy: String?
        /// Use port 2197 instead of 443.
        var alternatePort: Bool = false
        var threads: Int = 2
        var connectionsPerApp: Int = 1
        /// Connections per app and lane at most, across the threads: while notifications wait
        /// for a free stream, a thread opens another connection up to its share; idle ones close
        /// after 10 minutes. Throughput per connection is streams ÷ round trip.
        var maxConnectionsPerApp: Int = 8
        /// A connection opened beyond `connectionsPerApp` is kept only when the answer rate over
        /// this long after it rose (on a busy host the CPU, not the streams, may set the pace);
        /// 0 keeps every one opened.
        var connectionGrowthJudgedOverMilliseconds: Int = 1000
        /// Streams used per connection at most; the server's SETTINGS may allow fewer.
        var streamsPerConnection: Int = 500
        /// Notifications sent and not answered per app, environment and lane, queued ones
        /// included; unset, `derivedMaxInFlight`. At a round trip of R seconds a lane sends at
        /// most maxInFlight ÷ R per second.
        var maxInFlight: Int = 5000
        /// Every stream the lane may open and one connection's streams per thread waiting for
        /// them, (`maxConnectionsPerApp` + `threads`) × `streamsPerConnection` (5,000 with the
        /// defaults): the window when `max_in_flight` is not set. The window counts what waits in
        /// the engine and what the campaign workers have not yet taken back; sized to the streams
        /// alone, a loop's last connection could never carry all of them, and its growth trial
        /// measured that shortfall (docs/dispatcher-measurements.md, "The last connection").
        var derivedMaxInFlight: Int { min(1_000_000, (maxConnectionsPerApp + threads) * streamsPerConnection) }
        var connectTimeoutMilliseconds: Int = 10_000
        var requestTimeoutMilliseconds: Int = 30_000
        /// The engine answers every request within this long of its submission: two whole
        /// request timeouts (an attempt and one retry) and 10 s for the engine's queue.
        var answerDeadlineMilliseconds: Int { 2 * requestTimeoutMilliseconds + 10_000 }
        /// How long a worker waits for the answers of what it submitted: the engine's deadline
        /// and 5 s, so a worker never gives up on a request the engine still holds.
        var answerWaitSeconds: Double { Double(answerDeadlineMilliseconds) / 1000 + 5 }
        /// TCP keep-alive probes start on a connection idle this long; an idle connection whose probes go unanswered for `pingTimeoutMilliseconds` is closed, not reused (libcurl offers no HTTP/2 PING on idle connections).
        var pingIntervalMilliseconds: Int = 60_000
        var pingTimeoutMilliseconds: Int = 20_000
        /// A connection of the campaign lane or of broadcasts unused this long is closed when the
        /// next send looks for a connection, and that send opens a new one (TCP and TLS handshakes).
        var idleCloseSeconds: Int = 600
        /// The same for the transactional lane; 0 keeps its connections open however long they
        /// idle, so a push after a quiet spell pays no handshake (Apple asks providers to keep
        /// connections open). TCP keep-alive still ends a dead one, and the next push replaces it.
        var transactionalIdleCloseSeconds: Int = 0
        /// Age at which a provider token is replaced (1,200–3,300 s, `ProviderTokenPolicy`).
        var providerTokenRefreshSeconds: Int = 3000
        /// APNs's 20 minutes between token changes on a connection; lowered only to match a
        /// test server's shorter window (apns-mock --token-update-window).
        var providerTokenUpdateWindowSeconds: Int = 1200
    }

    struct Retry: Sendable, Equatable {
        var maxAttempts: Int = 8
        var baseDelayMilliseconds: Int = 1_000
        var maxDelayMilliseconds: Int = 600_000
        /// Sends APNs never answered are retried (without using up `maxAttempts`) for this long.
        var outageLimitSeconds: Int = 86_400
        /// While APNs is down for an app on a lane, one waiting notification of it is made due
        /// about this often (±25 %), so that an answer shows APNs is back (`OutageProbe`).
        var outageProbeMilliseconds: Int = 2_000
    }

    var databaseURL: String
    /// `database.dead_peer_s`: connect time-out and TCP dead-peer detection of every
    /// database session (`QueueSession.connectionDefaults`); the URL's own keywords win.
    var databaseDeadPeerSeconds: Int = 30
    /// `database.stall_s`: a database call waiting longer than this makes pushd not ready,
    /// logs an error and abandons the call's connection (`DatabaseWatchdog`). Well above
    /// `statement_timeout` (30 s), the longest a statement of pushd's sessions may run.
    var databaseStallSeconds: Int = 60
    var metricsListen: String = "127.0.0.1:9464"
    /// How the `/metrics`, `/healthz` and `/readyz` port holds up against clients that hold
    /// connections (`metrics.*`, `MetricsServerConfiguration`).
    struct MetricsEndpoint: Sendable, Equatable {
        /// `metrics.connection_limit`: connections at once; more wait in the listen queue.
        var connectionLimit: Int = 4096
        /// `metrics.per_address_limit`: connections at once from one address (0: no bound).
        var perAddressLimit: Int = 64
        /// `metrics.request_timeout_s`: a connection's whole request head must be in this long
        /// after it opened or after its previous answer, however slowly it trickles.
        var requestTimeoutSeconds: Int = 5
        /// `metrics.answer_timeout_s`: an answer must be taken by the client within this long.
        var answerTimeoutSeconds: Int = 10
        /// `metrics.idle_timeout_s`: a connection that moves no byte this long is closed.
        var idleTimeoutSeconds: Int = 10
    }
    var metricsEndpoint = MetricsEndpoint()
    var logLevel: LogLevel = .info
    var logFile: String?
    /// How often the log summarises connection errors, retries and dead letters.
    var logSummarySeconds: Int = 60
    var apns = APNs()
    var retry = Retry()
    /// Threads claiming transactional batches, each with its own connection.
    var transactionalWorkers: Int = 4
    /// Jobs per transactional batch.
    var batchSize: Int = 500
    /// When an idle transactional worker polls and when it sleeps on NOTIFY (not in the YAML).
    var jobWait = JobWaitPolicy()
    /// Threads sending campaign chunks, each with its own connection.
    var campaignWorkers: Int = 2
    var campaignChunkSize: Int = 1000
    /// Nice value of the campaign lane's threads (its workers and its connections' event
    /// loops), 0 for the process's own. Above 0, other work on a busy host gets the CPU
    /// before campaign bulk; see docs/queue.md for what it cost where PostgreSQL shares it.
    var campaignNiceness: Int = 0
    /// The longest pause (ms) a campaign connection's loop takes to let answers gather before
    /// reading them, while many are in flight and they arrive a few at a time (far APNs):
    /// libcurl's cost per read grows with the streams in flight (docs/dispatcher.md). 0, the
    /// default: none. With one-transfer reads the pause saves no CPU and holds every answer, and
    /// with it the stream it frees, up to this long: at a 50 ms round trip 25 ms cost a third of
    /// the rate (docs/dispatcher-measurements.md, "Answer coalescing off by default").
    var campaignAnswerCoalescingMilliseconds: Int = 0
    /// A campaign connection's readable socket is read through one of its transfers, so
    /// libcurl runs only the streams whose answers came instead of all of them
    /// (docs/dispatcher.md, "Reading a socket through one transfer"); false: libcurl's own way.
    var campaignReadsThroughOneTransfer = true
    /// The campaign lane keeps inside libcurl only as many requests as its rate needs, found
    /// by trying, up to `apns.max_in_flight` and `max_connections_per_app` × streams
    /// (docs/dispatcher.md, "Adaptive in-flight limit"); false keeps connections × streams.
    var campaignAdaptiveInFlight = false
    /// How long a leased campaign chunk stays with its worker without a checkpoint; a
    /// dead worker's chunk is taken over after this.
    var campaignLeaseSeconds: Int = 60
    /// Seconds one claimed batch of parked campaign targets may spend sending (not in the
    /// YAML): its claiming transaction stays open meanwhile and must end well inside the
    /// session's idle limit, however many workers share the campaign's cap
    /// (`CampaignWorker.sendParked`).
    var parkedBatchSeconds: Double = 20
    var defaultCampaignRate: Int?
    /// DeviceTokenNotForTopic answers in a row on one topic of an app, none accepted in between,
    /// that stop pruning and hold the topic (`NotForTopicBreaker`): a wrong bundle_id, not
    /// that many dead tokens.
    var notForTopicLimit: Int = 25
    /// BadDeviceToken answers in a row from one source (a campaign, the transactional lane) in
    /// an environment of an app, none of its notifications accepted there, after which pruning
    /// stops and the run's prunes are restored (`NotForTopicBreaker`): tokens of the other
    /// environment, not that many dead tokens.
    var badDeviceTokenLimit: Int = 25
    /// 403 Forbidden answers in a row in one environment of an app, none accepted in between,
    /// taken as APNs refusing the app's credentials for that environment (`ForbiddenBreaker`):
    /// that environment of the app is held (its work kept, the other environment sending on)
    /// until a SIGHUP, or for 5 minutes, after which the first answer tells again. Fewer fail
    /// their notifications, each refused on its own.
    var forbiddenLimit: Int = 10
    var drainTimeoutSeconds: Int = 20
    /// How long a job's `dedupe_key` stays taken after the job was inserted, whatever became
    /// of the job (`DedupeLedger`); the key of a job still queued is kept longer.
    var dedupeRetentionHours: Int = 24
    var apps: [App]
}
