import APNs
import Dispatcher
import Posix
import QueueStore

/// One leased chunk that a campaign worker is sending: what became of each target, which
/// wait for a retry, and the progress not yet checkpointed.
///
/// A worker sends several chunks at once: it leases the next while the answers of the
/// previous are still on their way, so a round trip of 50 or 150 ms does not empty the
/// window at every chunk's end. Each run has its own generation, which the tags of its
/// requests carry, so an answer finds its run.
///
/// Thread rule: touched only on its worker's thread.
final class ChunkRun {
    enum Resolution {
        case sent
        case failed(String)
        case pruned(String)
        /// Waiting for a retry in `pushd.campaign_retries`; counted when it is settled there.
        case parked
    }

    struct Retry {
        /// Monotonic seconds.
        var at: Double
        var target: Int
        var dueAt = Timestamp()
        var reason = ""
        /// Set aside while APNs took none of the lane's notifications (`RetryPolicy.decideWhileDown`):
        /// due at once when the lane answers again (`releaseRetriesWaitingForAPNs`).
        var waitsForAPNs = false
    }

    let chunk: CampaignChunk
    let sender: AppSender
    let generation: UInt32
    let leasedAt = Timestamp()
    let expiration: Int64?
    /// The campaign's rate cap (its own, else its app's, else the default), nil for none.
    let rate: Int?
    /// The apns-topic of its notifications: a TopicDisallowed answer holds it.
    let topic: String
    /// The chunk's app, push type and target count, read for every answer: kept apart, since
    /// reading them through `chunk` copied the whole chunk (a retain of each of its arrays
    /// and strings, and a release after) per answer.
    let app: String
    let pushType: String
    let count: Int

    var progress: ChunkProgress
    var resolutions: [Resolution?]
    var attempts: [Int]
    /// The environment each target is sent to (its host, its answer's meaning, its parking).
    var environments: [PushdConfig.Environment]
    /// Every target of the run (from the lease's checkpoint on) goes to one environment: the
    /// chunk can stop and wait for it while APNs is down there (`CampaignWorker.stopWhileDown`).
    let singleEnvironment: Bool
    /// The `authorization` value each target's last request carried: an answer about the
    /// provider token judges that one, which may have been replaced since.
    var authorizations: [String?]
    /// When each target was first sent by this run, in wall seconds (0 until then): its retry
    /// window and outage budget count from there, and a retry keeps it. Not the lease: a capped
    /// chunk sends its last target size ÷ rate seconds after it, and a leased chunk may wait
    /// behind others in the engine, so a window counted from the lease ran out before a late
    /// target's first answer, and its first 503 dead-lettered it without a retry.
    var firstSentAt: [Double]
    /// Whether a request of each target may have reached APNs: an answer, or a send that
    /// ended without one, came for it (`DispatchResult.mayHaveReachedServer`: not the engine
    /// handing it back unsent, nor a connection that could not be set up).
    var reachedAPNs: [Bool]
    var retries: [Retry] = []
    /// Targets of an environment this instance has no credentials for and another live
    /// instance has: parked with the retries when the run ends, due at once, for that
    /// instance's parked claim (this one's leaves them alone). Until then they hold the
    /// watermark, so a run that never ends them leaves them to the chunk's next lease.
    var left: [Retry] = []
    var parked: [ParkedTarget] = []
    var prunes: [TokenPrune] = []
    /// What a chunk's write records besides its prunes (`CampaignWorker.write`).
    enum Record: String {
        /// Its progress, which extends its lease.
        case checkpoint
        /// Its last progress, the chunk done (its waiting targets parked).
        case finish
        /// Its progress, the chunk given up at its watermark (its waiting targets parked).
        case release
    }

