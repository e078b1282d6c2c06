/// Every metric pushd exposes, registered in one registry. The daemon builds one of
/// these at start-up and hands it to the Dispatcher and QueueStore wiring; each stage
/// binds its label values once (for example per app at connection-pool creation) and
/// keeps the returned child for the hot path. docs/metrics.md lists the same catalog.
///
/// Label names come only from the closed set in `allowedLabels`; values are never a
/// device token, user id or campaign id, which would make series unbounded.
public struct PushdMetrics: Sendable {
    /// Label names a pushd metric may carry.
    public static let allowedLabels: Set<String> = ["app", "environment", "push_type", "status", "reason", "lane"]

    public let registry: MetricRegistry

    // Sending
    public let notificationsSent: CounterFamily
    public let apnsResponses: CounterFamily
    public let apnsRequestDuration: HistogramFamily
    public let apnsStreamsInFlight: GaugeFamily
    public let apnsConnections: GaugeFamily
    public let apnsInFlightLimit: GaugeFamily
    public let apnsConnectionErrors: CounterFamily
    public let apnsRequestsResent: CounterFamily
    public let apnsReconnects: CounterFamily
    public let apnsReconnectBackoffs: CounterFamily
    public let apnsConnectionGrowths: CounterFamily
    public let apnsUnavailable: GaugeFamily
    public let apnsThrottled: GaugeFamily
    public let apnsOutageProbes: CounterFamily
    public let retries: CounterFamily
    public let deadLetters: CounterFamily
    public let tokensPruned: CounterFamily
    public let tokensKept: CounterFamily
    public let tokensRestored: CounterFamily
    public let badDeviceTokenRuns: CounterFamily

    // Provider tokens
    public let jwtRefreshes: CounterFamily
    public let providerTokensForeign: CounterFamily
    public let appPaused: GaugeFamily
    public let sendingHeld: GaugeFamily
    public let workLeftToOtherInstances: GaugeFamily
    public let jwtAge: CallbackFamily

    // Configuration reloads (SIGHUP)
    public let configReloads: CounterFamily
    /// `pushd_config_last_reload_successful`, which has no labels.
    public let configLastReloadSuccessful: Gauge
    /// `pushd_config_last_reload_success_timestamp_seconds`, which has no labels.
    public let configLastReloadSuccessTimestamp: Gauge

    // Queue
    public let jobsClaimed: CounterFamily
    public let jobDeliveryLatency: HistogramFamily
    public let queueDepth: CallbackFamily
    public let queueOldestAge: CallbackFamily
    public let queueAppDepth: CallbackFamily
    public let queueAppOldestAge: CallbackFamily
    public let appConfigured: GaugeFamily

    // Campaigns
    public let campaigns: CallbackFamily
    public let campaignTargetsProcessed: CounterFamily
    public let campaignTargetsRemaining: CallbackFamily
    public let campaignTargetsRefused: CallbackFamily
    public let campaignChunksSending: GaugeFamily
    /// `pushd_campaign_chunks_sending`, which has no labels.
    public let chunksSending: Gauge
    /// `pushd_campaign_worker_stalls_total`, which has no labels.
    public let campaignLeaseStalls: Counter
    /// `pushd_campaigns_waiting_for_worker`, which has no labels.
    public let campaignsWaitingForWorker: Gauge
    /// `pushd_campaigns_waiting_for_apns`, which has no labels.
    public let campaignsWaitingForAPNs: Gauge

    // Database and process
    public let databaseErrors: CounterFamily
    /// `pushd_metrics_connections_refused_total{reason}`: connections of this endpoint refused or ended.
    public let metricsConnectionsRefused: CounterFamily
    /// `pushd_database_stalled`, which has no labels.
    public let databaseStalled: Gauge
    public let databaseCallSecondsMax: CallbackFamily
    /// `pushd_lane_stuck{lane}`: 1 while no pass of a lane's workers goes through (`LaneHealth`).
    public let laneStuck: GaugeFamily
    /// `pushd_queue_stats_age_seconds`, which has no labels.
    public let queueStatsAge: CallbackFamily
    public let buildInfo: GaugeFamily
    public let apnsConnectionRetirements: CounterFamily

