import Locking
import Posix
import QueueStore

/// Keeps the leases of the chunks this instance's campaign workers are sending, on a thread and
/// a database connection of its own.
///
/// A worker's checkpoint records progress and extends its lease too, but a worker can be held
/// longer than a lease between two checkpoints without being stuck: blocked in the engine's
/// submit while the window is full around an outage, waiting for the answers of parked retries
/// during a 429/503 storm, or waiting on a row another session holds. The chunks' leases then
/// ran out and another instance took them over and sent them again. The keeper extends them
/// every `interval` whatever the worker is doing, as long as the worker is alive: it beats at
/// least once per loop, and every wait of its loop is bounded (the engine answers each request
/// by its answer deadline, and the worker waits that and 5 s more at most). A worker silent for
/// longer than `stallSeconds` is hung: its chunks are no longer extended, their leases run out
/// and another worker resumes them from their checkpoints.
///
/// Thread rule: `hold`, `drop` and `beat` from the workers' threads; the rest on the keeper's.
final class LeaseKeeper: @unchecked Sendable {
    /// Who `RefusedWritesLog` speaks of.
    static let refusedWritesName = "campaign lease keeper"

    private struct State {
        var held: [CampaignStore.HeldChunk: Int] = [:]
        /// Monotonic seconds of each worker's last beat.
        var beats: [Int: Double] = [:]
        /// Workers reported as hung, so each stall is told once.
        var stalled: Set<Int> = []
    }

    private let context: PipelineContext
    private let leaseSeconds: Double
    private let interval: Double
    let stallSeconds: Double
    private let state: Lock<State>
    /// Tells the workers at once of a pause or a cancel of a campaign whose chunks are held here.
    let stops: CampaignStopWatch
    private let store = CampaignStore()
    private let stopped = Semaphore()
    private let finished = Semaphore()

    init(context: PipelineContext, leaseSeconds: Double, interval: Double) {
        self.context = context
        self.leaseSeconds = leaseSeconds
        self.interval = interval
        stallSeconds = context.config.apns.answerWaitSeconds + 5
        let state = Lock(State())
        self.state = state
        stops = CampaignStopWatch(context: context) { state.withLock { Set($0.held.keys.map(\.campaignID)) } }
    }

    func start() {
        PosixThread.detach(name: "pushd-leases") { [self] in
            run()
            finished.signal()
        }
        stops.start()
    }

    func stop() {
        stopped.signal()
        stops.stop()
        finished.wait(timeout: 5)
    }

    /// `worker` holds `chunk` until `drop`: its lease is extended while the worker is alive.
    func hold(_ chunk: CampaignChunk, worker: Int) {
        let now = RateLimiter.monotonicSeconds()
        state.withLock {
            $0.held[Self.key(chunk)] = worker
            $0.beats[worker] = now
        }
    }

    func drop(_ chunk: CampaignChunk) {
        _ = state.withLock { $0.held.removeValue(forKey: Self.key(chunk)) }
    }

    /// The worker is alive: called at least once per pass of its loops.
    func beat(worker: Int) {
        let now = RateLimiter.monotonicSeconds()
        state.withLock { $0.beats[worker] = now }
    }

    private static func key(_ chunk: CampaignChunk) -> CampaignStore.HeldChunk {
        CampaignStore.HeldChunk(campaignID: chunk.campaignID, chunk: chunk.chunk, owner: chunk.owner)
    }

    /// The chunks of live workers, and the workers newly found hung.
    private func due(now: Double) -> (chunks: [CampaignStore.HeldChunk], hung: [(worker: Int, silent: Double, chunks: Int)]) {
        state.withLock { state in
            var chunks: [CampaignStore.HeldChunk] = []
            var hung: [Int: Int] = [:]
            for (chunk, worker) in state.held {
                let silent = now - (state.beats[worker] ?? now)
                if silent <= stallSeconds {
                    chunks.append(chunk)
                    state.stalled.remove(worker)
                } else if !state.stalled.contains(worker) {
                    hung[worker, default: 0] += 1
                }
            }
            for worker in hung.keys { state.stalled.insert(worker) }
            return (chunks, hung.map { (worker: $0.key, silent: now - (state.beats[$0.key] ?? now), chunks: $0.value) })
        }
    }