    /// The transaction that was writing the first `prunes` of `prunes` and the run's progress
    /// (`record`), when its session ended (`CampaignWorker.write`): whether it committed is
    /// asked on the next session (`CampaignWorker.settle`).
    struct WriteInDoubt {
        let transaction: Int64
        let backend: Int32
        let prunes: Int
        let record: Record
        /// What the prune statement answered; nil, it had not.
        var outcome: PruneOutcome?
        /// The progress it wrote: the run's progress then (`base`, the prunes' counts apart),
        /// the counts written and what the write answered. nil: it had not answered (then the
        /// COMMIT was never sent).
        var recorded: (base: ChunkProgress, counted: ChunkProgress, directive: ChunkDirective)?
        /// When (monotonic seconds) it was first found still running on the server after its
        /// session ended, having been told to end then; nil before.
        var runningSince: Double?
    }
    var writeInDoubt: WriteInDoubt?
    /// Every target before it is resolved.
    var watermark = 0
    /// The next target never sent.
    var next = 0
    var inFlight = 0
    var stopSubmitting = false
    /// A capped run's target whose send is reserved for monotonic time `at` (`RateLimiter`):
    /// the worker sends its other chunks, and leases more, until then.
    var paced: (target: Int, at: Double)?
    /// Counted in `RateLimiter.pacedCampaigns` while its fresh targets are being paced.
    var pacing = false
    /// It stopped because a scope it sends to is held: the campaign is not leased again for a while.
    var held = false
    /// It stopped because the lane's connections for a target's environment could not be set
    /// up: the campaign is not leased again until that target's retry is due.
    var setupFailed = false
    /// It stopped because a request could not be built (the provider token could not be
    /// signed): its campaign keeps the time its lease reserved at the cap.
    var buildFailed = false
    /// A chunk with targets of both environments goes on with the other one: the environments
    /// whose connections could not be set up, until when (monotonic seconds) their targets are
    /// set aside without trying again, and the error they wait with (`cannot connect: …`).
    var setupFailedUntil: [PushdConfig.Environment: (at: Double, failure: String)] = [:]
    /// It stopped before a fresh target APNs takes nothing for (`CampaignWorker.stopWhileDown`):
    /// released at that target, which stays in the chunk unsent with the ones after it. Its
    /// worker leases other chunks meanwhile, as it does once every target was sent.
    var waitsForAPNs = false
    var leaseLost = false
    /// Its finish or release committed (`CampaignWorker.finished`): the run is done with.
    var finished = false
    var lastCheckpoint = RateLimiter.monotonicSeconds()
    /// The chunk's position as its last checkpoint wrote it: a worker that takes the chunk
    /// over resumes there.
    var checkpointedPosition: Int
    /// Not finished before this monotonic time: its last finish found the campaign's row locked.
    var finishNotBefore = 0.0
    /// Per environment, the chunk's notification checked once and its headers packed once,
    /// for targets with the campaign's payload: each request then costs its path alone.
    var templates: [PushdConfig.Environment: NotificationTemplate] = [:]

    init(chunk: CampaignChunk, sender: AppSender, generation: UInt32, rate: Int?) {
        self.chunk = chunk
        self.sender = sender
        self.generation = generation
        self.rate = rate
        topic = sender.factory.topic(for: PushType(rawValue: chunk.pushType) ?? .alert)
        app = chunk.app
        pushType = chunk.pushType
        count = chunk.targets.count
        expiration = chunk.expiration.map { Int64($0.timeIntervalSince1970) }
        progress = ChunkProgress(position: chunk.startIndex)
        checkpointedPosition = chunk.startIndex
        resolutions = [Resolution?](repeating: nil, count: chunk.targets.count)
        attempts = [Int](repeating: 0, count: chunk.targets.count)
        authorizations = [String?](repeating: nil, count: chunk.targets.count)
        firstSentAt = [Double](repeating: 0, count: chunk.targets.count)
        reachedAPNs = [Bool](repeating: false, count: chunk.targets.count)
        // A target imported from registered tokens keeps its token's environment; a file
        // import has the campaign's; else the app's. A target parked before its first send
        // (a pause or a hold seen first, a throttled token) is parked with it too.
        let environments = (0..<chunk.targets.count).map {
            sender.environment(job: chunk.targets.environment(at: $0) ?? chunk.environment, registered: nil)
        }
        self.environments = environments
        singleEnvironment = environments.dropFirst().allSatisfy { $0 == environments.first }
    }