    // Broadcast channels (Live Activities)
    public let broadcastsSent: CounterFamily
    public let channelOperations: CounterFamily
    public let leaseTakeovers: CounterFamily
    public let unrecordedOutcomes: CounterFamily
    public let staleTransactions: CounterFamily

    // Fleet (from pushd.instances, the same on every instance)
    public let fleetInstances: CallbackFamily
    public let fleetVersions: CallbackFamily
    public let fleetAppSets: CallbackFamily
    public let fleetAppEnvironmentDisagreements: CallbackFamily

    /// Registers the catalog (and the standard process metrics) in `registry` and sets
    /// `pushd_build_info{version}` to 1.
    public init(registry: MetricRegistry = MetricRegistry(), version: String) throws(MetricError) {
        self.registry = registry
        let target = ["app", "environment"]

        notificationsSent = try registry.counter(
            "pushd_notifications_sent_total",
            help: "Notifications accepted by APNs (HTTP 200).",
            labels: ["app", "environment", "push_type", "lane"])
        apnsResponses = try registry.counter(
            "pushd_apns_responses_total",
            help: "APNs answers and failed attempts by HTTP status (none when no answer arrived) and reason (none on success), retried ones included.",
            labels: target + ["status", "reason"])
        apnsRequestDuration = try registry.histogram(
            "pushd_apns_request_duration_seconds",
            help: "Time from handing a request to the HTTP/2 client to its complete response.",
            unit: "seconds", labels: target, buckets: HistogramBuckets.apnsLatency)
        apnsStreamsInFlight = try registry.gauge(
            "pushd_apns_streams_in_flight",
            help: "Requests inside libcurl: HTTP/2 streams sent to APNs and not yet answered, and the few waiting there for a stream or a new connection (the engine's own queue is not counted).",
            labels: target)
        apnsConnections = try registry.gauge(
            "pushd_apns_connections",
            help: "Open HTTP/2 connections to APNs (established: a request went on them).",
            labels: target)
        apnsInFlightLimit = try registry.gauge(
            "pushd_apns_in_flight_limit",
            help: "Notifications the campaign lane lets into libcurl at most now: found by trying (campaigns.adaptive_in_flight), or connections x streams.",
            labels: target)
        apnsConnectionErrors = try registry.counter(
            "pushd_apns_connection_errors_total",
            help: "Connections to APNs that failed or were closed by the server (reason: goaway, reset, timeout), closed by libcurl after APNs refused streams sent before its settings were read (reason: refused_stream), and attempts that failed (reason: connect, tls).",
            labels: target + ["reason"])
        apnsRequestsResent = try registry.counter(
            "pushd_apns_requests_resent_total",
            help: "Requests sent to APNs again because the transport left them unanswered after they went on a connection, by reason: stream_reset (the server reset the stream, RST_STREAM such as INTERNAL_ERROR), connection_lost (the connection dropped, was reset, timed out or ended with a GOAWAY before the stream), moved_by_libcurl (libcurl sent it again on another connection by itself after REFUSED_STREAM or a GOAWAY), new_connection_asked (an UnrelatedKeyIdInToken answer asked for a new connection). A request whose connect or TLS handshake failed was never sent and is not counted.",
            labels: target + ["reason"])
        apnsReconnects = try registry.counter(
            "pushd_apns_reconnects_total",
            help: "Connections to APNs established after the first one (to replace one that closed, failed or was asked to be replaced); refused connects and failed TLS handshakes count in pushd_apns_connection_errors_total only.",
            labels: target)
        apnsReconnectBackoffs = try registry.counter(
            "pushd_apns_reconnect_backoffs_total",
            help: "Runs of failed connections to APNs (connect, TLS, 503 Shutdown, no answer in time, ended before answering anything) after which an event loop waits 250 ms doubling to 4 s before each new connection.",
            labels: target)
        apnsConnectionGrowths = try registry.counter(
            "pushd_apns_connection_growths_total",
            help: "Connections an event loop added because notifications waited for a stream and put on trial (result: started), and how each trial ended after apns.connection_growth_judged_ms of answers (kept when the answer rate rose with it, given_up when it did not and growth holds off for 30 s to 8 min, spread by ±25 % at random, abandoned when it ended unjudged: a connection closed, the loop ran out of work, or pushd stopped). Every started is matched by exactly one of the other three.",
            labels: target + ["result"])
        apnsUnavailable = try registry.gauge(
            "pushd_apns_unavailable",
            help: "1 while APNs takes none of an app's notifications to one environment (production or sandbox, separate services that fail apart) on a lane (3 or more failed sends and no answer for 1 s, until answers come for 1 s without a failure), else 0.",
            labels: ["app", "environment", "lane"])
        apnsThrottled = try registry.gauge(
            "pushd_apns_throttled",
            help: "1 while APNs answers most of an app's notifications to one environment on a lane with 429 TooManyRequests (at least 20 such answers and at least half of the answers over 10 s): it is throttling the provider, not single devices; 0 again after 10 s with under a tenth 429, or 60 s with no answer.",
            labels: ["app", "environment", "lane"])
        apnsOutageProbes = try registry.counter(
            "pushd_apns_outage_probes_total",
            help: "Waiting notifications made due before the end of their backoff while APNs takes none on their lane in their environment, one per app and environment every retry.outage_probe_ms (2 s, ±25 %), so that an answer shows whether APNs is back.",
            labels: ["environment", "lane"])
        retries = try registry.counter(
            "pushd_retries_total",
            help: "Notifications rescheduled for another attempt, by the reason of the failed one.",
            labels: ["app", "lane", "reason"])
        deadLetters = try registry.counter(
            "pushd_dead_letters_total",
            help: "Notifications given up on and written to pushd.dead_jobs, by reason.",
            labels: ["app", "lane", "reason"])
        tokensPruned = try registry.counter(
            "pushd_tokens_pruned_total",
            help: "Device tokens marked invalid because APNs rejected them, by reason.",
            labels: target + ["reason"])
        tokensKept = try registry.counter(
            "pushd_tokens_kept_total",
            help: "Device tokens APNs reported as no longer valid (410) but kept, because the app registered them again after APNs' timestamp; reason prune_refused: a CHECK of pushd.device_tokens refused to mark the token invalid.",
            labels: target + ["reason"])
        tokensRestored = try registry.counter(
            "pushd_tokens_restored_total",
            help: "Device tokens pruned and made live again because the answers came in a run that blamed something else than the tokens: DeviceTokenNotForTopic, the topic (which is held); BadDeviceToken, the environment (tokens of the other one). Not subtracted from pushd_tokens_pruned_total.",
            labels: target + ["reason"])
        badDeviceTokenRuns = try registry.counter(
            "pushd_bad_device_token_runs_total",
            help: "Runs of tokens.bad_device_token_limit BadDeviceToken answers in a row from one source (a campaign, the transactional lane) in an environment of the app with none of its notifications accepted there, taken as tokens of the other environment: pruning stopped, the run's prunes restored, and the source's such answers fail their notification with the token kept until one of its notifications there is accepted.",
            labels: target)

        jwtRefreshes = try registry.counter(
            "pushd_jwt_refreshes_total",
            help: "Provider tokens (JWT) minted or picked up from the shared table.",
            labels: ["app"])
        providerTokensForeign = try registry.counter(
            "pushd_provider_tokens_foreign_total",
            help: "Provider tokens in the shared table that this instance's key file does not verify (another instance signs with a different key file); this instance minted its own instead.",
            labels: ["app"])
        appPaused = try registry.gauge(
            "pushd_app_paused",
            help: "1 while sending for the app is paused because APNs rejected its credentials or TLS refused a certificate, else 0.",
            labels: ["app"])
        sendingHeld = try registry.gauge(
            "pushd_sending_held",
            help: "Scopes of the app held because APNs refused its configuration for them, by reason: TopicDisallowed counts topics, FeatureNotEnabled and TopicMismatch the app's broadcasts, CannotCreateChannelConfig its channel creation, DeviceTokenNotForTopic topics that drew a run of DeviceTokenNotForTopic answers with none accepted (tokens.not_for_topic_limit); AppEnvironmentDisagreement is 1 while live instances disagree on the app's apps[].environment and its notifications that name no environment, to tokens registered without one, are held. 0 when none.",
            labels: ["app", "environment", "reason"])
        workLeftToOtherInstances = try registry.gauge(
            "pushd_work_left_to_other_instances",
            help: "Work of the app this instance cannot send, by reason: NoCredentialsForEnvironment the notifications to an environment it has no certificate for, TokenAuthenticationRequired what APNs takes only with token authentication (Live Activity and location pushes; broadcasts and channel requests go with a certificate too) while it has only a certificate. 1 while another live instance advertises it and takes it; 0 while none does (then it is dead-lettered).",
            labels: ["app", "reason"])
        jwtAge = try registry.callbackGauge(
            "pushd_jwt_age_seconds",
            help: "Age of the provider token (JWT) in use; APNs rejects tokens older than 3600 s.",
            unit: "seconds", labels: ["app"])

        configReloads = try registry.counter(
            "pushd_config_reloads_total",
            help: "Configuration reloads (SIGHUP), by result: success, or failure when the file could not be read or a credential file could not be loaded (the app keeps the credentials it had).",
            labels: ["result"])
        configLastReloadSuccessful = try registry.gauge(
            "pushd_config_last_reload_successful",
            help: "1 when the last configuration reload (or the start) loaded everything, 0 when it failed.").bound([])
        configLastReloadSuccessTimestamp = try registry.gauge(
            "pushd_config_last_reload_success_timestamp_seconds",
            help: "When the configuration was last loaded in full, at start or on SIGHUP (Unix time).",
            unit: "seconds").bound([])

        jobsClaimed = try registry.counter(
            "pushd_jobs_claimed_total",
            help: "Jobs claimed from the queue for sending.",
            labels: ["lane"])
        jobDeliveryLatency = try registry.histogram(
            "pushd_job_delivery_latency_seconds",
            help: "Time from a transactional job's INSERT (its created_at) to APNs accepting it, retries included.",
            unit: "seconds", labels: ["app"], buckets: HistogramBuckets.transactionalLatency)
        queueDepth = try registry.callbackGauge(
            "pushd_queue_depth",
            help: "Jobs waiting in the queue: due now, or put back for a scope held for its configuration.",
            labels: ["lane"])
        queueOldestAge = try registry.callbackGauge(
            "pushd_queue_oldest_age_seconds",
            help: "How long the oldest due work has been waiting: a job since it became due (a held one: since its insert), a campaign since it became due (its start time when it had one, else when it was started).",
            unit: "seconds", labels: ["lane"])
        queueAppDepth = try registry.callbackGauge(
            "pushd_queue_app_depth",
            help: "Work waiting per app: due or held jobs (transactional, broadcast) or due campaign targets: remaining targets of running campaigns and of scheduled ones whose start time has come, not of paused ones nor of ones a CHECK holds (pushd_campaign_targets_refused) (campaign), whichever instance serves the app.",
            labels: ["app", "lane"])
        queueAppOldestAge = try registry.callbackGauge(
            "pushd_queue_app_oldest_age_seconds",
            help: "Per app: how long its oldest due job has been waiting (transactional, broadcast), or its oldest due campaign (campaign): since its start time when it had one that has come, started or not, else since it was started; a paused or refused campaign is not due.",
            unit: "seconds", labels: ["app", "lane"])
        appConfigured = try registry.gauge(
            "pushd_app_configured",
            help: "1 for every app this instance is configured for; an app with queued work and no instance reporting it is served by nobody.",
            labels: ["app"])

        campaigns = try registry.callbackGauge(
            "pushd_campaigns",
            help: "Campaigns by status (draft, scheduled, running, paused, done, cancelled); refused: held because a CHECK of pushd.campaigns refuses to write their row, counted there only.",
            labels: ["status"])
        campaignTargetsProcessed = try registry.counter(
            "pushd_campaign_targets_processed_total",
            help: "Campaign targets checkpointed as sent or failed, counted per completed chunk; cancelled: parked for a retry when their campaign was cancelled, dropped unsent.",
            labels: ["app", "status"])
        campaignTargetsRemaining = try registry.callbackGauge(
            "pushd_campaign_targets_remaining",
            help: "Targets not yet sent or failed of campaigns not over (scheduled, running or paused), due or not.",
            labels: ["app"])
        campaignTargetsRefused = try registry.callbackGauge(
            "pushd_campaign_targets_refused",
            help: "Remaining targets of campaigns held because a CHECK of pushd.campaigns refuses to write their row: nothing sends them until the hold ends, so they are not counted as due (pushd_queue_app_depth).",
            labels: ["app"])
        campaignChunksSending = try registry.gauge(
            "pushd_campaign_chunks_sending",
            help: "Campaign chunks this instance holds a lease on and is sending; above one per campaign worker while answers of finished-sending chunks are still on their way (a long round trip).",
            labels: [])
        chunksSending = campaignChunksSending.bound([])
        campaignLeaseStalls = try registry.counter(
            "pushd_campaign_worker_stalls_total",
            help: "Campaign workers found hung (no progress for the answer wait and 5 s): the lease keeper stopped extending their chunks' leases, which other workers then take over.",
            labels: []).bound([])
        campaignsWaitingForWorker = try registry.gauge(
            "pushd_campaigns_waiting_for_worker",
            help: "Running campaigns with chunks to send, none of them being sent by any worker for over 10 s: the campaign workers are busy with other campaigns' chunks.",
            labels: []).bound([])
        campaignsWaitingForAPNs = try registry.gauge(
            "pushd_campaigns_waiting_for_apns",
            help: "Campaigns this instance leaves unleased, their unsent targets in their chunks, while APNs takes none of their app's notifications to their environment on the campaign lane (a probe still goes); leased again when it answers.",
            labels: []).bound([])

        databaseErrors = try registry.counter(
            "pushd_database_errors_total",
            help: "Failed PostgreSQL operations, by reason (connection, or the SQLSTATE class such as 40 or 57).",
            labels: ["reason"])
        metricsConnectionsRefused = try registry.counter(
            "pushd_metrics_connections_refused_total",
            help: "Connections to the /metrics, /healthz and /readyz port refused or ended, by reason: per_address_limit (the address already held metrics.per_address_limit connections; closed as accepted), request_timeout (no whole request within metrics.request_timeout_s: a client trickling headers or sending nothing), answer_timeout (the answer not taken within metrics.answer_timeout_s: a client that stopped reading).",
            labels: ["reason"])
        databaseStalled = try registry.gauge(
            "pushd_database_stalled",
            help: "1 from when a database call has waited longer than database.stall_s (the call's connection is then abandoned) until a call is answered again, else 0.",
            labels: []).bound([])
        databaseCallSecondsMax = try registry.callbackGauge(
            "pushd_database_call_seconds_max",
            help: "How long the longest database call in flight has waited, in seconds; 0 when none is in flight.",
            labels: [])
        laneStuck = try registry.gauge(
            "pushd_lane_stuck",
            help: "1 while a lane sends nothing because every pass of its workers fails on the database for 10 s or more (a lock another session holds on its table waits out lock_timeout, or any error that repeats; /readyz is not ready and names it), until a pass goes through again; else 0.",
            labels: ["lane"])
        queueStatsAge = try registry.callbackGauge(
            "pushd_queue_stats_age_seconds",
            help: "Age in seconds of the queue statistics this scrape shows (pushd_queue_depth, pushd_queue_oldest_age_seconds, pushd_campaigns and the rest read from the database): below 2 while they are read, growing while they cannot be read within 1 s (a lock on a queue table) and the last ones read are shown; absent before any was read.",
            labels: [])
        buildInfo = try registry.gauge(
            "pushd_build_info",
            help: "Always 1; the version label says which pushd build is running.",
            labels: ["version"])
        buildInfo.bound([version]).set(1)
        apnsConnectionRetirements = try registry.counter(
            "pushd_apns_connection_retirements_total",
            help: "Answers and events after which a connection to APNs takes no new stream: TooManyProviderTokenUpdates, ExpiredProviderToken, Shutdown (503), GOAWAY, REFUSED_STREAM, and CertificateReplaced (a reload gave the app a renewed client certificate).",
            labels: ["app", "environment", "reason"])

        broadcastsSent = try registry.counter(
            "pushd_broadcasts_sent_total",
            help: "Broadcast notifications accepted by APNs (HTTP 200), each one for every device subscribed to its channel.",
            labels: target)
        channelOperations = try registry.counter(
            "pushd_channel_operations_total",
            help: "Channel management requests carried out: lane is create or delete, status the HTTP status (none without an answer), reason none on success, else the APNs reason or transport.",
            labels: target + ["lane", "status", "reason"])
        leaseTakeovers = try registry.counter(
            "pushd_lease_takeovers_total",
            help: "Broadcasts (lane broadcast) and channel creations (lane channel_create) taken over after the lease of an earlier claim ended with no outcome recorded: each may have reached APNs already; a channel creation may have left a channel at APNs that pushd has no record of (pushd channels audit finds it). Campaign chunks (lane campaign) taken over after their lease ran out: the targets answered since their last checkpoint are sent again.",
            labels: ["app", "lane"])
        unrecordedOutcomes = try registry.counter(
            "pushd_unrecorded_outcomes_total",
            help: "Notifications APNs accepted whose batch's transaction ended before the acceptance was recorded (reason: connection, an SQLSTATE class or other): recorded_again on a new session (or by a COMMIT whose reply was lost), sent_again because another claimer had taken the job meanwhile, unknown when PostgreSQL could not say whether the COMMIT whose reply was lost went through, given_up after the database stayed away (sent again too).",
            labels: ["lane", "reason", "result"])
        staleTransactions = try registry.counter(
            "pushd_stale_transactions_total",
            help: "Transactions holding a sent batch still running on the database server after their session ended (a network cut the server had not noticed), ended by pushd before taking the batch back: result committed (its COMMIT had gone through), aborted (rolled back: the batch is taken back), running (could not be ended: its rows are sent again once it ends).",
            labels: ["lane", "result"])

        fleetInstances = try registry.callbackGauge(
            "pushd_fleet_instances",
            help: "Instances registered in pushd.instances: alive (a heartbeat within 60 s) or gone (silent longer).",
            labels: ["status"])
        fleetVersions = try registry.callbackGauge(
            "pushd_fleet_versions",
            help: "Distinct pushd versions among live instances; above 1 during a rolling upgrade.")
        fleetAppSets = try registry.callbackGauge(
            "pushd_fleet_app_sets",
            help: "Distinct sets of configured apps among live instances; above 1 means some apps are served by only part of the fleet.")
        fleetAppEnvironmentDisagreements = try registry.callbackGauge(
            "pushd_fleet_app_environment_disagreements",
            help: "Apps whose configured environment live instances disagree on; above 0, notifications that name no environment go to both APNs hosts.")

        try ProcessMetrics.register(in: registry)
    }

