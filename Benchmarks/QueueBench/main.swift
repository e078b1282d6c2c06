import Foundation
import Glibc
import QueueStore
import Synchronization

// QueueBench: the PostgreSQL queue's figures, each next to a reference run in the same
// process: campaign import (against a plain one-row-per-target COPY), campaign reads,
// transactional claim + ack (against a bare DELETE … RETURNING loop), the same claim
// with a backlog of another app's due jobs ahead of ours (a mixed fleet), LISTEN/NOTIFY
// latency, and throughput after many jobs have passed through the table.
//
//   scripts/with-postgres.sh .build/release/QueueBench [--targets N] [--jobs N] [--bloat-jobs N]
//       [--latency-count N] [--rate N] [--batch N] [--foreign-jobs N]
//       [--only campaign,claim,mixed,latency,bloat] [--database-url URL]

struct Options {
    var url = ProcessInfo.processInfo.environment["PUSHD_DATABASE_URL"] ?? ""
    var targets = 1_000_000
    var jobs = 200_000
    var bloatJobs = 1_000_000
    var latencyCount = 10_000
    var rate = 1_000
    var batch = 500
    var foreignJobs = 200_000
    var phases: Set<String> = ["campaign", "claim", "mixed", "latency", "bloat"]

    static func parse(_ arguments: [String]) throws -> Options {
        var options = Options()
        var index = 0
        func value(_ name: String) throws -> String {
            guard index + 1 < arguments.count else { throw QueueError("\(name) needs a value") }
            index += 1
            return arguments[index]
        }
        func number(_ name: String) throws -> Int {
            let text = try value(name)
            guard let number = Int(text.replacingOccurrences(of: "_", with: "")), number > 0 else {
                throw QueueError("\(name) must be a positive whole number, got '\(text)'")
            }
            return number
        }
        while index < arguments.count {
            switch arguments[index] {
            case "--database-url": options.url = try value("--database-url")
            case "--targets": options.targets = try number("--targets")
            case "--jobs": options.jobs = try number("--jobs")
            case "--bloat-jobs": options.bloatJobs = try number("--bloat-jobs")
            case "--latency-count": options.latencyCount = try number("--latency-count")
            case "--rate": options.rate = try number("--rate")
            case "--batch": options.batch = try number("--batch")
            case "--foreign-jobs": options.foreignJobs = try number("--foreign-jobs")
            case "--only":
                let names = Set(try value("--only").split(separator: ",").map(String.init))
                let unknown = names.subtracting(options.phases)
                guard unknown.isEmpty else { throw QueueError("--only takes campaign, claim, mixed, latency, bloat; got \(unknown.sorted())") }
                options.phases = names
            default: throw QueueError("unknown argument '\(arguments[index])'")
            }
            index += 1
        }
        guard !options.url.isEmpty else { throw QueueError("no database: pass --database-url or set PUSHD_DATABASE_URL") }
        return options
    }
}

func now() -> Double {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
}

func figure(_ value: Double, _ decimals: Int = 0) -> String { String(format: "%.\(decimals)f", value) }

func percentile(_ sorted: [Double], _ p: Double) -> Double {
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.up)) - 1)]
}

func token(_ n: Int) -> String {
    let hex = String(n, radix: 16)
    return String(repeating: "0", count: 64 - hex.count) + hex
}

func databaseURL(_ url: String, name: String) -> String {
    guard let scheme = url.range(of: "://"), let slash = url[scheme.upperBound...].firstIndex(of: "/") else { return url + "/" + name }
    let query = url[slash...].firstIndex(of: "?").map { String(url[$0...]) } ?? ""
    return String(url[..<slash]) + "/" + name + query
}

func count(_ connection: PGConnection, _ sql: String) throws -> Int {
    try connection.query(sql).require(Int.self, row: 0, column: 0)
}

// MARK: Campaign import and read

