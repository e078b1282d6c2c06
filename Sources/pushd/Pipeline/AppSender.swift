import APNs
import Dispatcher
import Foundation
import Metrics
import Synchronization

/// Which of an app's connection pools a request goes over.
enum SendLane: String, Sendable, CaseIterable {
    case transactional, campaign
}

/// Everything needed to send for one configured app: its HTTP/2 dispatchers (a pool of
/// connections per environment and lane, made on first use), how to authenticate each
/// request, whether it is paused, and its metric children bound once.
///
/// Thread rule: immutable after init except `pause` and `dispatchers`, each under its own
/// mutex; any worker thread may use it.
final class AppSender: @unchecked Sendable {
    let app: PushdConfig.App
    let factory: NotificationFactory
    let tokenKey: ProviderTokenService.Key?
    let tokens: ProviderTokenService
    let environmentLabel: String
    private let pause = Mutex<(until: Date, reason: String)?>(nil)
    /// Transactional jobs and campaign targets go over separate connections, so a campaign's
    /// full window and busy streams add nothing to a transactional push's latency.
    private let dispatchers = Mutex<[DispatcherKey: HTTP2Dispatcher]>([:])
    /// The transactional dispatcher of the app's own environment, made at init.
    let transactionalDispatcher: HTTP2Dispatcher
    private let makeDispatcher: @Sendable (PushdConfig.Environment) throws -> HTTP2Dispatcher?
    private let pausedGauge: Gauge
    private let metrics: PushdMetrics
    private let sentCounters: [String: Counter]
    private let acceptedResponses: Counter
    let latency: Histogram
    /// INSERT to accepted, for transactional jobs.
    let deliveryLatency: Histogram

    private struct DispatcherKey: Hashable {
        var environment: PushdConfig.Environment
        var lane: SendLane
    }

    /// No credentials reach an environment's host: the notification can never be sent there.
    struct NoCredentials: Error, CustomStringConvertible {
        var app: String
        var environment: PushdConfig.Environment
        var description: String {
            "NoCredentialsForEnvironment: app \(app) has no certificate for \(environment.rawValue) (APNs issues a certificate for one environment); add \(environment.rawValue)_certificate to the app or send to the environment it has"
        }
    }

    /// - Parameter makeDispatcher: a new dispatcher for an environment, nil when the app has
    ///   no credentials there. The app's own environment's are made now, so a setup error
    ///   stops `run` at start.
    init(app: PushdConfig.App, tokens: ProviderTokenService, metrics: PushdMetrics,
         makeDispatcher: @escaping @Sendable (PushdConfig.Environment) throws -> HTTP2Dispatcher?) throws {
        self.app = app
        self.factory = NotificationFactory(app: app)
        self.tokens = tokens
        self.metrics = metrics
        self.makeDispatcher = makeDispatcher
        environmentLabel = app.environment.rawValue
        if case .token(let teamID, let keyID, _) = app.credentials {
            tokenKey = ProviderTokenService.Key(keyID: keyID, teamID: teamID)
        } else {
            tokenKey = nil
        }
        var counters = [String: Counter]()
        for environment in PushdConfig.Environment.allCases {
            for type in PushType.allCases {
                for lane in SendLane.allCases {
                    counters[environment.rawValue + "/" + type.rawValue + "/" + lane.rawValue] = metrics.sent(
                        app: app.name, environment: environment.rawValue, pushType: type.rawValue, lane: lane.rawValue)
                }
            }
        }
        sentCounters = counters
        acceptedResponses = metrics.apnsResponse(app: app.name, environment: app.environment.rawValue, status: "200", reason: "none")
        latency = metrics.requestDuration(app: app.name, environment: app.environment.rawValue)
        deliveryLatency = metrics.deliveryLatency(app: app.name)
        pausedGauge = metrics.paused(app: app.name)
        pausedGauge.set(0)
        guard let own = try makeDispatcher(app.environment) else { throw NoCredentials(app: app.name, environment: app.environment) }
        transactionalDispatcher = own
        dispatchers.withLock { $0[DispatcherKey(environment: app.environment, lane: .transactional)] = own }
        _ = try dispatcher(for: app.environment, lane: .campaign)
    }

    /// The environment a notification goes to: its own, else its token's registered one,
    /// else the app's.
    func environment(job: String?, registered: String?) -> PushdConfig.Environment {
        job.flatMap(PushdConfig.Environment.init(rawValue:)) ?? registered.flatMap(PushdConfig.Environment.init(rawValue:)) ?? app.environment
    }