    // Typed binders, so the label order cannot be mixed up at call sites.

    public func sent(app: String, environment: String, pushType: String, lane: String) -> Counter {
        notificationsSent.bound([app, environment, pushType, lane])
    }

    public func apnsResponse(app: String, environment: String, status: String, reason: String) -> Counter {
        apnsResponses.bound([app, environment, status, reason])
    }

    public func requestDuration(app: String, environment: String) -> Histogram {
        apnsRequestDuration.bound([app, environment])
    }

    public func streamsInFlight(app: String, environment: String) -> Gauge {
        apnsStreamsInFlight.bound([app, environment])
    }

    public func connections(app: String, environment: String) -> Gauge {
        apnsConnections.bound([app, environment])
    }

    public func inFlightLimit(app: String, environment: String) -> Gauge {
        apnsInFlightLimit.bound([app, environment])
    }

    public func connectionError(app: String, environment: String, reason: String) -> Counter {
        apnsConnectionErrors.bound([app, environment, reason])
    }

    public func reconnects(app: String, environment: String) -> Counter {
        apnsReconnects.bound([app, environment])
    }

    public func reconnectBackoffs(app: String, environment: String) -> Counter {
        apnsReconnectBackoffs.bound([app, environment])
    }

    /// `result`: `kept` or `given_up`.
    public func connectionGrowths(app: String, environment: String, result: String) -> Counter {
        apnsConnectionGrowths.bound([app, environment, result])
    }

