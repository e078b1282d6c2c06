#!/usr/bin/env python3
"""Fault soak: pushd run as in production (two instances, one database) against apns-mock,
one fault mid-drain, then the database is compared with the mock's per-token answer counts.

Run through scripts/soak.sh (it builds the release binaries and starts a throwaway
PostgreSQL). Standard library only; psql through subprocess. Prints PASS/FAIL per check
and exits 0 only if every check passed. Every process's log stays in the run directory.
"""
import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

APP = "shop"
BUNDLE = "com.example.shop"
KEY_ID = "KEY1234567"
TEAM_ID = "TEAM123456"
PAYLOAD = '{"aps":{"alert":"soak"}}'
SCENARIOS = ["outage", "503", "shutdown", "429", "kill", "goaway", "prune", "restart"]


def log(message):
    print(time.strftime("%H:%M:%S") + " soak: " + message, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def campaign_token(i):
    return "ca%062x" % i


def job_token(i):
    return "d0%062x" % i


class Soak:
    def __init__(self, args):
        self.args = args
        self.bin = args.bin
        self.db = os.environ["PUSHD_DATABASE_URL"]
        self.run_dir = args.run_dir or tempfile.mkdtemp(prefix="pushd-soak-%s." % args.scenario)
        os.makedirs(self.run_dir, exist_ok=True)
        self.mock_port = free_port()
        self.control_port = free_port()
        self.mock = None
        self.mock_starts = 0
        self.mock_snapshots = []          # MockStats of mock processes that were stopped
        self.instances = {}               # name -> dict(config, metrics_port, proc, pids)
        self.killed_pids = set()
        self.jobs_inserted = 0
        self.insert_errors = 0
        self.stop_inserting = threading.Event()
        self.samples = []                 # (t, scenario phase, unavailable gauges, status exit)
        self.fault_window = None
        # Seconds from the fault's end until no job inserted before it was left in the queue.
        self.fault_backlog_seconds = None
        self.prune_tokens = set()
        self.unsent_parked = None
        self.results = []

    # ---------- small utilities ----------
    def psql(self, sql):
        out = subprocess.run(["psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1", self.db, "-c", sql],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError("psql failed: %s\n%s" % (sql, out.stderr))
        return out.stdout.strip()

    def pushd(self, *argv, config="a", check=True):
        cmd = [os.path.join(self.bin, "pushd")] + list(argv) + ["--config", self.instances[config]["config"]]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if check and out.returncode != 0:
            raise RuntimeError("%s failed (%d): %s" % (" ".join(cmd), out.returncode, out.stderr))
        return out

    def control(self, method, path, body=None, timeout=60):
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.control_port, path), method=method,
                                     data=body.encode() if body is not None else None)
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.read().decode()

    def set_faults(self, faults):
        self.control("PUT", "/faults", json.dumps(faults))

    # ---------- setup ----------
    def write_files(self):
        d = self.run_dir
        subprocess.run([os.path.join(self.bin, "apns-mock"), "gen-certs", d + "/certs"], check=True,
                       stdout=subprocess.DEVNULL)
        key = d + "/key.p8"
        subprocess.run(["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", key],
                       check=True, stderr=subprocess.DEVNULL)
        os.chmod(key, 0o600)
        subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", d + "/key.pub"], check=True)
        # Two instances with different shapes, production defaults otherwise (leases, retries).
        shapes = {
            "a": dict(threads=1, conns=1, maxconns=8, streams=500, tx=4, batch=500, camp=2),
            "b": dict(threads=2, conns=1, maxconns=4, streams=200, tx=2, batch=200, camp=3),
        }
        for name, s in shapes.items():
            port = free_port()
            path = "%s/pushd-%s.yml" % (d, name)
            with open(path, "w") as f:
                f.write("""database:
  url: {db}
metrics:
  listen: 127.0.0.1:{port}
log:
  level: info
apns:
  host: 127.0.0.1:{mock}
  ca_file: {d}/certs/ca.pem
  threads: {threads}
  connections_per_app: {conns}
  max_connections_per_app: {maxconns}
  streams_per_connection: {streams}
workers:
  transactional: {tx}
  batch_size: {batch}
  campaign: {camp}
apps:
  - name: {app}
    bundle_id: {bundle}
    environment: production
    token:
      team_id: {team}
      key_id: {kid}
      key_file: {key}
""".format(db=self.db, port=port, mock=self.mock_port, d=d, app=APP, bundle=BUNDLE, team=TEAM_ID,
                    kid=KEY_ID, key=key, **s))
            self.instances[name] = dict(config=path, metrics_port=port, proc=None, pids=[], shape=s)

    def start_mock(self):
        self.mock_starts += 1
        logf = open("%s/apns-mock-%d.log" % (self.run_dir, self.mock_starts), "w")
        d = self.run_dir
        cmd = [os.path.join(self.bin, "apns-mock"), "--cert", d + "/certs/server.pem", "--key", d + "/certs/server.key",
               "--port", str(self.mock_port), "--control-port", str(self.control_port), "--threads", "2",
               "--max-streams", "1000", "--count-per-token", "--topic", BUNDLE,
               "--provider-key", "%s:%s:%s/key.pub" % (KEY_ID, TEAM_ID, d)]
        deadline = time.time() + 30
        while True:
            self.mock = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
            while time.time() < deadline and self.mock.poll() is None:
                try:
                    self.control("GET", "/faults", timeout=2)
                    log("apns-mock #%d up (pid %d) on port %d, control %d" % (self.mock_starts, self.mock.pid,
                                                                            self.mock_port, self.control_port))
                    return
                except OSError:
                    time.sleep(0.2)
            if time.time() >= deadline:
                raise RuntimeError("apns-mock did not start; see %s" % logf.name)
            time.sleep(0.5)   # port still held: try again

    def stop_mock_keeping_counts(self):
        """Ends the mock process. Its per-token counts live in the process, so first every new
        request is answered with a TCP reset (as when the process dies: connections drop with
        streams in flight, nothing more is accepted), the counts are read, then SIGKILL."""
        self.set_faults({"resetRate": 1.0})
        time.sleep(1.0)
        self.mock_snapshots.append(json.loads(self.control("GET", "/stats", timeout=120)))
        self.mock.send_signal(signal.SIGKILL)
        self.mock.wait()

    def start_instance(self, name):
        inst = self.instances[name]
        n = len(inst["pids"]) + 1
        logf = open("%s/pushd-%s-%d.log" % (self.run_dir, name, n), "w")
        inst["proc"] = subprocess.Popen([os.path.join(self.bin, "pushd"), "run", "--config", inst["config"]],
                                        stdout=logf, stderr=subprocess.STDOUT)
        inst["pids"].append(inst["proc"].pid)
        log("pushd %s #%d started (pid %d)" % (name, n, inst["proc"].pid))

    def metrics(self, name):
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.instances[name]["metrics_port"], timeout=3) as r:
                return r.read().decode()
        except OSError:
            return ""

    @staticmethod
    def metric_values(text, name):
        values = {}
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                key, _, value = line.rpartition(" ")
                try:
                    values[key] = float(value)
                except ValueError:
                    pass
        return values

    # ---------- load ----------
    def load_campaign(self):
        n = self.args.targets
        if self.args.from_tokens:
            # The app's registered tokens, the campaign imported from them (`--from-tokens`).
            self.psql("INSERT INTO pushd.device_tokens (app, token, environment) "
                      "SELECT '%s', 'ca' || lpad(to_hex(g), 62, '0'), 'production' FROM generate_series(0, %d) g" % (APP, n - 1))
            cid = self.pushd("campaign", "create", "--app", APP, "--name", "soak", "--payload", PAYLOAD,
                             "--rate", str(self.args.rate)).stdout.strip()
            t = time.time()
            out = self.pushd("campaign", "import", cid, "--from-tokens")
            log("campaign %s from registered tokens: %s (%.1f s)" % (cid, out.stdout.strip().splitlines()[0] if out.stdout.strip() else "", time.time() - t))
            return cid
        path = self.run_dir + "/targets.txt"
        with open(path, "w") as f:
            for i in range(n):
                f.write(campaign_token(i) + "\n")
        cid = self.pushd("campaign", "create", "--app", APP, "--name", "soak", "--payload", PAYLOAD,
                         "--rate", str(self.args.rate)).stdout.strip()
        t = time.time()
        out = self.pushd("campaign", "import", cid, path)
        log("campaign %s: %s (%.1f s)" % (cid, out.stdout.strip().splitlines()[0] if out.stdout.strip() else "", time.time() - t))
        os.remove(path)
        return cid

    def inserter(self):
        proc = subprocess.Popen(["psql", "-X", "-q", "-v", "ON_ERROR_STOP=0", self.db],
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=open(self.run_dir + "/inserter.log", "w"), text=True)
        interval = 1.0 / self.args.job_rate
        next_at = time.time()
        while not self.stop_inserting.is_set():
            token = job_token(self.jobs_inserted)
            proc.stdin.write("INSERT INTO pushd.jobs (app, device_token, payload, priority) VALUES ('%s', '%s', '%s', 10);\n"
                             % (APP, token, PAYLOAD))
            proc.stdin.flush()
            self.jobs_inserted += 1
            next_at += interval
            delay = next_at - time.time()
            if delay > 0:
                time.sleep(delay)
        proc.stdin.close()
        proc.wait()

    def campaign_row(self, cid):
        row = self.psql("SELECT status, targets, sent, failed, pruned, chunks_done, chunks_total FROM pushd.campaigns WHERE id = %s" % cid)
        status, targets, sent, failed, pruned, done, total = row.split("|")
        return dict(status=status, targets=int(targets), sent=int(sent), failed=int(failed), pruned=int(pruned),
                    chunks_done=int(done), chunks_total=int(total))

    # ---------- faults ----------
    def fault_gauge(self):
        """The gauge that shows the fault: APNs throttling for 429, an outage otherwise."""
        return "pushd_apns_throttled" if self.args.scenario == "429" else "pushd_apns_unavailable"

    def sampler(self, stop):
        while not stop.is_set():
            t = time.time()
            gauges = {}
            for name in self.instances:
                vals = self.metric_values(self.metrics(name), self.fault_gauge())
                gauges[name] = max(vals.values()) if vals else None
            out = self.pushd("status", check=False)
            status = out.returncode
            phase = "fault" if self.fault_window and self.fault_window[1] is None else "normal"
            self.samples.append((t, phase, gauges, status))
            with open(self.run_dir + "/samples.log", "a") as f:
                f.write("%s %s gauges=%s status_exit=%d %s\n" % (time.strftime("%H:%M:%S", time.localtime(t)), phase,
                                                                json.dumps(gauges), status,
                                                                (out.stdout + out.stderr).replace("\n", " | ")[:600]))
            stop.wait(2.0)

    def apply_fault(self):
        a = self.args
        secs = a.fault_seconds
        scenario = a.scenario
        log("fault %s begins for %d s" % (scenario, secs))
        self.fault_window = [time.time(), None]
        if scenario == "outage":
            self.stop_mock_keeping_counts()
            time.sleep(secs)
            self.start_mock()
        elif scenario in ("503", "shutdown", "429"):
            field = {"503": "serviceUnavailableRate", "shutdown": "shutdownRate", "429": "tooManyRequestsRate"}[scenario]
            self.set_faults({field: 1.0})
            time.sleep(secs)
            # Targets set aside unsent while APNs answered nothing but errors: a campaign waits in
            # its chunks (a probe per worker and retry.outage_probe_ms), it does not park its targets one row each.
            if scenario != "429":
                self.unsent_parked = int(self.psql("SELECT count(*) FROM pushd.campaign_retries WHERE last_error LIKE 'not sent:%'"))
                log("%d campaign targets set aside unsent at the end of the fault" % self.unsent_parked)
            self.set_faults({})
        elif scenario == "goaway":
            self.set_faults({"goawayAfterStreams": a.goaway_streams})
            end = time.time() + secs
            while time.time() < end:
                time.sleep(5)
                self.control("POST", "/goaway")
            self.set_faults({})
        elif scenario == "prune":
            share = a.prune_share
            step = max(1, int(round(1 / share)))
            self.prune_tokens = {campaign_token(i) for i in range(0, a.targets, step)}
            self.set_faults({"unregisteredTokens": {t: int(time.time() * 1000) for t in self.prune_tokens}})
            time.sleep(secs)
            self.set_faults({})
        elif scenario == "kill":
            inst = self.instances["a"]
            pid = inst["proc"].pid
            inst["proc"].send_signal(signal.SIGKILL)
            inst["proc"].wait()
            self.killed_pids.add(pid)
            log("SIGKILL pushd a (pid %d)" % pid)
            time.sleep(a.kill_restart_seconds)
            self.start_instance("a")
            time.sleep(max(0, secs - a.kill_restart_seconds))
        elif scenario == "restart":
            # A rolling restart while retries wait in the chunks being sent: 5 % of answers are
            # 500s throughout, and instance a is stopped with SIGTERM (it drains and releases
            # its chunks) and started again. Nothing may be accepted twice.
            self.set_faults({"internalServerErrorRate": 0.05})
            time.sleep(min(5, secs))
            inst = self.instances["a"]
            inst["proc"].send_signal(signal.SIGTERM)
            try:
                inst["proc"].wait(timeout=60)
            except subprocess.TimeoutExpired:
                log("pushd a did not stop within 60 s of SIGTERM")
            log("SIGTERM pushd a: exited with %s" % inst["proc"].returncode)
            time.sleep(a.kill_restart_seconds)
            self.start_instance("a")
            time.sleep(max(0, secs - 5 - a.kill_restart_seconds))
            self.set_faults({})
        self.fault_window[1] = time.time()
        log("fault %s over after %.0f s" % (scenario, self.fault_window[1] - self.fault_window[0]))

    # ---------- checks ----------
    def check(self, name, ok, detail):
        self.results.append((name, ok, detail))
        print("%s  %s: %s" % ("PASS" if ok else "FAIL", name, detail), flush=True)

    def per_token_counts(self):
        counts = {}
        stats = self.mock_snapshots + [json.loads(self.control("GET", "/stats", timeout=120))]
        for s in stats:
            for token, c in s.get("perToken", {}).items():
                counts[token] = counts.get(token, 0) + c.get("accepted", 0)
        # Tokens accepted more than once, with the count of each mock process: both in one
        # process is a resend pushd made while the mock was up; one in each straddles a stop.
        with open(self.run_dir + "/accepted-twice.txt", "w") as f:
            for token, n in sorted(counts.items()):
                if n > 1:
                    f.write("%s %s\n" % (token, [s.get("perToken", {}).get(token, {}).get("accepted", 0) for s in stats]))
        return counts, stats

    def verify(self, cid, finished):
        a = self.args
        counts, stats = self.per_token_counts()
        with open(self.run_dir + "/mock-stats-summary.json", "w") as f:
            json.dump([{k: v for k, v in s.items() if k != "perToken"} for s in stats], f, indent=1)
        camp = self.campaign_row(cid)
        print("\n=== results (run directory %s) ===" % self.run_dir, flush=True)
        self.check("finished", finished, "campaign %s and all jobs settled within %d s" % (camp["status"], a.time_limit))

        # Campaign: every target has an outcome, and the mock agrees.
        # A pruned token's target is one of the failed ones (its 410 is its outcome): pruned counts
        # the tokens those answers invalidated, never a target of its own.
        outcomes = camp["sent"] + camp["failed"]
        parked = int(self.psql("SELECT count(*) FROM pushd.campaign_retries WHERE campaign_id = %s" % cid))
        self.check("campaign outcomes", camp["status"] == "done" and outcomes == camp["targets"] and parked == 0
                   and camp["pruned"] <= camp["failed"],
                   "status %s, targets %d, sent %d, failed %d (of them pruned %d), parked %d"
                   % (camp["status"], camp["targets"], camp["sent"], camp["failed"], camp["pruned"], parked))
        missing = [campaign_token(i) for i in range(a.targets) if counts.get(campaign_token(i), 0) == 0]
        unexplained = [t for t in missing if t not in self.prune_tokens]
        self.check("campaign targets accepted by the mock", len(missing) <= camp["failed"] and not unexplained,
                   "%d of %d never accepted; %d recorded failed; %d not in the pruned set"
                   % (len(missing), a.targets, camp["failed"], len(unexplained)))
        if a.scenario == "prune":
            # Every 410 the mock gave a campaign target invalidated its token once (none was
            # registered again), and each such target was recorded failed.
            unregistered = sum(s.get("rejected", {}).get("410 Unregistered", 0) for s in stats)
            campaign_410 = sum(1 for t in self.prune_tokens if counts.get(t, 0) == 0)
            self.check("campaign prunes", camp["pruned"] == campaign_410 and campaign_410 <= unregistered,
                       "%d tokens pruned by the campaign, %d of its targets answered only 410 Unregistered "
                       "(the mock answered %d in all)" % (camp["pruned"], campaign_410, unregistered))
        if self.unsent_parked is not None:
            self.check("campaign waited in its chunks", self.unsent_parked < 5000,
                       "%d targets set aside unsent (one parked row each) at the end of the fault" % self.unsent_parked)
        dup_targets = sum(1 for i in range(a.targets) if counts.get(campaign_token(i), 0) > 1)
        extra_targets = sum(max(0, counts.get(campaign_token(i), 0) - 1) for i in range(a.targets))

        # Transactional jobs.
        left = int(self.psql("SELECT count(*) FROM pushd.jobs WHERE app = '%s'" % APP))
        dead = set(self.psql("SELECT device_token FROM pushd.dead_jobs").split())
        dead_reasons = self.psql("SELECT coalesce(string_agg(reason || ' ' || n, ', '), '') FROM "
                                 "(SELECT reason, count(*) n FROM pushd.dead_jobs GROUP BY 1) x")
        jobs = [job_token(i) for i in range(self.jobs_inserted)]
        with open(self.run_dir + "/inserter.log", errors="replace") as f:
            self.insert_errors = sum(1 for line in f if "ERROR" in line)
        lost = [t for t in jobs if counts.get(t, 0) == 0 and t not in dead]
        self.check("transactional jobs outcomes", left == 0 and not lost,
                   "%d inserted (%d insert errors), %d still queued, %d dead-lettered (%s), %d with no outcome%s"
                   % (len(jobs), self.insert_errors, left, len(dead), dead_reasons or "none", len(lost),
                      (" e.g. " + ", ".join(lost[:3])) if lost else ""))
        dup_jobs = sum(1 for t in jobs if counts.get(t, 0) > 1)
        accepted_dead = sum(1 for t in jobs if t in dead and counts.get(t, 0) > 0)

        # Sent twice.
        if a.scenario == "kill":
            s = self.instances["a"]["shape"]
            bound = s["camp"] * 16 * 1000 + s["tx"] * s["batch"]
            self.check("accepted twice (kill bound)", dup_targets + dup_jobs <= bound,
                       "%d campaign targets (%d extra answers) and %d jobs accepted more than once; bound %d "
                       "(killed instance: %d campaign workers x 16 chunks x 1,000 + %d x %d claimed jobs)"
                       % (dup_targets, extra_targets, dup_jobs, bound, s["camp"], s["tx"], s["batch"]))
        else:
            straddling = 0
            if len(stats) > 1:
                for token, n in counts.items():
                    if n > 1 and sum(1 for st in stats if st.get("perToken", {}).get(token, {}).get("accepted", 0)) > 1:
                        straddling += 1
            # A mock that resets its connections and dies drops the answers it had not yet
            # written: a request it accepted then is sent again, which at-least-once allows.
            # Such a duplicate straddles the stop (accepted by the old process and the new one),
            # and there can be no more of them than requests on the wire at the stop: every
            # stream each instance's lanes may open (2 lanes x max connections x streams).
            bound = sum(2 * i["shape"]["maxconns"] * i["shape"]["streams"] for i in self.instances.values())
            allowed = straddling if a.scenario == "outage" else 0
            duplicates = dup_targets + dup_jobs
            self.check("accepted twice", duplicates == allowed and allowed <= bound,
                       "%d campaign targets (%d extra answers) and %d jobs accepted more than once; %d of them "
                       "accepted by the mock before its stop and again after (accepted-twice.txt)%s"
                       % (dup_targets, extra_targets, dup_jobs, straddling,
                          "; allowed: those straddling the stop, at most %d" % bound if a.scenario == "outage" else ""))
        self.check("dead-lettered yet accepted", accepted_dead == 0, "%d jobs" % accepted_dead)
        db_sent = camp["sent"]
        mock_distinct = a.targets - len(missing)
        self.check("campaign sent = distinct accepted", db_sent == mock_distinct,
                   "database says sent %d, the mock accepted %d distinct targets" % (db_sent, mock_distinct))

        # Take-overs, stalls.
        takeovers, bad, stalls = 0, [], 0
        for fn in sorted(os.listdir(self.run_dir)):
            if not fn.startswith("pushd-") or not fn.endswith(".log"):
                continue
            for line in open(os.path.join(self.run_dir, fn), errors="replace"):
                if "chunk_taken_over" in line or "took over chunk" in line:
                    takeovers += 1
                    # An owner is "<instance>/campaign-N", an instance "<host>/<pid>-<6 hex digits>".
                    m = re.search(r'"previous_owner":"[^"/]*/(\d+)(?:-[0-9a-f]+)?/', line)
                    pid = int(m.group(1)) if m else None
                    if pid not in self.killed_pids:
                        bad.append("%s: from pid %s" % (fn, pid))
                if "campaign_worker_stalled" in line:
                    stalls += 1
        self.check("no chunk taken over from a live instance", not bad,
                   "%d take-overs, %d from a live worker%s" % (takeovers, len(bad), (": " + "; ".join(bad[:5])) if bad else ""))
        self.check("no campaign worker stalled", stalls == 0, "%d campaign_worker_stalled lines" % stalls)

        # The outage is visible while it lasts.
        if a.scenario in ("outage", "503", "shutdown", "429"):
            fault = [s for s in self.samples if s[1] == "fault"]
            gauge_up = [s for s in fault if any(v == 1 for v in s[2].values() if v is not None)]
            status_bad = [s for s in fault if s[3] == 1]
            self.check("outage visible: " + self.fault_gauge(), bool(gauge_up),
                       "gauge 1 in %d of %d samples during the fault" % (len(gauge_up), len(fault)))
            self.check("outage visible: pushd status exit 1", bool(status_bad),
                       "exit 1 in %d of %d samples during the fault" % (len(status_bad), len(fault)))
            after = [s for s in self.samples if s[1] == "normal" and s[0] > self.fault_window[1] + 30]
            still = [s for s in after if any(v == 1 for v in s[2].values() if v is not None)]
            self.check("outage over: gauge back to 0", not still,
                       "gauge 1 in %d of %d samples from 30 s after the fault" % (len(still), len(after)))

        connections = sum(s.get("connectionsAccepted", 0) for s in stats)
        bound = a.max_connections
        if a.scenario == "goaway":
            # The fault itself asks for new connections: one per --goaway-streams streams sent
            # during it (at most the campaign's rate cap and the jobs' rate), and one per open
            # connection at each POST /goaway (every 5 s, at most the most connections the mock
            # saw open at once). A reconnect storm is thousands a second above that.
            streams = (a.rate + a.job_rate) * a.fault_seconds
            posts = int(a.fault_seconds / 5) + 1
            held = sum(s.get("connectionsOpenPeak", 0) or 0 for s in stats)
            bound += int(streams / a.goaway_streams) + posts * held
        self.check("connections to the mock bounded", connections <= bound,
                   "%d accepted by %d mock process(es) (bound %d); peak open %s"
                   % (connections, len(stats), bound, [s.get("connectionsOpenPeak") for s in stats]))
        reconnects = {}
        for name in self.instances:
            vals = self.metric_values(self.metrics(name), "pushd_apns_reconnects_total")
            reconnects[name] = int(sum(vals.values()))
        rejected = {}
        for s in stats:
            for k, v in s.get("rejected", {}).items():
                rejected[k] = rejected.get(k, 0) + v
        print("info: mock accepted %d, rejected %s; pushd_apns_reconnects_total (running instances) %s"
              % (sum(s.get("accepted", 0) for s in stats), rejected, reconnects), flush=True)
        if self.fault_window:
            print("info: fault from +%.0f s to +%.0f s of the drain" % (self.fault_window[0] - self.t0,
                                                                     self.fault_window[1] - self.t0))
            print("info: the jobs inserted before the fault's end were all settled %s after it"
                  % ("%.0f s" % self.fault_backlog_seconds if self.fault_backlog_seconds is not None else "(not seen)"))
        failed = [r for r in self.results if not r[1]]
        print("%s: %d of %d checks passed (scenario %s, %d targets, %d s fault); logs in %s"
              % ("PASS" if not failed else "FAIL", len(self.results) - len(failed), len(self.results),
                 a.scenario, a.targets, a.fault_seconds, self.run_dir), flush=True)
        return not failed

    # ---------- run ----------
    def run(self):
        a = self.args
        log("run directory %s" % self.run_dir)
        self.write_files()
        self.start_mock()
        self.pushd("migrate")
        cid = self.load_campaign()
        for name in self.instances:
            self.start_instance(name)
        time.sleep(2)
        self.pushd("campaign", "start", cid)
        self.t0 = time.time()
        ins = threading.Thread(target=self.inserter, daemon=True)
        ins.start()
        stop_sampling = threading.Event()
        samp = threading.Thread(target=self.sampler, args=(stop_sampling,), daemon=True)
        samp.start()
        deadline = self.t0 + a.time_limit
        faulted = False
        finished = False
        last_log = 0
        while time.time() < deadline:
            c = self.campaign_row(cid)
            done = c["sent"] + c["failed"]
            if time.time() - last_log > 10:
                log("campaign %s %d/%d (sent %d failed %d, of them pruned %d), jobs inserted %d, queued %s"
                    % (c["status"], done, c["targets"], c["sent"], c["failed"], c["pruned"], self.jobs_inserted,
                       self.psql("SELECT count(*) FROM pushd.jobs")))
                last_log = time.time()
            if faulted and self.fault_window and self.fault_window[1] and self.fault_backlog_seconds is None:
                left = int(self.psql("SELECT count(*) FROM pushd.jobs WHERE created_at <= to_timestamp(%f)"
                                     % self.fault_window[1]))
                if left == 0:
                    self.fault_backlog_seconds = time.time() - self.fault_window[1]
            if not faulted and done >= a.fault_at * c["targets"]:
                faulted = True
                self.apply_fault()
                continue
            if c["status"] in ("done", "cancelled") and faulted:
                if not self.stop_inserting.is_set():
                    self.stop_inserting.set()
                    ins.join()
                    log("campaign %s; stopped inserting after %d jobs" % (c["status"], self.jobs_inserted))
                if int(self.psql("SELECT count(*) FROM pushd.jobs")) == 0:
                    finished = True
                    break
            time.sleep(1)
        self.stop_inserting.set()
        ins.join()
        time.sleep(3)   # answers on the wire reach the mock's counters
        stop_sampling.set()
        samp.join()
        ok = self.verify(cid, finished)
        return ok

    def shutdown(self):
        for name, inst in self.instances.items():
            p = inst["proc"]
            if p and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, inst in self.instances.items():
            p = inst["proc"]
            if p:
                try:
                    p.wait(timeout=40)
                except subprocess.TimeoutExpired:
                    p.kill()
        if self.mock and self.mock.poll() is None:
            self.mock.send_signal(signal.SIGTERM)
            try:
                self.mock.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.mock.kill()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bin", required=True, help="folder with the release pushd and apns-mock")
    p.add_argument("--scenario", choices=SCENARIOS, default="outage")
    p.add_argument("--targets", type=int, default=300000)
    p.add_argument("--from-tokens", action="store_true",
                   help="register the targets as the app's production device tokens and import the campaign from them")
    p.add_argument("--rate", type=int, default=2500, help="campaign rate cap per second (so the fault lands mid-drain)")
    p.add_argument("--job-rate", type=float, default=50, help="transactional INSERTs per second")
    p.add_argument("--fault-seconds", type=int, default=60)
    p.add_argument("--fault-at", type=float, default=0.3, help="share of the campaign processed when the fault begins")
    p.add_argument("--time-limit", type=int, default=900, help="seconds from the campaign's start")
    p.add_argument("--kill-restart-seconds", type=int, default=5)
    p.add_argument("--goaway-streams", type=int, default=1000)
    p.add_argument("--prune-share", type=float, default=0.05)
    p.add_argument("--max-connections", type=int, default=400, help="bound on connections the mock accepts in the run")
    p.add_argument("--run-dir")
    args = p.parse_args()
    soak = Soak(args)
    ok = False
    try:
        ok = soak.run()
    finally:
        soak.shutdown()
        print("run directory: %s" % soak.run_dir, flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
