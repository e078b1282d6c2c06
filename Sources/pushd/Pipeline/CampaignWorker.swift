import APNs
import Dispatch
import Dispatcher
import Foundation
import QueueStore

/// One worker of the campaign lane, on its own thread with its own connection: lease a
/// chunk of about a thousand targets, send them (respecting the campaign's rate cap),
/// retry failures in memory, and checkpoint progress every couple of seconds. The
/// checkpoint extends the lease; a worker that vanishes leaves a lease that expires,
/// and another worker resumes the chunk from its last checkpoint.
final class CampaignWorker: @unchecked Sendable {
    // Touched only on the worker's own thread, except `completions` and the context.
    private let context: PipelineContext
    private let index: Int
    private let completions: CompletionQueue
    private let limiter: RateLimiter
    private let policy: OutcomePolicy
    private let store = CampaignStore()
    private var connection: PGConnection?
    private var generation: UInt32 = 0
    private var random = SystemRandomNumberGenerator()
    private let leaseSeconds: Double
    /// Progress is checkpointed (and the lease extended) this often.
    private let checkpointInterval: Double
    let finished = DispatchSemaphore(value: 0)

    init(context: PipelineContext, index: Int, completions: CompletionQueue, limiter: RateLimiter) {
        self.context = context
        self.index = index
        self.completions = completions
        self.limiter = limiter
        leaseSeconds = Double(context.config.campaignLeaseSeconds)
        checkpointInterval = min(2, leaseSeconds / 3)
        // A chunk holds its lease while it retries: keep campaign backoffs short.
        var retry = context.policy.retry
        retry.maxDelay = min(retry.maxDelay, 30)
        retry.throttledBaseDelay = min(retry.throttledBaseDelay, 5)
        retry.maxAttempts = min(retry.maxAttempts, 5)
        policy = OutcomePolicy(retry: retry)
    }

    private var owner: String { "\(context.instance)/campaign-\(index)" }

    func start() {
        let thread = Thread { [self] in
            run()
            finished.signal()
        }
        thread.name = "pushd-campaign-\(index)"
        thread.start()
    }

    private func run() {
        var failures = 0
        while !context.isStopping {
            do {
                if connection == nil || connection?.isOpen == false {
                    connection = try QueueSession.connect(url: context.config.databaseURL, applicationName: "pushd-campaign-\(index)")
                }
                let seen = context.doorbell.current
                guard let chunk = try store.leaseChunk(connection!, owner: owner, leaseSeconds: leaseSeconds) else {
                    context.doorbell.wait(after: seen, timeout: 1)
                    continue
                }
                failures = 0
                try send(chunk, on: connection!)
            } catch {
                failures += 1
                context.databaseError(error)
                context.logger.warning("campaign worker \(index): \(error)", ("worker", .int(Int64(index))))
                connection?.close()
                connection = nil
                Thread.sleep(forTimeInterval: min(30.0, 0.2 * pow(2.0, Double(min(failures, 8)))) * Double.random(in: 0.5...1.0))
            }
        }
        connection?.close()
        connection = nil
    }

    private enum Resolution {
        case sent
        case failed(String)
        case pruned(String)
    }

    private struct Retry {
        var at: Double
        var target: Int
    }