    /// `environment`: `production` or `sandbox`.
    public func apnsUnavailable(app: String, environment: String, lane: String) -> Gauge {
        apnsUnavailable.bound([app, environment, lane])
    }

    /// `environment`: `production` or `sandbox`.
    public func apnsThrottled(app: String, environment: String, lane: String) -> Gauge {
        apnsThrottled.bound([app, environment, lane])
    }

    public func outageProbes(environment: String, lane: String) -> Counter {
        apnsOutageProbes.bound([environment, lane])
    }

    public func requestsResent(app: String, environment: String, reason: String) -> Counter {
        apnsRequestsResent.bound([app, environment, reason])
    }

    public func retry(app: String, lane: String, reason: String) -> Counter {
        retries.bound([app, lane, reason])
    }

    public func deadLetter(app: String, lane: String, reason: String) -> Counter {
        deadLetters.bound([app, lane, reason])
    }

    public func tokenPruned(app: String, environment: String, reason: String) -> Counter {
        tokensPruned.bound([app, environment, reason])
    }

    public func tokenKept(app: String, environment: String, reason: String) -> Counter {
        tokensKept.bound([app, environment, reason])
    }

    public func tokenRestored(app: String, environment: String, reason: String) -> Counter {
        tokensRestored.bound([app, environment, reason])
    }

