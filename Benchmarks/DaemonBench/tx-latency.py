#!/usr/bin/env python3
"""INSERT → accepted of the transactional jobs of a drain, exact, from each job's own times.

    tx-latency.py INSERTS PUSHD_LOG...

INSERTS holds what drain.sh's inserter printed: "insert ID CREATED_AT" (the job's created_at,
the start of its INSERT's transaction) and, after each, "commit SECONDS" (clock_timestamp()
read in the next statement, so after the COMMIT returned, one round trip late). The pushd
logs (level debug) hold one "delivered transactional job" line per job with the times of its
path: the claim that found it (what ended the wait before it), the hand-off to the engine,
the answer and the batch's commit. All times are epoch seconds of the one host's clock.

Prints the percentiles of INSERT → accepted and COMMIT → accepted, the same over the jobs
INSERTed after the lane's first answer (its first connection's handshakes left out), each
stage's mean and p99, the five slowest jobs, and a last line "tx key=value …" for drain.sh.
"""
import json
import sys


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round((len(ordered) - 1) * fraction)))]


def main():
    inserts, commits, last = {}, {}, None
    with open(sys.argv[1]) as lines:
        for line in lines:
            words = line.split()
            if len(words) == 3 and words[0] == "insert":
                last = int(words[1])
                inserts[last] = float(words[2])
            elif len(words) == 2 and words[0] == "commit" and last is not None:
                commits[last] = float(words[1])
    traces = {}
    for path in sys.argv[2:]:
        with open(path) as lines:
            for line in lines:
                if "delivered transactional job" not in line:
                    continue
                try:
                    trace = json.loads(line)
                except ValueError:
                    continue
                if trace.get("job") in inserts:
                    traces[trace["job"]] = trace
    if not traces:
        print("  transactional: no job traces in the pushd logs (is log.level debug?)")
        print("tx traced=0")
        return
    ms = lambda seconds: seconds * 1000
    stages = {
        "INSERT → accepted": [], "COMMIT → accepted": [],
        "INSERT → COMMIT returned (the application's, WAL flush included)": [],
        "COMMIT returned → claim returned": [], "claim query (BEGIN + DELETE … RETURNING)": [],
        "claim returned → handed to the engine": [], "engine: handed → answer": [],
        "answer → worker has it": [], "accepted → batch committed": [],
    }
    woke = {}
    for job, t in traces.items():
        commit = commits.get(job, inserts[job])
        stages["INSERT → accepted"].append(ms(t["answered_at"] - t["created_at"]))
        stages["COMMIT → accepted"].append(ms(t["answered_at"] - commit))
        stages["INSERT → COMMIT returned (the application's, WAL flush included)"].append(ms(commit - t["created_at"]))
        stages["COMMIT returned → claim returned"].append(ms(t["claimed_at"] - commit))
        stages["claim query (BEGIN + DELETE … RETURNING)"].append(ms(t["claimed_at"] - t["claim_started_at"]))
        stages["claim returned → handed to the engine"].append(ms(t["sent_at"] - t["claimed_at"]))
        stages["engine: handed → answer"].append(ms(t["engine_s"]))
        stages["answer → worker has it"].append(ms(t["answered_at"] - t["sent_at"] - t["engine_s"]))
        stages["accepted → batch committed"].append(ms(t["recorded_at"] - t["answered_at"]))
        if "queued_s" in t:
            # The engine's part split by libcurl's own times, counted from the hand-over to it.
            for name, value in (
                    ("  engine: its queue and loop wake-up → in libcurl", t["queued_s"]),
                    ("  libcurl: in → request written", t["request_sent_s"]),
                    ("  request written → answer's first byte read", t["first_byte_s"] - t["request_sent_s"]),
                    ("  first byte → transfer done", t["transfer_s"] - t["first_byte_s"]),
                    ("  transfer done → result out of the engine", t["engine_s"] - t["queued_s"] - t["transfer_s"])):
                stages.setdefault(name, []).append(ms(value))
        woke[t["woke"]] = woke.get(t["woke"], 0) + 1
    total = stages["INSERT → accepted"]
    after_commit = stages["COMMIT → accepted"]
    figures = lambda v: "p50 %.2f, p90 %.2f, p99 %.2f, max %.2f, mean %.2f ms" % (
        percentile(v, 0.5), percentile(v, 0.9), percentile(v, 0.99), max(v), sum(v) / len(v))
    # The lane opens its connection at its first push (TCP and TLS handshakes, and during a
    # drain a CPU-starved mock), so every job INSERTed before that push was answered shares that
    # one-off cost. The same figures without them: the lane's steady state.
    first_answer = min(t["answered_at"] for t in traces.values())
    warm = [job for job, t in traces.items() if t["created_at"] > first_answer]
    warm_total = [ms(traces[job]["answered_at"] - traces[job]["created_at"]) for job in warm]
    warm_commit = [ms(traces[job]["answered_at"] - commits.get(job, inserts[job])) for job in warm]
    print("  transactional: %d of %d jobs traced" % (len(traces), len(inserts)))
    print("    INSERT → accepted: " + figures(total))
    print("    COMMIT → accepted: " + figures(after_commit))
    if warm:
        print("    the %d jobs INSERTed after the lane's first answer (%d before it, in the lane's first connection):" % (
            len(warm), len(traces) - len(warm)))
        print("      INSERT → accepted: " + figures(warm_total))
        print("      COMMIT → accepted: " + figures(warm_commit))
    print("    stages (mean, p99 ms):")
    # The engine's sub-stages, when traced, right under the engine's line.
    names = [name for name in stages if not name.startswith("  ")]
    at = names.index("engine: handed → answer") + 1
    names[at:at] = [name for name in stages if name.startswith("  ")]
    for name in names:
        values = stages[name]
        if name in ("INSERT → accepted", "COMMIT → accepted"):
            continue
        print("      %-66s %7.2f %7.2f" % (name, sum(values) / len(values), percentile(values, 0.99)))
    # The slowest jobs one by one, with their place in the sequence: a tail of one-off
    # costs (the first push of a lane, a reconnect, a token refresh) shows as early or lone jobs.
    order = {job: n for n, job in enumerate(sorted(inserts), start=1)}
    print("    slowest jobs (n-th insert: INSERT → accepted = INSERT → COMMIT + COMMIT → claimed + claim + hand-over + engine + worker, ms; woke):")
    for job, t in sorted(traces.items(), key=lambda kv: kv[1]["created_at"] - kv[1]["answered_at"])[:5]:
        commit = commits.get(job, inserts[job])
        print("      #%d: %.2f = %.2f + %.2f + %.2f + %.2f + %.2f + %.2f; %s" % (
            order[job], ms(t["answered_at"] - t["created_at"]), ms(commit - t["created_at"]),
            ms(t["claim_started_at"] - commit), ms(t["claimed_at"] - t["claim_started_at"]),
            ms(t["sent_at"] - t["claimed_at"]), ms(t["engine_s"]), ms(t["answered_at"] - t["sent_at"] - t["engine_s"]), t["woke"]))
    print("    the claim that found the job followed: " + ", ".join("%s %d" % kv for kv in sorted(woke.items())))
    print("tx traced=%d p50_ms=%.2f p90_ms=%.2f p99_ms=%.2f max_ms=%.2f mean_ms=%.2f commit_p50_ms=%.2f commit_p99_ms=%.2f" % (
        len(traces), percentile(total, 0.5), percentile(total, 0.9), percentile(total, 0.99), max(total), sum(total) / len(total),
        percentile(after_commit, 0.5), percentile(after_commit, 0.99))
        + (" warm_jobs=%d warm_p50_ms=%.2f warm_p99_ms=%.2f warm_max_ms=%.2f warm_commit_p99_ms=%.2f" % (
            len(warm), percentile(warm_total, 0.5), percentile(warm_total, 0.99), max(warm_total), percentile(warm_commit, 0.99))
           if warm else ""))


main()