    private func send(_ chunk: CampaignChunk, on connection: PGConnection) throws {
        context.metrics.claimed(lane: "campaign").increment(by: UInt64(chunk.targets.count))
        let count = chunk.targets.count
        var progress = ChunkProgress(position: chunk.startIndex)
        guard let sender = context.senders[chunk.app] else {
            progress.position = chunk.size
            progress.failedByReason["UnknownApp"] = count
            context.logger.error("campaign \(chunk.campaignID) names app '\(chunk.app)', which is not configured; its targets are failed",
                                 ("campaign", .int(chunk.campaignID)))
            try store.finish(connection, chunk, progress)
            return
        }
        if sender.pausedReason != nil {
            try store.release(connection, chunk, progress)
            context.doorbell.wait(after: context.doorbell.current, timeout: 5)
            return
        }

        generation &+= 1
        let maxInFlight = max(1, min(2000, context.config.apns.maxInFlight))
        var resolutions = [Resolution?](repeating: nil, count: count)
        var attempts = [Int](repeating: 0, count: count)
        var environments = [PushdConfig.Environment](repeating: .production, count: count)
        var retries = [Retry]()
        var prunes = [TokenPrune]()
        var watermark = 0
        var next = 0
        var inFlight = 0
        var stopSubmitting = false
        var leaseLost = false
        var lastCheckpoint = RateLimiter.monotonicSeconds()
        let firstAttempt = Date()
        let expiration = chunk.expiration.map { Int64($0.timeIntervalSince1970) }

        func resolve(_ target: Int, _ resolution: Resolution) {
            resolutions[target] = resolution
        }

        // Moves the watermark over every resolved target and adds them to `progress`.
        func advance() {
            while watermark < count, let resolution = resolutions[watermark] {
                switch resolution {
                case .sent: progress.sent += 1
                case .failed(let reason): progress.failedByReason[reason, default: 0] += 1
                case .pruned(let reason):
                    progress.failedByReason[reason, default: 0] += 1
                    progress.pruned += 1
                }
                watermark += 1
            }
            progress.position = chunk.startIndex + watermark
        }

        func checkpoint() throws {
            advance()
            if !prunes.isEmpty {
                try TokenStore().prune(connection, prunes)
                prunes.removeAll(keepingCapacity: true)
            }
            let counted = progress
            switch try store.checkpoint(connection, chunk, counted, leaseSeconds: leaseSeconds) {
            case .proceed: break
            case .stop(let status):
                context.logger.info("campaign \(chunk.campaignID) is \(status.rawValue): stopping its chunk \(chunk.chunk)",
                                    ("campaign", .int(chunk.campaignID)))
                stopSubmitting = true
            case .leaseLost:
                context.logger.warning("lost the lease of chunk \(chunk.chunk) of campaign \(chunk.campaignID)",
                                       ("campaign", .int(chunk.campaignID)))
                stopSubmitting = true
                leaseLost = true
            }
            countProcessed(counted, app: chunk.app)
            progress = ChunkProgress(position: progress.position)
            lastCheckpoint = RateLimiter.monotonicSeconds()
        }

        while true {
            if context.isStopping || sender.pausedReason != nil { stopSubmitting = true }
            // Fill the window: due retries first, then fresh targets.
            while !stopSubmitting, inFlight < maxInFlight {
                let now = RateLimiter.monotonicSeconds()
                let target: Int
                if let due = retries.firstIndex(where: { $0.at <= now }) {
                    target = retries.remove(at: due).target
                } else if next < count {
                    target = next
                    next += 1
                } else {
                    break
                }
                if let rate = chunk.rateLimit ?? context.config.apps.first(where: { $0.name == chunk.app })?.campaignRate
                    ?? context.config.defaultCampaignRate {
                    let wait = limiter.reserve(campaign: chunk.campaignID, rate: rate)
                    if wait > 0 { Thread.sleep(forTimeInterval: wait) }
                    // Paced sending can stay in this loop longer than the lease: renew it here,
                    // or another worker takes the chunk over and sends it again.
                    if !leaseLost, RateLimiter.monotonicSeconds() - lastCheckpoint >= checkpointInterval {
                        try checkpoint()
                        if stopSubmitting {
                            retries.append(Retry(at: 0, target: target))
                            break
                        }
                    }
                }
                let item = chunk.targets[target]
                let notification: APNsNotification
                do {
                    notification = try sender.factory.notification(.init(
                        token: item.token, pushType: chunk.pushType, priority: chunk.priority, expiration: chunk.expiration,
                        collapseID: chunk.collapseID, apnsID: nil, payload: item.payload ?? chunk.payload ?? "{}"))
                } catch {
                    resolve(target, .failed(JobWorker.label(error.reason)))
                    context.metrics.deadLetter(app: chunk.app, lane: "campaign", reason: JobWorker.label(error.reason)).increment()
                    context.tally.add(context.tally.failed)
                    continue
                }
                // A target imported from registered tokens keeps its token's environment; a
                // file import has the campaign's; else the app's.
                let environment = sender.environment(job: item.environment ?? chunk.environment, registered: nil)
                let client: APNsClient
                do {
                    client = try sender.client(for: environment, lane: .campaign)
                } catch let missing as AppSender.NoCredentials {
                    resolve(target, .failed(JobWorker.label(missing.description)))
                    context.metrics.deadLetter(app: chunk.app, lane: "campaign", reason: JobWorker.label(missing.description)).increment()
                    context.tally.add(context.tally.failed)
                    continue
                } catch {
                    context.logger.error("cannot set up sending for app \(chunk.app) to \(environment.rawValue): \(error)", ("app", .string(chunk.app)))
                    stopSubmitting = true
                    break
                }
                do {
                    try client.submit(notification, tag: CompletionQueue.tag(worker: index, generation: generation, index: target))
                } catch {
                    context.logger.error("cannot build a request for app \(chunk.app): \(error)", ("app", .string(chunk.app)))
                    stopSubmitting = true
                    break
                }
                environments[target] = environment
                attempts[target] += 1
                inFlight += 1
            }
            let nothingLeft = next >= count && retries.isEmpty
            if inFlight == 0 && (stopSubmitting || nothingLeft) { break }

            let now = RateLimiter.monotonicSeconds()
            var wait = 0.5
            if inFlight == 0, let soonest = retries.map(\.at).min() { wait = max(0.001, min(wait, soonest - now)) }
            for result in completions.take(until: .now() + wait)
            where CompletionQueue.generation(of: result.tag) == generation & 0xFF_FFFF {
                let target = CompletionQueue.index(of: result.tag)
                guard target < count, resolutions[target] == nil else { continue }
                inFlight -= 1
                let outcome = sender.outcome(of: result, environment: environments[target])
                switch policy.verdict(for: outcome, attempt: attempts[target], expiration: expiration,
                                      firstAttemptAt: firstAttempt, now: Date(), random: &random) {
                case .delivered:
                    resolve(target, .sent)
                    sender.countResponse(status: 200, reason: "none", environment: environments[target])
                    sender.countSent(pushType: chunk.pushType, lane: .campaign, environment: environments[target])
                    context.tally.add(context.tally.sent)
                case .prune(let status, let reason, let timestamp):
                    resolve(target, .pruned(reason))
                    prunes.append(TokenPrune(app: chunk.app, token: chunk.targets[target].token, reason: reason, apnsTimestamp: timestamp,
                                             environment: environments[target].rawValue))
                    sender.countResponse(status: status, reason: reason, environment: environments[target])
                    context.metrics.tokenPruned(app: chunk.app, environment: environments[target].rawValue, reason: reason).increment()
                    context.tally.add(context.tally.pruned)
                case .retry(let at, let reason, let refresh, let countsAsAttempt):
                    // A send APNs never answered does not use up the target's attempt budget.
                    if !countsAsAttempt { attempts[target] -= 1 }
                    retries.append(Retry(at: RateLimiter.monotonicSeconds() + max(0, at.timeIntervalSinceNow), target: target))
                    context.metrics.retry(app: chunk.app, lane: "campaign", reason: JobWorker.label(reason)).increment()
                    context.tally.add(context.tally.retried)
                    if refresh, let key = sender.tokenKey { sender.tokens.reportExpired(key) }
                case .dead(let status, let reason):
                    resolve(target, .failed(JobWorker.label(reason)))
                    sender.countResponse(status: status, reason: JobWorker.label(reason), environment: environments[target])
                    context.metrics.deadLetter(app: chunk.app, lane: "campaign", reason: JobWorker.label(reason)).increment()
                    context.tally.add(context.tally.failed)
                case .pauseApp(let reason):
                    context.pause(sender, reason: reason)
                    stopSubmitting = true
                }
            }
            if !leaseLost, RateLimiter.monotonicSeconds() - lastCheckpoint >= checkpointInterval { try checkpoint() }
        }

        if leaseLost { return }
        advance()
        if !prunes.isEmpty { try TokenStore().prune(connection, prunes) }
        if watermark == count {
            try store.finish(connection, chunk, progress)
        } else {
            try store.release(connection, chunk, progress)
        }
        countProcessed(progress, app: chunk.app)
    }

    private func countProcessed(_ progress: ChunkProgress, app: String) {
        if progress.sent > 0 {
            context.metrics.campaignTargets(app: app, status: "sent").increment(by: UInt64(progress.sent))
        }
        if progress.failed > 0 {
            context.metrics.campaignTargets(app: app, status: "failed").increment(by: UInt64(progress.failed))
        }
    }
}