    /// Every target was sent once and none waits for a retry here.
    var submittedAll: Bool { next >= count && retries.isEmpty && paced == nil }

    /// Nothing is in flight and nothing more will be sent: the run can be finished or released.
    var isDone: Bool { inFlight == 0 && (stopSubmitting || submittedAll) }

    /// Everything was sent once, nothing is in flight and what is left waits for a retry:
    /// those targets are parked and the worker moves on.
    var shouldPark: Bool { !stopSubmitting && next >= count && inFlight == 0 && !retries.isEmpty && paced == nil }

    func resolve(_ target: Int, _ resolution: Resolution) {
        resolutions[target] = resolution
    }

    /// Makes due at once the retries set aside while APNs was down for their environment and
    /// that `isDown` says it answers again: the outage's `apns_back` reaches parked targets
    /// only, and these would wait out the rest of their long delay.
    func releaseRetriesWaitingForAPNs(isDown: (PushdConfig.Environment) -> Bool) {
        // Asked once per environment, not once per retry.
        var looked: [PushdConfig.Environment: Bool] = [:]
        for index in retries.indices where retries[index].waitsForAPNs {
            let environment = environments[retries[index].target]
            let down = looked[environment] ?? {
                let down = isDown(environment)
                looked[environment] = down
                return down
            }()
            if down { continue }
            retries[index].at = 0
            retries[index].dueAt = Timestamp()
            retries[index].waitsForAPNs = false
        }
    }

    /// The next target to send at monotonic time `now`: a due retry first, then a fresh one.
    func takeNextTarget(now: Double) -> Int? {
        if let due = retries.firstIndex(where: { $0.at <= now }) {
            return retries.remove(at: due).target
        }
        guard next < count else { return nil }
        defer { next += 1 }
        return next
    }

    /// The run stops before `target`, taken for sending and not sent: a fresh target, the last
    /// one taken and never sent, is given back to the chunk (released at it, the next claimer
    /// sends it as new), and true is returned. A retry come due (sent before, though it may be
    /// the last one taken) stays the run's, false: given back, its attempts and its first send
    /// were forgotten, and the chunk sent it again as new with a fresh retry window.
    func giveBackUnsent(_ target: Int) -> Bool {
        guard target == next - 1, firstSentAt[target] == 0 else { return false }
        next -= 1
        return true
    }

    /// Takes the retry to `environment` that comes due first, due or not.
    func takeSoonestRetry(to environment: PushdConfig.Environment) -> Retry? {
        guard let soonest = retries.indices.filter({ environments[retries[$0].target] == environment })
            .min(by: { retries[$0].at < retries[$1].at }) else { return nil }
        return retries.remove(at: soonest)
    }

    /// Counts a send of `target` to `environment` with `authorization`.
    func sent(_ target: Int, to environment: PushdConfig.Environment, authorization: String?) {
        environments[target] = environment
        authorizations[target] = authorization
        attempts[target] += 1
        inFlight += 1
        if firstSentAt[target] == 0 { firstSentAt[target] = Timestamp().timeIntervalSince1970 }
    }

    /// When `target` was first sent by this run; one never sent (parked or left unsent) has its
    /// window start now.
    func firstAttempt(of target: Int) -> Timestamp {
        let sentAt = firstSentAt[target]
        return sentAt == 0 ? Timestamp() : Timestamp(timeIntervalSince1970: sentAt)
    }

    /// `target`, answered with a pause or a hold of what it was sent for, waits to be parked
    /// with the chunk's other retries: the send does not count as an attempt, and the parked
    /// lane keeps it until the pause or the hold ends.
    func waitOut(_ target: Int, reason: String) {
        attempts[target] -= 1
        retries.append(Retry(at: RateLimiter.monotonicSeconds(), target: target, dueAt: Timestamp(), reason: reason))
    }

    /// `target`, of an environment this instance cannot send to, is left to an instance that
    /// can: unsent, no attempt spent, parked with the chunk's retries.
    func leave(_ target: Int, reason: String) {
        left.append(Retry(at: 0, target: target, dueAt: Timestamp(), reason: reason))
    }