    private func run() {
        var connection: PGConnection?
        var failures = 0
        // A spell of refused writes the keeper has told of is open (`RefusedWritesLog`).
        var refusing = false
        while !stopped.wait(timeout: failures == 0 ? interval : min(interval * Double(failures + 1), leaseSeconds / 3)) {
            let (chunks, hung) = due(now: RateLimiter.monotonicSeconds())
            for stall in hung {
                context.metrics.campaignLeaseStalls.increment()
                context.logger.warning("campaign worker \(stall.worker) has shown no progress for \(Int(stall.silent)) s: the leases of its \(stall.chunks) chunks are no longer extended, and another worker resumes them from their checkpoints when they run out",
                                       ("event", "campaign_worker_stalled"), ("worker", .int(Int64(stall.worker))),
                                       ("silent_s", .int(Int64(stall.silent))), ("chunks", .int(Int64(stall.chunks))))
            }
            // Holding nothing, the keeper writes nothing; but a spell of refused writes it told of
            // must end when writes are taken again, not stay open until the next spell, hours
            // later, is told as the same one ("still refuses writes, for 10800 s now").
            guard !chunks.isEmpty || refusing else { continue }
            let started = RateLimiter.monotonicSeconds()
            do {
                if connection == nil || connection?.isOpen == false {
                    // Never waits behind a lock or a slow statement for longer than a round.
                    connection = try QueueSession.connect(url: context.config.databaseURL, applicationName: "pushd-leases",
                                                          settings: ["lock_timeout": "1s", "statement_timeout": "\(max(1, Int(leaseSeconds / 3)))s"])
                }
                if chunks.isEmpty {
                    try Self.requireWritable(connection!)
                } else {
                    try store.renewLeases(connection!, chunks, leaseSeconds: leaseSeconds)
                }
                failures = 0
                // Looking on, holding nothing, until the spell is told over.
                refusing = context.refusedWrites.passed(Self.refusedWritesName, started: started)
            } catch {
                failures += 1
                // A look that found the database still read-only ran no statement that failed.
                if !(chunks.isEmpty && RefusedWritesLog.refusesWrites(error)) { context.databaseError(error) }
                // Read-only, the workers' checkpoints fail too: what keeps the chunks then is
                // that no other worker can lease them either.
                let meanwhile = chunks.isEmpty
                    ? "the keeper holds no chunk now, and looks each round whether the database takes writes again"
                    : "the leases of the \(chunks.count) chunk(s) being sent are not extended, and the workers' checkpoints are not written either; no other worker can take the chunks over while no write goes through, and their workers write them once writes are taken again"
                if context.refusedWrites.failed(Self.refusedWritesName, meanwhile: meanwhile, error: error) {
                    refusing = true
                    connection?.close()
                    connection = nil
                    continue
                }
                // The database is away (a restart, a lost session): the workers say so; the keeper
                // asks again next round.
                if chunks.isEmpty {
                    connection?.close()
                    connection = nil
                    continue
                }
                context.logger.warning("campaign lease keeper: cannot extend the leases of \(chunks.count) chunks: \(error); the workers' checkpoints still extend them",
                                       ("event", "campaign_lease_renewal_failed"), ("chunks", .int(Int64(chunks.count))))
                connection?.close()
                connection = nil
            }
        }
        connection?.close()
    }

    /// Throws the refusal a write would meet (SQLSTATE 25006) when a new transaction on
    /// `connection` is read-only (`DatabaseWritability`): the keeper's look, while it holds no
    /// chunk, at whether a spell of refused writes has ended. A read, so it costs no write.
    private static func requireWritable(_ connection: PGConnection) throws {
        let writability = try DatabaseWritability.read(connection)
        guard let cause = writability.cause else { return }
        throw PGError(code: .readOnlySQLTransaction, message: cause)
    }
}