func campaignBenchmark(_ url: String, _ options: Options) throws {
    let connection = try QueueSession.connect(url: url, applicationName: "queuebench", settings: ["statement_timeout": "0"])
    let path = NSTemporaryDirectory() + "queuebench-targets-\(getpid()).txt"
    defer { unlink(path) }
    do {
        guard let file = fopen(path, "w") else { throw QueueError("cannot write \(path)") }
        for n in 1...options.targets { fputs(token(n) + "\n", file) }
        fclose(file)
    }
    print("campaign import: \(options.targets) targets from a file")
    try connection.execute(script: "CHECKPOINT")

    let store = CampaignStore()
    let id = try store.create(connection, NewCampaign(app: "bench", name: "import", payload: #"{"aps":{"alert":"Sale"}}"#))
    var start = now()
    let imported = try store.importTargets(connection, campaignID: id, fromFile: path).imported
    let importSeconds = now() - start
    let importRate = Double(imported) / importSeconds
    try connection.execute(script: "CHECKPOINT")

    try connection.execute(script: "CREATE TABLE bench_plain_targets (campaign_id bigint, token text)")
    start = now()
    try connection.transaction {
        try connection.copyIn("COPY bench_plain_targets (campaign_id, token) FROM STDIN") { writer in
            guard let file = fopen(path, "r") else { throw QueueError("cannot read \(path)") }
            defer { fclose(file) }
            var line = [CChar](repeating: 0, count: 256)
            let prefix = Array("\(id)\t".utf8)
            while fgets(&line, Int32(line.count), file) != nil {
                let length = strlen(line)
                try writer.writeRaw(prefix + line[0..<length].map { UInt8(bitPattern: $0) })
            }
        }
    }
    let plainSeconds = now() - start
    let plainRate = Double(options.targets) / plainSeconds
    let chunkBytes = try count(connection, "SELECT pg_total_relation_size('pushd.campaign_targets') + pg_total_relation_size('pushd.campaign_chunks')")
    let plainBytes = try count(connection, "SELECT pg_total_relation_size('bench_plain_targets')")
    try connection.execute(script: "DROP TABLE bench_plain_targets")
    // Without this, reading evicts the dirty pages the imports left behind and pays for their writes.
    try connection.execute(script: "CHECKPOINT")
    print("  pushd chunked import: \(figure(importSeconds, 2)) s, \(figure(importRate)) targets/s, \(chunkBytes / 1_048_576) MiB on disk")
    print("  reference plain COPY (one row per target, no index): \(figure(plainSeconds, 2)) s, \(figure(plainRate)) rows/s, \(plainBytes / 1_048_576) MiB")
    print("  ratio pushd/reference: \(figure(importRate / plainRate, 2))  (target ≥ 200000 targets/s)")

    try store.start(connection, id: id)
    let figures = try readCampaign(connection, id: id, store: store)
    print("campaign read: \(figures.targets) targets in \(figures.chunks) chunks from one connection, lease and checkpoint commits asynchronous (pushd's default)")
    print("  lease + read: \(figure(figures.leaseRate)) targets/s (target ≥ 500000), \(figure(figures.leaseMilliseconds, 3)) ms per chunk")
    print("  lease + read per chunk through the campaign, by tenths: \(figures.leaseMillisecondsByTenth.map { figure($0, 2) }.joined(separator: " ")) ms")
    print("  with two checkpoints per chunk (one mid-way, one finishing): \(figure(figures.cycleRate)) targets/s; checkpoint \(figure(figures.checkpointMilliseconds, 3)) ms each")
    let campaign = try store.campaign(connection, id: id)
    print("  status afterwards: \(campaign?.status.rawValue ?? "?"), sent \(campaign?.sent ?? 0) of \(campaign?.targets ?? 0)")
    start = now()
    let dropped = try store.dropTargets(connection, id: id)
    print("  dropping the \(dropped) targets of the finished campaign: \(figure((now() - start) * 1000, 1)) ms")

    let syncStore = CampaignStore(synchronousBookkeeping: true)
    let syncID = try syncStore.create(connection, NewCampaign(app: "bench", name: "sync", payload: #"{"aps":{"alert":"Sale"}}"#))
    try syncStore.importTargets(connection, campaignID: syncID, targets: (1...min(options.targets, 100_000)).map { (token($0), nil) })
    try syncStore.start(connection, id: syncID)
    start = now()
    let synchronous = try readCampaign(connection, id: syncID, store: syncStore)
    print("  reference with every lease and checkpoint committed synchronously (\(synchronous.targets) targets): lease + read \(figure(synchronous.leaseRate)) targets/s, full cycle \(figure(synchronous.cycleRate)) targets/s, checkpoint \(figure(synchronous.checkpointMilliseconds, 3)) ms each")
}

struct ReadFigures {
    var targets = 0
    var chunks = 0
    var leaseRate = 0.0
    var leaseMilliseconds = 0.0
    var cycleRate = 0.0
    var checkpointMilliseconds = 0.0
    var leaseMillisecondsByTenth: [Double] = []
}

func readCampaign(_ connection: PGConnection, id: Int64, store: CampaignStore) throws -> ReadFigures {
    var figures = ReadFigures()
    var checkpointSeconds = 0.0
    var leaseSeconds = 0.0
    var leaseTimes = [Double]()
    let start = now()
    while true {
        let leaseStart = now()
        guard let chunk = try store.leaseChunk(connection, owner: "bench", apps: ["bench"], leaseSeconds: 60) else { break }
        leaseSeconds += now() - leaseStart
        leaseTimes.append(now() - leaseStart)
        figures.targets += chunk.targets.count
        figures.chunks += 1
        let half = chunk.size / 2
        let checkpointStart = now()
        _ = try store.checkpoint(connection, chunk, ChunkProgress(position: half, sent: half), leaseSeconds: 60)
        _ = try store.finish(connection, chunk, ChunkProgress(position: chunk.size, sent: chunk.size - half))
        checkpointSeconds += now() - checkpointStart
    }
    let total = now() - start
    figures.leaseRate = Double(figures.targets) / leaseSeconds
    figures.leaseMilliseconds = leaseSeconds / Double(max(1, figures.chunks)) * 1000
    figures.cycleRate = Double(figures.targets) / total
    figures.checkpointMilliseconds = checkpointSeconds / Double(max(1, figures.chunks)) / 2 * 1000
    let tenth = max(1, leaseTimes.count / 10)
    figures.leaseMillisecondsByTenth = stride(from: 0, to: leaseTimes.count, by: tenth).map { first in
        let slice = leaseTimes[first..<min(leaseTimes.count, first + tenth)]
        return slice.reduce(0, +) / Double(slice.count) * 1000
    }
    return figures
}

// MARK: Transactional lane

func insertJobs(_ connection: PGConnection, _ count: Int, app: String = "bench", age: Int = 0) throws {
    var remaining = count
    var offset = 0
    while remaining > 0 {
        let size = min(remaining, 100_000)
        try connection.query("""
            INSERT INTO pushd.jobs (app, device_token, payload, run_at)
            SELECT $3, lpad(to_hex(g), 64, '0'), '{"aps":{"alert":{"title":"Shipped","body":"Order on its way"}}}',
                   now() - make_interval(secs => $4)
            FROM generate_series($1::bigint, $2::bigint) g
            """, [offset + 1, offset + size, app, age])
        offset += size
        remaining -= size
    }
}

/// Claim + settle (all delivered) until the lane is empty; returns jobs per second.
func drainWithQueue(_ connection: PGConnection, batch: Int, limit: Int = .max) throws -> (jobs: Int, seconds: Double) {
    let queue = JobQueue()
    var total = 0
    let start = now()
    while total < limit {
        let claimed = try queue.claim(connection, limit: batch, apps: ["bench"])
        if claimed.isEmpty { break }
        try queue.finish(connection, claimed, JobOutcomes(delivered: claimed.jobs.map(\.id)))
        total += claimed.jobs.count
    }
    return (total, now() - start)
}

/// The reference: the textbook single-statement dequeue, autocommit, reading one app's
/// one priority (every benchmark job is app `bench`, priority 10) in index order.
func drainWithBareDelete(_ connection: PGConnection, batch: Int, limit: Int = .max) throws -> (jobs: Int, seconds: Double) {
    let statement = try connection.prepared("""
        DELETE FROM pushd.jobs WHERE id IN (
            SELECT id FROM pushd.jobs WHERE app = 'bench' AND priority = 10 AND run_at <= now()
            ORDER BY run_at LIMIT $1 FOR UPDATE SKIP LOCKED)
        RETURNING id, app, device_token, payload, push_type, priority, expiration, collapse_id, apns_id,
                  dedupe_key, user_id, environment, run_at, attempts, last_error, created_at
        """)
    var total = 0
    let start = now()
    while total < limit {
        let result = try connection.query(statement, [batch])
        if result.rowCount == 0 { break }
        for row in result.rows { _ = try row.require(0, as: Int64.self); _ = try row.require(3, as: String.self) }
        total += result.rowCount
    }
    return (total, now() - start)
}

func claimBenchmark(_ url: String, _ options: Options) throws -> Double {
    let connection = try QueueSession.connect(url: url, applicationName: "queuebench", settings: ["statement_timeout": "0"])
    print("transactional claim + ack: \(options.jobs) jobs per round, 3 rounds, batches of \(options.batch), one connection")
    let start = now()
    try insertJobs(connection, options.jobs)
    print("  insert (INSERT … SELECT, constraints and triggers): \(figure(Double(options.jobs) / (now() - start))) rows/s")
    // The two methods take turns every ten batches on the same table, so that load from
    // anything else on the machine falls on both alike.
    var ours = (jobs: 0, seconds: 0.0)
    var reference = (jobs: 0, seconds: 0.0)
    let slice = options.batch * 10
    for round in 0..<3 {
        if round > 0 { try insertJobs(connection, options.jobs) }
        try connection.execute(script: "VACUUM ANALYZE pushd.jobs")
        while true {
            let mine = try drainWithQueue(connection, batch: options.batch, limit: slice)
            let theirs = try drainWithBareDelete(connection, batch: options.batch, limit: slice)
            ours = (ours.jobs + mine.jobs, ours.seconds + mine.seconds)
            reference = (reference.jobs + theirs.jobs, reference.seconds + theirs.seconds)
            if mine.jobs < slice || theirs.jobs < slice { break }
        }
    }
    let ourRate = Double(ours.jobs) / ours.seconds
    let referenceRate = Double(reference.jobs) / reference.seconds
    print("  pushd claim (DELETE … RETURNING in a transaction) + finish: \(ours.jobs) jobs, \(figure(ourRate)) jobs/s (target ≥ 50000)")
    print("  reference bare DELETE … IN (SELECT … FOR UPDATE SKIP LOCKED) RETURNING loop: \(reference.jobs) jobs, \(figure(referenceRate)) jobs/s")
    print("  ratio pushd/reference \(figure(ourRate / referenceRate, 2)) (target ≥ 0.8)")
    return ourRate
}

// MARK: Mixed fleet

/// The claim of one instance while another app's due jobs, older than all of ours, sit
/// ahead of them in run_at order: the jobs of an app this instance is not configured
/// for, waiting for the instance that is (or for nobody). Ours are drained in the same
/// slices as the claim phase; the other app's jobs must all still be there afterwards.
func mixedBenchmark(_ url: String, _ options: Options, baseline: Double?) throws {
    let connection = try QueueSession.connect(url: url, applicationName: "queuebench", settings: ["statement_timeout": "0"])
    print("transactional claim + ack with \(options.foreignJobs) due jobs of another app queued ahead: \(options.jobs) jobs per round, 3 rounds, batches of \(options.batch)")
    try insertJobs(connection, options.foreignJobs, app: "stranger", age: 3600)
    var ours = (jobs: 0, seconds: 0.0)
    for _ in 0..<3 {
        try insertJobs(connection, options.jobs)
        try connection.execute(script: "VACUUM ANALYZE pushd.jobs")
        let round = try drainWithQueue(connection, batch: options.batch)
        ours = (ours.jobs + round.jobs, ours.seconds + round.seconds)
    }
    let rate = Double(ours.jobs) / ours.seconds
    let left = try count(connection, "SELECT count(*) FROM pushd.jobs WHERE app = 'stranger'")
    print("  pushd claim + finish of its own app: \(ours.jobs) jobs, \(figure(rate)) jobs/s; the other app's jobs left untouched: \(left) of \(options.foreignJobs)")
    if let baseline { print("  ratio to the claim without the other app's backlog \(figure(rate / baseline, 2)) (target ≥ 0.9)") }
    try connection.query("DELETE FROM pushd.jobs WHERE app = 'stranger'")
}

// MARK: LISTEN/NOTIFY latency

func latencyBenchmark(_ url: String, _ options: Options, policy: JobWaitPolicy, label: String) throws {
    let inserters = 16
    let claimers = 4
    print("insert-to-claim latency, \(label): \(options.latencyCount) single-row autocommit inserts at \(options.rate)/s from \(inserters) connections, \(claimers) claimers")
    let sentAt = Mutex<[Int64: (sent: Double, committed: Double)]>([:])
    let claimedAt = Mutex<[Int64: Double]>([:])
    let done = Atomic<Bool>(false)
    let sleeps = Atomic<Int>(0)
    let failure = Mutex<String?>(nil)
    let ready = DispatchSemaphore(value: 0)
    let finished = DispatchGroup()

    for claimer in 0..<claimers {
        finished.enter()
        Thread.detachNewThread {
            defer { finished.leave() }
            do {
                let connection = try QueueSession.connect(url: url, applicationName: "queuebench-claimer-\(claimer)")
                let queue = JobQueue()
                try queue.listen(connection)
                ready.signal()
                var lastWork = now()
                while !done.load(ordering: .acquiring) {
                    // As pushd's workers: while busy, an empty claim's COMMIT is not waited for.
                    let busy = now() - lastWork < policy.busyWindow
                    let batch = try queue.claim(connection, limit: 500, apps: ["bench"], commitEmptyWithoutWaiting: busy)
                    if !batch.isEmpty {
                        let time = now()
                        claimedAt.withLock { map in for job in batch.jobs { map[job.id] = time } }
                        try queue.finish(connection, batch, JobOutcomes(delivered: batch.jobs.map(\.id)))
                        lastWork = now()
                        continue
                    }
                    switch policy.step(idleSeconds: now() - lastWork) {
                    case .poll(let microseconds):
                        _ = try queue.waitWhileBusy(connection, timeoutMilliseconds: Int32(clamping: (Int(microseconds) + 999) / 1000))
                    case .sleep(let milliseconds):
                        sleeps.add(1, ordering: .relaxed)
                        if try queue.sleepUntilJobs(connection, apps: ["bench"], timeoutMilliseconds: min(milliseconds, 100)) { lastWork = now() }
                    }
                }
            } catch {
                failure.withLock { $0 = "claimer: \(error)" }
                ready.signal()
            }
        }
    }
    for _ in 0..<claimers { ready.wait() }
    let interval = Double(inserters) / Double(options.rate)
    let perInserter = options.latencyCount / inserters
    let begin = now() + 0.2
    let inserted = DispatchGroup()
    for inserter in 0..<inserters {
        inserted.enter()
        Thread.detachNewThread {
            defer { inserted.leave() }
            do {
                let connection = try QueueSession.connect(url: url, applicationName: "queuebench-inserter-\(inserter)")
                let insert = try connection.prepare("""
                    INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('bench', $1, '{"aps":{"alert":"ping"}}') RETURNING id
                    """)
                for n in 0..<perInserter {
                    let due = begin + (Double(n) + Double(inserter) / Double(inserters)) * interval
                    let wait = due - now()
                    if wait > 0 { usleep(useconds_t(wait * 1e6)) }
                    let sent = now()
                    let id = try connection.query(insert, [token(n * inserters + inserter + 1)]).require(Int64.self, row: 0, column: 0)
                    let committed = now()
                    sentAt.withLock { $0[id] = (sent, committed) }
                }
            } catch {
                failure.withLock { $0 = "inserter: \(error)" }
            }
        }
    }
    inserted.wait()
    let elapsed = now() - begin
    let total = perInserter * inserters
    let deadline = now() + 5
    while now() < deadline, claimedAt.withLock({ $0.count }) < total { usleep(10_000) }
    done.store(true, ordering: .releasing)
    finished.wait()
    if let message = failure.withLock({ $0 }) { throw QueueError(message) }
    let sent = sentAt.withLock { $0 }
    let claimed = claimedAt.withLock { $0 }
    var fromCommit = [Double]()
    var fromSend = [Double]()
    for (id, times) in sent {
        guard let claim = claimed[id] else { continue }
        fromCommit.append(max(0, claim - times.committed) * 1000)
        fromSend.append((claim - times.sent) * 1000)
    }
    fromCommit.sort()
    fromSend.sort()
    let commits = sent.values.map { ($0.committed - $0.sent) * 1000 }.sorted()
    print("  claimed \(fromCommit.count) of \(total) at \(figure(Double(total) / elapsed)) inserts/s; the INSERT's own commit took p50 \(figure(percentile(commits, 0.5), 2)) ms (a WAL flush)")
    print("  commit acknowledged → claimed: p50 \(figure(percentile(fromCommit, 0.5), 2)) ms, p99 \(figure(percentile(fromCommit, 0.99), 2)) ms, max \(figure(fromCommit.last ?? .nan, 2)) ms (target p99 ≤ 5 ms)")
    print("  claimers went to sleep on LISTEN \(sleeps.load(ordering: .relaxed)) times")
    print("  INSERT sent → claimed (commit included): p50 \(figure(percentile(fromSend, 0.5), 2)) ms, p99 \(figure(percentile(fromSend, 0.99), 2)) ms")
}

// MARK: Bloat

func bloatBenchmark(_ url: String, _ options: Options, baseline: Double) throws {
    let connection = try QueueSession.connect(url: url, applicationName: "queuebench", settings: ["statement_timeout": "0"])
    print("throughput after \(options.bloatJobs) jobs passed through pushd.jobs (insert 100000, drain, repeat; autovacuum as configured)")
    let sizeBefore = try count(connection, "SELECT pg_total_relation_size('pushd.jobs')")
    var passed = 0
    let start = now()
    var lastReport = start
    while passed < options.bloatJobs {
        let size = min(100_000, options.bloatJobs - passed)
        try insertJobs(connection, size)
        _ = try drainWithQueue(connection, batch: options.batch)
        passed += size
        if now() - lastReport > 30 {
            lastReport = now()
            print("  … \(passed) jobs so far, \(figure(lastReport - start)) s")
        }
    }
    let sizeAfter = try count(connection, "SELECT pg_total_relation_size('pushd.jobs')")
    let dead = try count(connection, "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'pushd.jobs'::regclass")
    let vacuums = try count(connection, "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'pushd.jobs'::regclass")
    print("  passed \(passed) jobs in \(figure(now() - start)) s; table + indexes \(sizeBefore / 1024) KiB before, \(sizeAfter / 1024) KiB after; \(dead) dead tuples; \(vacuums) autovacuums")
    print("  the same measurement again on the table that has seen them:")
    let after = try claimBenchmark(url, options)
    print("  pushd claim + ack after \(passed) jobs: \(figure(after)) jobs/s vs \(figure(baseline)) at the start: ratio \(figure(after / baseline, 2)) (target ≥ 0.8)")
}

func main() throws {
    let options = try Options.parse(Array(CommandLine.arguments.dropFirst()))
    let admin = try PGConnection(url: options.url, applicationName: "queuebench-admin")
    let name = "pushd_bench_\(getpid())"
    try admin.execute(script: "CREATE DATABASE \(name)")
    defer { _ = try? admin.execute(script: "DROP DATABASE IF EXISTS \(name) WITH (FORCE)") }
    let url = databaseURL(options.url, name: name)
    try Migrator().migrate(try PGConnection(url: url))
    let settings = try admin.query("SELECT current_setting('fsync') || ' fsync, synchronous_commit ' || current_setting('synchronous_commit') || ', shared_buffers ' || current_setting('shared_buffers')")
    print("QueueBench on PostgreSQL \(admin.serverVersion) (\(try settings.require(String.self, row: 0, column: 0))), \(ProcessInfo.processInfo.activeProcessorCount) cores")
    if options.phases.contains("campaign") { try campaignBenchmark(url, options) }
    var baseline: Double?
    if options.phases.contains("claim") || options.phases.contains("bloat") {
        baseline = try claimBenchmark(url, options)
    }
    if options.phases.contains("mixed") { try mixedBenchmark(url, options, baseline: baseline) }
    if options.phases.contains("bloat"), let baseline { try bloatBenchmark(url, options, baseline: baseline) }
    if options.phases.contains("latency") {
        try latencyBenchmark(url, options, policy: JobWaitPolicy(), label: "pushd's claimers (claim every 2 ms for 1 s after work, then sleep on LISTEN/NOTIFY)")
        try latencyBenchmark(url, options, policy: JobWaitPolicy(busyWindow: 0), label: "reference: claimers always asleep on LISTEN/NOTIFY, every insert notifies")
    }
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
    print("process: peak RSS \(usage.ru_maxrss / 1024) MiB, CPU \(figure(cpu, 1)) s")
}

do {
    try main()
} catch {
    var message = Array("QueueBench: \(error)\n".utf8)
    message.withUnsafeMutableBytes { _ = write(2, $0.baseAddress, $0.count) }
    exit(1)
}