    /// The environment of the run's last submitted target when it waits here as a retry the
    /// engine handed back unsent and it never reached APNs: the tail `giveBackUnsentTail`
    /// gives back to the chunk. nil without one.
    var unsentTailEnvironment: PushdConfig.Environment? {
        guard next > watermark, resolutions[next - 1] == nil, !reachedAPNs[next - 1],
              retries.contains(where: { $0.target == next - 1 && $0.reason.hasPrefix(Self.unsentReasonPrefix) }) else { return nil }
        return environments[next - 1]
    }

    /// Gives the newest targets back to the chunk when APNs never saw them: the run's last
    /// submitted targets, from the end back to the first that is not a retry handed back
    /// unsent (`not sent: `) or that may have reached APNs before (`reachedAPNs`: answered, say
    /// 503 before the outage was seen and set aside since, or sent without an answer), which
    /// keeps its retry window as a parked row. At an outage's start the engine hands back
    /// every request still waiting for a connection, the newest of the chunk: they stay in it
    /// with the targets after them (released at the first of them), not parked one row each.
    /// Returns how many were given back.
    @discardableResult
    func giveBackUnsentTail() -> Int {
        guard paced == nil, !retries.isEmpty else { return 0 }
        var unsent = Set<Int>()
        for retry in retries where retry.reason.hasPrefix(Self.unsentReasonPrefix) && !reachedAPNs[retry.target] {
            unsent.insert(retry.target)
        }
        var start = next
        while start > watermark, resolutions[start - 1] == nil, unsent.contains(start - 1) { start -= 1 }
        guard start < next else { return 0 }
        retries.removeAll { $0.target >= start }
        let given = next - start
        next = start
        return given
    }

    /// What the reason of a target handed back without reaching APNs begins with (the
    /// engine's `NotSent`, and a target set aside while APNs is down).
    static let unsentReasonPrefix = "not sent: "

    /// Moves the retries waiting here and the targets left to other instances to `parked`,
    /// for the transaction that finishes or releases the chunk.
    func parkRetries() {
        // A paced target of a run that stopped waits unsent, as a retry due now.
        if let paced {
            retries.append(Retry(at: 0, target: paced.target))
            self.paced = nil
        }
        for retry in retries + left {
            let target = chunk.targets[retry.target]
            resolve(retry.target, .parked)
            parked.append(ParkedTarget(campaignID: chunk.campaignID, chunk: chunk.chunk, position: target.index,
                                       token: target.token, payload: target.payload, dueAt: retry.dueAt,
                                       attempts: attempts[retry.target], firstAttemptAt: firstAttempt(of: retry.target),
                                       lastError: retry.reason, environment: environments[retry.target].rawValue))
        }
        retries.removeAll()
        left.removeAll()
    }

    /// Takes off the progress what a checkpoint wrote (`base`), keeping what was answered since.
    func checkpointed(_ base: ChunkProgress) {
        progress.sent -= base.sent
        for (reason, count) in base.failedByReason {
            let left = progress.failedByReason[reason, default: 0] - count
            progress.failedByReason[reason] = left > 0 ? left : nil
        }
        progress.pruned -= base.pruned
        progress.keptTokens -= base.keptTokens
    }

    /// Moves the watermark over every resolved target and adds them to `progress`.
    func advance() {
        while watermark < count, let resolution = resolutions[watermark] {
            switch resolution {
            case .sent: progress.sent += 1
            case .failed(let reason), .pruned(let reason): progress.failedByReason[reason, default: 0] += 1
            case .parked: break
            }
            watermark += 1
        }
        progress.position = chunk.startIndex + watermark
    }

    /// Targets past the last checkpoint that APNs answered for good (sent, failed, pruned):
    /// a worker that takes the chunk over sends them again.
    var answeredSinceCheckpoint: Int {
        resolutions[min(count, max(0, checkpointedPosition - chunk.startIndex))...].reduce(0) { answered, resolution in
            switch resolution {
            case .sent, .failed, .pruned: answered + 1
            case .parked, nil: answered
            }
        }
    }

    /// The monotonic time of the soonest retry, nil when none waits.
    var soonestRetry: Double? { retries.map(\.at).min() }
}