    /// The dispatcher for `environment` and `lane`, made on first use.
    func dispatcher(for environment: PushdConfig.Environment, lane: SendLane) throws -> HTTP2Dispatcher {
        let key = DispatcherKey(environment: environment, lane: lane)
        return try dispatchers.withLock { made in
            if let existing = made[key] { return existing }
            guard let fresh = try makeDispatcher(environment) else { throw NoCredentials(app: app.name, environment: environment) }
            made[key] = fresh
            return fresh
        }
    }

    func shutdown(drainTimeoutMilliseconds: Int) {
        for dispatcher in dispatchers.withLock({ Array($0.values) }) {
            dispatcher.shutdown(drainTimeoutMilliseconds: drainTimeoutMilliseconds)
        }
    }

    /// The HTTP/2 request for a notification, with a provider token when the app uses token auth.
    func request(for notification: APNsNotification) throws -> DispatchRequest {
        let authorization = try tokenKey.map { try tokens.authorization($0) }
        return try DispatchRequest(path: notification.path,
                                   headerLines: notification.headerFields(authorization: authorization).map(\.line),
                                   body: notification.payload)
    }

    // MARK: Pausing

    /// Stops sending for the app until `until` (or a reload): its credentials were rejected.
    /// Returns true when this call paused it (so the caller logs once).
    @discardableResult
    func pauseSending(reason: String, until: Date) -> Bool {
        pausedGauge.set(1)
        return pause.withLock { current in
            let wasRunning = current == nil || current!.until <= Date()
            current = (until, reason)
            return wasRunning
        }
    }

    func resumeSending() {
        pause.withLock { $0 = nil }
        pausedGauge.set(0)
    }

    /// The reason the app is paused, or nil when it may send.
    var pausedReason: String? {
        let reason = pause.withLock { current -> String? in
            guard let current, current.until > Date() else { return nil }
            return current.reason
        }
        if reason == nil { pausedGauge.set(0) }
        return reason
    }

    // MARK: Metrics

    /// What a dispatcher result means for the outcome policy; an answer's latency is observed.
    func outcome(of result: DispatchResult) -> SendOutcome {
        switch result.outcome {
        case .response(let response):
            latency.observe(Double(result.latencyNanoseconds) / 1e9)
            return .response(status: response.status, body: response.body)
        case .transportFailure(let error):
            let kind = TransportFailureKind(error)
            if kind.isConfigurationError {
                return .tlsRefused("\(kind.explanation) (libcurl error \(error.code): \(error.message))")
            }
            return .transportFailure(error.message)
        }
    }

    func countSent(pushType: String, lane: SendLane, environment: PushdConfig.Environment) {
        sentCounters[environment.rawValue + "/" + pushType + "/" + lane.rawValue]?.increment()
    }

    func countResponse(status: Int?, reason: String) {
        if status == 200 {
            acceptedResponses.increment()
            return
        }
        metrics.apnsResponse(app: app.name, environment: environmentLabel,
                             status: status.map(String.init) ?? "none", reason: reason).increment()
    }
}

/// Feeds the dispatcher's engine events into one app's metric children.
struct AppDispatcherMetrics: DispatcherMetricsHook {
    let inFlight: Gauge
    let connections: Gauge
    let errors: [ConnectionFailureReason: Counter]
    let resent: Counter
    let reconnects: Counter

    init(app: String, environment: String, metrics: PushdMetrics) {
        inFlight = metrics.streamsInFlight(app: app, environment: environment)
        connections = metrics.connections(app: app, environment: environment)
        errors = Dictionary(uniqueKeysWithValues: ConnectionFailureReason.allCases.map {
            ($0, metrics.connectionError(app: app, environment: environment, reason: $0.rawValue))
        })
        resent = metrics.requestsResent(app: app, environment: environment)
        reconnects = metrics.reconnects(app: app, environment: environment)
    }

    func inFlightChanged(by delta: Int) { inFlight.add(Double(delta)) }
    func connectionOpened(reconnect: Bool) {
        connections.increment()
        if reconnect { reconnects.increment() }
    }
    func connectionClosed() { connections.decrement() }
    func connectionFailed(_ reason: ConnectionFailureReason) { errors[reason]?.increment() }
    func requestRetried() { resent.increment() }
}