    public func badDeviceTokenRun(app: String, environment: String) -> Counter {
        badDeviceTokenRuns.bound([app, environment])
    }

    public func jwtRefresh(app: String) -> Counter {
        jwtRefreshes.bound([app])
    }

    public func configReload(result: String) -> Counter {
        configReloads.bound([result])
    }

    public func providerTokenForeign(app: String) -> Counter {
        providerTokensForeign.bound([app])
    }

    public func paused(app: String) -> Gauge {
        appPaused.bound([app])
    }

    public func sendingHeld(app: String, environment: String, reason: String) -> Gauge {
        sendingHeld.bound([app, environment, reason])
    }

    public func workLeftToOtherInstances(app: String, reason: String) -> Gauge {
        workLeftToOtherInstances.bound([app, reason])
    }

    public func configured(app: String) -> Gauge {
        appConfigured.bound([app])
    }

    public func deliveryLatency(app: String) -> Histogram {
        jobDeliveryLatency.bound([app])
    }

    /// `reason`: an `EndpointRefusal` raw value.
    public func metricsConnectionRefused(reason: String) -> Counter {
        metricsConnectionsRefused.bound([reason])
    }

    public func claimed(lane: String) -> Counter {
        jobsClaimed.bound([lane])
    }

    public func campaignTargets(app: String, status: String) -> Counter {
        campaignTargetsProcessed.bound([app, status])
    }

    public func laneStuck(lane: String) -> Gauge {
        laneStuck.bound([lane])
    }

    public func databaseError(reason: String) -> Counter {
        databaseErrors.bound([reason])
    }

    public func connectionRetirement(app: String, environment: String, reason: String) -> Counter {
        apnsConnectionRetirements.bound([app, environment, reason])
    }

    public func broadcastSent(app: String, environment: String) -> Counter {
        broadcastsSent.bound([app, environment])
    }

    /// `operation` is "create" or "delete" (carried in the `lane` label).
    public func channelOperation(app: String, environment: String, operation: String, status: String, reason: String) -> Counter {
        channelOperations.bound([app, environment, operation, status, reason])
    }

    /// `lane` is "broadcast" or "channel_create".
    public func leaseTakeover(app: String, lane: String) -> Counter {
        leaseTakeovers.bound([app, lane])
    }

    /// `result` is "recorded_again", "sent_again" or "given_up"; `reason` as in `databaseError`.
    public func unrecordedOutcome(lane: String, reason: String, result: String) -> Counter {
        unrecordedOutcomes.bound([lane, reason, result])
    }

    /// `result` is "committed", "aborted" or "running".
    public func staleTransaction(lane: String, result: String) -> Counter {
        staleTransactions.bound([lane, result])
    }
}
