#!/usr/bin/env bash
# Called by run.sh (and Benchmarks/bench.sh) inside scripts/with-postgres.sh
# (PUSHD_DATABASE_URL is set). Optional environment:
#   PUSHD_BENCH_MOCK_ARGS       extra apns-mock options, e.g. "--delay-ms 50" (the mock always
#                               runs with --read-ahead: many TLS records per read, as a server does)
#   PUSHD_BENCH_INSTANCES       pushd daemons draining the one campaign (default 1)
#   PUSHD_BENCH_TRANSACTIONAL   transactional jobs INSERTed one per transaction during the
#                               drain; their INSERT → accepted percentiles are exact, from
#                               each job's created_at and the trace pushd logs at level debug
#                               (tx-latency.py), and the histogram
#                               pushd_job_delivery_latency_seconds gives its bucket bounds
#                               (default 0)
#   PUSHD_BENCH_TX_GAP_MS       milliseconds between two transactional INSERTs (default 20); above
#                               the lane's idle close, every push finds its connection idle
#   PUSHD_BENCH_TX_IDLE_CLOSE_S apns.transactional_idle_close_s of the daemons (default: pushd's,
#                               0 = the lane keeps its idle connections)
#   PUSHD_BENCH_H2LOAD          0 skips the h2load reference (default 1)
#   PUSHD_BENCH_ENGINE          0 skips DispatcherBench sending the daemon's very requests to
#                               the same mock (default 1; needs DispatcherBench built in BIN)
#   PUSHD_BENCH_METRICS_PORT    the first daemon's metrics port (default: a free one;
#                               Benchmarks/ScrapeFlood floods it)
#   PUSHD_BENCH_MAX_CONNECTIONS apns.max_connections_per_app of the daemons (default: pushd's);
#                               2 holds the connection count still when comparing memory on a
#                               busy machine, where slow answers make pushd open more
#   PUSHD_BENCH_MAX_IN_FLIGHT   apns.max_in_flight of the daemons (default: pushd's)
#   PUSHD_BENCH_GROWTH_JUDGED_MS apns.connection_growth_judged_ms of the daemons (default: pushd's;
#                               0 keeps every connection growth opens, as before it was judged)
#   PUSHD_BENCH_COALESCE_MS     campaigns.answer_coalescing_ms of every daemon (default: pushd's)
#   PUSHD_BENCH_LOG_LEVEL       log.level of the daemons (default warning; info shows the in-flight limit)
#   PUSHD_BENCH_ADAPTIVE        campaigns.adaptive_in_flight of every daemon, true or false (default: pushd's)
#   PUSHD_BENCH_ONE_READER      campaigns.read_through_one_transfer of every daemon, true or false (default: pushd's)
#   PUSHD_BENCH_SMAPS           1 keeps /proc/PID/smaps of the first daemon at its highest RSS
#                               during the drain and prints where that memory is
#                               (smaps-breakdown.py: libraries, arenas, thread stacks) and
#                               the highest RSS of each quarter of the drain
#   PUSHD_BENCH_RATE            the campaign's rate cap, notifications per second (default: none). Below
#                               what the machine can send, the loops wait for answers between
#                               passes as they do on a quiet host, where CPU per notification
#                               depends on the round trip; on a busy one an uncapped drain keeps
#                               them running whatever the round trip
#   PUSHD_BENCH_DRAIN_SECONDS   stop the drain after this many seconds and report it so far (a 10M
#                               campaign's memory on a slow host; rates and CPU are then of the
#                               targets sent by the last checkpoint, the duplicates count not meaningful)
#   PUSHD_BENCH_TIMELINE        with PUSHD_BENCH_SMAPS=1, print the daemon's RSS, the targets sent and
#                               the connections open every this many seconds (default: none)
#   PUSHD_BENCH_KEEP_LOGS       a folder to copy the daemons' and the mock's logs (and the inserter's
#                               inserts.txt, for tx-latency.py) into at the end
#   PUSHD_BENCH_PROBE_SECONDS   probe.sh over a window of this many seconds, 3 s into the drain
#                               (pushd and apns-mock) and 1 s into the engine's run (DispatcherBench
#                               and apns-mock): system calls, switches, reads and writes per
#                               notification; printed as "probe …" lines (default: no probe)
#   PUSHD_BENCH_WRAP            a command prefix for the first daemon and for DispatcherBench, e.g.
#                               "valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.%p" to count
#                               instructions per notification (default: none)
#   PUSHD_BENCH_PEER            a command run last against the same mock with the arguments
#                               PORT CA KEY_FILE KEY_ID TEAM_ID TOPIC; its "result …" line is
#                               printed as "peer …" (Benchmarks/bench.sh runs aioapns so)
# The last line, "result key=value …", is for Benchmarks/bench.sh.
set -euo pipefail
bin=$1
targets=$2
work=$(mktemp -d /tmp/pushd-bench.XXXXXX)
instances=${PUSHD_BENCH_INSTANCES:-1}
transactional=${PUSHD_BENCH_TRANSACTIONAL:-0}
mock_pid=; pushd_pids=()
cleanup() {
  for pid in "${pushd_pids[@]}"; do kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true; done
  [ -n "$mock_pid" ] && kill -TERM "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null || true
  [ -n "${PUSHD_BENCH_KEEP_LOGS:-}" ] && mkdir -p "$PUSHD_BENCH_KEEP_LOGS" && cp "$work"/*.log "$work"/inserts.txt "$PUSHD_BENCH_KEEP_LOGS"/ 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/apns-mock" gen-certs "$work/certs" >/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.p8" 2>/dev/null
chmod 600 "$work/key.p8"
openssl pkey -in "$work/key.p8" -pubout -out "$work/key.pub"
# A key id of its own per drain: the signing key is new each time, and a provider token an
# earlier drain left in the same database was signed with another one.
kid=$(printf 'BENCH%05d' $((RANDOM % 100000)))
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
port=$(free_port)
control_port=$(free_port)
# shellcheck disable=SC2086  # the extra options are words
"$bin/apns-mock" --cert "$work/certs/server.pem" --key "$work/certs/server.key" --port "$port" --control-port "$control_port" \
  --provider-key "$kid:BENCHTEAM1:$work/key.pub" --topic com.example.bench --read-ahead ${PUSHD_BENCH_MOCK_ARGS:-} >"$work/mock.log" 2>&1 &
mock_pid=$!
metrics_ports=()
for i in $(seq "$instances"); do
if [ "$i" = 1 ] && [ -n "${PUSHD_BENCH_METRICS_PORT:-}" ]; then metrics_ports+=("$PUSHD_BENCH_METRICS_PORT"); else metrics_ports+=("$(free_port)"); fi
campaigns_section=""
[ -n "${PUSHD_BENCH_COALESCE_MS:-}" ] && campaigns_section+=$'\n'"  answer_coalescing_ms: $PUSHD_BENCH_COALESCE_MS"
[ -n "${PUSHD_BENCH_ADAPTIVE:-}" ] && campaigns_section+=$'\n'"  adaptive_in_flight: $PUSHD_BENCH_ADAPTIVE"
[ -n "${PUSHD_BENCH_ONE_READER:-}" ] && campaigns_section+=$'\n'"  read_through_one_transfer: $PUSHD_BENCH_ONE_READER"
[ -n "$campaigns_section" ] && campaigns_section="campaigns:$campaigns_section"
# pushd refuses more claimed transactional jobs (4 workers x batch_size) than apns.max_in_flight.
bench_window=${PUSHD_BENCH_MAX_IN_FLIGHT:-$(( ${PUSHD_BENCH_MAX_CONNECTIONS:-8} * ${PUSHD_BENCH_STREAMS:-500} ))}
bench_batch=$(( bench_window / 4 < 500 ? bench_window / 4 : 500 ))
[ "$bench_batch" -lt 1 ] && bench_batch=1
cat >"$work/pushd$i.yml" <<YAML
database:
  url: $PUSHD_DATABASE_URL
metrics:
  listen: 127.0.0.1:${metrics_ports[$((i - 1))]}
log:
  level: ${PUSHD_BENCH_LOG_LEVEL:-$([ "$transactional" -gt 0 ] && echo debug || echo warning)}
apns:
  host: 127.0.0.1:$port
  ca_file: $work/certs/ca.pem
  streams_per_connection: ${PUSHD_BENCH_STREAMS:-500}
${PUSHD_BENCH_MAX_CONNECTIONS:+  max_connections_per_app: $PUSHD_BENCH_MAX_CONNECTIONS}
${PUSHD_BENCH_MAX_IN_FLIGHT:+  max_in_flight: $PUSHD_BENCH_MAX_IN_FLIGHT}
${PUSHD_BENCH_GROWTH_JUDGED_MS:+  connection_growth_judged_ms: $PUSHD_BENCH_GROWTH_JUDGED_MS}
${PUSHD_BENCH_TX_IDLE_CLOSE_S:+  transactional_idle_close_s: $PUSHD_BENCH_TX_IDLE_CLOSE_S}
workers:
  batch_size: $bench_batch
${campaigns_section}
apps:
  - name: bench
    bundle_id: com.example.bench
    environment: sandbox
    token:
      team_id: BENCHTEAM1
      key_id: $kid
      key_file: $work/key.p8
YAML
done
payload='{"aps":{"alert":{"title":"Spring sale","body":"20% off everything in the store today only"},"sound":"default","badge":1},"campaign":"spring-2026","offer":"SALE20"}'
"$bin/pushd" migrate >/dev/null
id=$("$bin/pushd" campaign create --config "$work/pushd1.yml" --app bench --name bench --payload "$payload" ${PUSHD_BENCH_RATE:+--rate "$PUSHD_BENCH_RATE"})
python3 -c "
import sys
w=sys.stdout.write
for i in range($targets): w('%064x\n' % (i * 2654435761 + 1))" >"$work/targets.txt"
echo "pushd drain benchmark: $targets targets, payload ${#payload} bytes, $(nproc) cores"
"$bin/pushd" campaign import "$id" "$work/targets.txt" | sed 's/^/  import: /'
"$bin/pushd" campaign start "$id" >/dev/null

clock_ticks=$(getconf CLK_TCK)
# CPU ticks of a process and of its children, live and exited (a PostgreSQL backend ends
# with its connection): what the machine spends beside pushd per notification.
tree_ticks() {
  local pid=$1 total=0 child
  total=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$pid/stat")
  for child in $(ps -o pid= --ppid "$pid"); do
    total=$((total + $(awk '{print $14 + $15 + $16 + $17}' "/proc/$child/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
postmaster=$(head -1 "$(psql -X -At "$PUSHD_DATABASE_URL" -c "SHOW data_directory")/postmaster.pid")
pg_ticks_before=$(tree_ticks "$postmaster")
mock_ticks_before=$(tree_ticks "$mock_pid")
start=$(date +%s.%N)
for i in $(seq "$instances"); do
  wrap=(); [ "$i" = 1 ] && [ -n "${PUSHD_BENCH_WRAP:-}" ] && read -r -a wrap <<<"$PUSHD_BENCH_WRAP"
  "${wrap[@]}" "$bin/pushd" run --config "$work/pushd$i.yml" 2>"$work/pushd$i.log" &
  pushd_pids+=($!)
done
probe_pid=
if [ -n "${PUSHD_BENCH_PROBE_SECONDS:-}" ]; then
  (sleep 3; bash "$(dirname "$0")/probe.sh" "$PUSHD_BENCH_PROBE_SECONDS" "$control_port" pushd="${pushd_pids[0]}" mock-during-drain="$mock_pid" \
     >"$work/probe.drain" 2>&1 || true) &
  probe_pid=$!
fi
# Transactional jobs while the campaign drains: one INSERT per transaction, 20 ms apart
# (PUSHD_BENCH_TX_GAP_MS). Each
# prints its id and created_at, and the statement after it the server's clock once the
# COMMIT has returned (tx-latency.py). They start once the first daemon's /readyz answers and
# a second later (the drain under way): a daemon still starting on a loaded host would
# otherwise add its start to the first jobs. psql connects before the first INSERT, and
# created_at is each INSERT's own transaction start, so psql's start is never counted.
tx_pid=
if [ "$transactional" -gt 0 ]; then
  (for _ in $(seq 300); do curl -sf "http://127.0.0.1:${metrics_ports[0]}/readyz" >/dev/null && break; sleep 0.1; done
   sleep 1; for n in $(seq "$transactional"); do
     printf "INSERT INTO pushd.jobs (app, device_token, payload) VALUES ('bench', '%064x', '{\"aps\":{\"alert\":\"order %d shipped\"}}') RETURNING 'insert', id, extract(epoch FROM created_at);\n" "$((n + 7000000))" "$n"
     echo "SELECT 'commit', extract(epoch FROM clock_timestamp());"
     echo "SELECT pg_sleep(${PUSHD_BENCH_TX_GAP_MS:-20} / 1000.0);"
   done | psql -X -q -At -F ' ' "$PUSHD_DATABASE_URL" >"$work/inserts.txt") &
  tx_pid=$!
fi
while :; do
  status=$(psql -X -At "$PUSHD_DATABASE_URL" -c "SELECT status FROM pushd.campaigns WHERE id = $id")
  [ "$status" = done ] && break
  for i in $(seq "$instances"); do
    kill -0 "${pushd_pids[$((i - 1))]}" 2>/dev/null || { echo "pushd exited early:"; cat "$work/pushd$i.log"; exit 1; }
  done
  if [ "${PUSHD_BENCH_SMAPS:-0}" = 1 ]; then
    rss_kb=$(awk '/VmRSS/ {print $2}' "/proc/${pushd_pids[0]}/status")
    if [ "$rss_kb" -gt "${smaps_kb:-0}" ]; then smaps_kb=$rss_kb; cp "/proc/${pushd_pids[0]}/smaps" "$work/smaps.peak"; fi
    echo "$rss_kb" >>"$work/rss.samples"
    now_s=$(date +%s)
    if [ -n "${PUSHD_BENCH_TIMELINE:-}" ] && [ "$now_s" -ge "${next_timeline:-0}" ]; then
      next_timeline=$((now_s + PUSHD_BENCH_TIMELINE))
      printf '  timeline: %5.0f s  sent %9s  RSS %.1f MB  VmHWM %.1f MB  connections open %s\n' "$(echo "$(date +%s.%N) - $start" | bc -l)" \
        "$(psql -X -At "$PUSHD_DATABASE_URL" -c "SELECT sent FROM pushd.campaigns WHERE id = $id")" "$(echo "$rss_kb / 1024" | bc -l)" \
        "$(echo "$(awk '/VmHWM/ {print $2}' "/proc/${pushd_pids[0]}/status") / 1024" | bc -l)" \
        "$(curl -s "http://127.0.0.1:$control_port/metrics" | awk '/^apns_mock_connections_open / {print $2}')" >>"$work/timeline"
    fi
  fi
  if [ -n "${PUSHD_BENCH_DRAIN_SECONDS:-}" ] && [ "$(echo "$(date +%s.%N) - $start >= $PUSHD_BENCH_DRAIN_SECONDS" | bc -l)" = 1 ]; then
    echo "  stopped after ${PUSHD_BENCH_DRAIN_SECONDS} s of the drain (campaign $status)"
    break
  fi
  sleep 0.2
done
end=$(date +%s.%N)
[ -n "$probe_pid" ] && wait "$probe_pid"
if [ -n "$tx_pid" ]; then
  wait "$tx_pid"
  while [ "$(psql -X -At "$PUSHD_DATABASE_URL" -c "SELECT count(*) FROM pushd.jobs WHERE app = 'bench'")" != 0 ]; do sleep 0.2; done
fi
pg_ticks=$(( $(tree_ticks "$postmaster") - pg_ticks_before ))
mock_ticks=$(( $(tree_ticks "$mock_pid") - mock_ticks_before ))
cpu_ticks=0; peak_kb=0; switches=0
for pid in "${pushd_pids[@]}"; do
  read -r utime stime < <(awk '{print $14, $15}' "/proc/$pid/stat")
  cpu_ticks=$((cpu_ticks + utime + stime))
  kb=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  [ "$kb" -gt "$peak_kb" ] && peak_kb=$kb
  # Context switches of every thread, voluntary (waits) and not (preempted).
  switches=$((switches + $(cat /proc/"$pid"/task/*/status | awk '/ctxt_switches/ { n += $2 } END { print n + 0 }')))
done
# INSERT → accepted of the transactional jobs, exact, from each job's trace; and from the
# daemons' histograms: the bucket bounds where half and 99 % of the jobs were reached.
tx_p50=; tx_p99=; tx_mean=; tx_exact=
if [ "$transactional" -gt 0 ]; then
  tx_report=$(python3 "$(dirname "$0")/tx-latency.py" "$work/inserts.txt" "$work"/pushd*.log)
  tx_exact=$(sed -n 's/^tx //p' <<<"$tx_report")
  buckets=""; sums=""
  for mport in "${metrics_ports[@]}"; do
    scrape=$(curl -s "http://127.0.0.1:$mport/metrics")
    buckets+=$(grep '^pushd_job_delivery_latency_seconds_bucket' <<<"$scrape" || true)$'\n'
    sums+=$(grep -E '^pushd_job_delivery_latency_seconds_(sum|count)' <<<"$scrape" || true)$'\n'
  done
  # The mean from the histogram's sum and count: finer than the bucket bounds.
  tx_mean=$(awk '/_sum/ { s += $NF } /_count/ { n += $NF } END { if (n > 0) printf "%.2f", s / n * 1000; else print "n/a" }' <<<"$sums")
  read -r tx_p50 tx_p99 < <(sed -n 's/.*le="\([^"]*\)".* \([0-9.e+]*\)$/\1 \2/p' <<<"$buckets" |
    awk '{ total[$1] += $2 } END { for (le in total) print le, total[le] }' | sort -g |
    awk '{ le[NR] = $1; n[NR] = $2 } END { all = n[NR]; p50 = "n/a"; p99 = "n/a"
           for (i = NR; i >= 1; i--) { if (n[i] >= all * 0.5) p50 = le[i] * 1000; if (n[i] >= all * 0.99) p99 = le[i] * 1000 }
           print p50, p99 }')
fi
mock_metrics=$(curl -s "http://127.0.0.1:$control_port/metrics")
accepted=$(awk '/^apns_mock_accepted_total/ {print $2}' <<<"$mock_metrics")
connections=$(awk '/^apns_mock_connections_accepted_total/ {print $2}' <<<"$mock_metrics")
# Accepted counts every reconnect; the peak is how many were open at once, and the connections
# pushd ended itself (without a GOAWAY from the mock) say where reconnects came from.
connections_peak=$(awk '/^apns_mock_connections_open_peak/ {print $2}' <<<"$mock_metrics")
closed_by_client=$(awk '/^apns_mock_connections_closed_by_client_total/ {print $2}' <<<"$mock_metrics")
sent=$(psql -X -At "$PUSHD_DATABASE_URL" -c "SELECT sent FROM pushd.campaigns WHERE id = $id")
jwt=$(psql -X -At "$PUSHD_DATABASE_URL" -c "SELECT token FROM pushd.provider_tokens WHERE key_id = '$kid'")
# Connections the first daemon's loops added and how they were judged (kept or given up).
growths=$(curl -s "http://127.0.0.1:${metrics_ports[0]}/metrics" | awk '/^pushd_apns_connection_growths_total/ { n = $1; sub(/.*result="/, "", n); sub(/".*/, "", n); g[n] += $NF }
  END { out = ""; for (r in g) out = out " " r "=" g[r]; print (out == "" ? " none" : out) }')
for pid in "${pushd_pids[@]}"; do kill -TERM "$pid"; wait "$pid" || true; done
pushd_pids=()

# What the campaign lane's adaptive in-flight limit settled at (logged at info).
grep -h '"event":"in_flight_limit"' "$work"/pushd*.log 2>/dev/null | sed 's/^/  limit: /' | tail -8 || true
# The growth verdicts (logged at info): the rates before and after, and the rate needed.
grep -h '"event":"connection_growth"' "$work"/pushd*.log 2>/dev/null | sed 's/^/  growth: /' | tail -8 || true
elapsed=$(echo "$end - $start" | bc -l)
cpu=$(echo "$cpu_ticks / $clock_ticks" | bc -l)
rate=$(echo "$sent / $elapsed" | bc -l)

# The reference: h2load sending the very same request to the same mock.
printf '%s' "$payload" >"$work/payload.json"
h2_requests=$(( targets < 300000 ? targets : 300000 ))
h2rate=0; h2ok=0
if [ "${PUSHD_BENCH_H2LOAD:-1}" = 1 ]; then
h2out=$(h2load -n "$h2_requests" -c 4 -m 100 -t 1 -d "$work/payload.json" \
  -H "authorization: bearer $jwt" -H "apns-topic: com.example.bench" -H "apns-push-type: alert" \
  "https://127.0.0.1:$port/3/device/$(printf '%064x' 12345)" 2>&1)
h2rate=$(echo "$h2out" | awk '/^finished in/ {gsub(",", "", $4); print $4}')
h2ok=$(echo "$h2out" | awk '/status codes:/ {print $3}')
fi

# The engine alone (DispatcherBench) sending the very same requests to the same mock, with
# the daemon's shape (2 threads x 1 connection x its streams): what the daemon costs beyond it.
# The header lines the daemon sends for the campaign (apns-priority 10 is APNs's default and
# not sent; docs/dispatcher.md).
daemon_headers=(--header "authorization: bearer $jwt" --header "apns-topic: com.example.bench" --header "apns-push-type: alert")
engine_line=""
if [ "${PUSHD_BENCH_ENGINE:-1}" = 1 ] && [ -x "$bin/DispatcherBench" ]; then
  wrap=(); [ -n "${PUSHD_BENCH_WRAP:-}" ] && read -r -a wrap <<<"$PUSHD_BENCH_WRAP"
  "${wrap[@]}" "$bin/DispatcherBench" --port "$port" --ca "$work/certs/ca.pem" --requests "$h2_requests" --threads 2 \
    --connections 1 --streams "${PUSHD_BENCH_STREAMS:-500}" --label engine-same-requests --device-paths yes \
    --payload-file "$work/payload.json" "${daemon_headers[@]}" >"$work/engine.out" 2>&1 &
  engine_pid=$!
  if [ -n "${PUSHD_BENCH_PROBE_SECONDS:-}" ]; then
    sleep 1
    bash "$(dirname "$0")/probe.sh" "$PUSHD_BENCH_PROBE_SECONDS" "$control_port" engine="$engine_pid" mock-during-engine="$mock_pid" \
      >"$work/probe.engine" 2>&1 || true
  fi
  wait "$engine_pid" || true
  engine_line=$(tail -1 "$work/engine.out")
fi
# The C curl-multi reference sending the very same requests to the same mock, same shape:
# what libcurl itself costs for the daemon's requests.
reference_line=""
if [ "${PUSHD_BENCH_ENGINE:-1}" = 1 ] && command -v cc >/dev/null; then
  cc -O2 -o "$work/curl_reference" "$(dirname "$0")/../CurlReference/curl_reference.c" -lcurl -lpthread
  reference_line=$("$work/curl_reference" "$port" "$work/certs/ca.pem" "$h2_requests" 2 1 "${PUSHD_BENCH_STREAMS:-500}" \
    --device-paths --payload-file "$work/payload.json" "${daemon_headers[@]}" 2>&1 | tail -1 || true)
fi

printf '  pushd:   %d sent in %.1f s = %.0f notifications/s (%d daemon(s); the mock accepted %s on %s connections, at most %s open at once, %s ended by pushd before any GOAWAY of the mock)\n' "$sent" "$elapsed" "$rate" "$instances" "$accepted" "$connections" "${connections_peak:-?}" "${closed_by_client:-?}"
echo "  pushd:   connections grown:$growths"
printf '  pushd:   %.1f CPU ms and %.0f context switches per 1,000 notifications, peak RSS %.1f MB\n' "$(echo "$cpu * 1000000 / $sent" | bc -l)" \
  "$(echo "$switches * 1000 / $sent" | bc -l)" "$(echo "$peak_kb / 1024" | bc -l)"
printf '  beside:  PostgreSQL %.1f and apns-mock %.1f CPU µs per notification during the drain\n' \
  "$(echo "$pg_ticks / $clock_ticks * 1000000 / $sent" | bc -l)" "$(echo "$mock_ticks / $clock_ticks * 1000000 / $sent" | bc -l)"
if [ "${PUSHD_BENCH_SMAPS:-0}" = 1 ] && [ -f "$work/smaps.peak" ]; then
  echo "  pushd memory at its highest sampled RSS ($((smaps_kb / 1024)) MB, sampled every 0.2 s):"
  python3 "$(dirname "$0")/smaps-breakdown.py" "$work/smaps.peak" pushd
  cat "$work/timeline" 2>/dev/null || true
  # Growth with the campaign shows as a later quarter of the drain above an earlier one.
  awk '{ rss[NR] = $1 } END { printf "  highest RSS in each quarter of the drain:"
       for (q = 0; q < 4; q++) { top = 0; for (i = int(q * NR / 4) + 1; i <= int((q + 1) * NR / 4); i++) if (rss[i] > top) top = rss[i]
       printf " %.1f MB", top / 1024 }; print "" }' "$work/rss.samples"
fi
if [ -n "${PUSHD_BENCH_PEER:-}" ]; then
  # shellcheck disable=SC2086  # a command with its arguments
  peer=$($PUSHD_BENCH_PEER "$port" "$work/certs/ca.pem" "$work/key.p8" $kid BENCHTEAM1 com.example.bench 2>&1 | tail -1)
  echo "peer ${peer#result }"
fi
if [ "$transactional" -gt 0 ]; then
  grep -v '^tx ' <<<"$tx_report"
  printf '  transactional: %d jobs during the drain, histogram: INSERT → accepted p50 ≤ %s ms, p99 ≤ %s ms, mean %s ms\n' "$transactional" "$tx_p50" "$tx_p99" "$tx_mean"
fi
cat "$work"/probe.* 2>/dev/null || true
if [ -n "$engine_line" ]; then
  echo "  engine:  $engine_line"
  echo "engine ${engine_line}"
fi
if [ -n "$reference_line" ]; then
  echo "  C reference: $reference_line"
  echo "reference ${reference_line}"
fi
if [ "${PUSHD_BENCH_H2LOAD:-1}" = 1 ]; then
  printf '  h2load:  %.0f requests/s (%s of %s answered 2xx) against the same mock\n' "$h2rate" "$h2ok" "$h2_requests"
  printf '  ratio:   pushd / h2load = %.2f\n' "$(echo "$rate / $h2rate" | bc -l)"
fi
# Campaign and transactional notifications the mock accepted beyond one each (libcurl's
# resends and redelivery after a lost claim both count).
duplicates=$(( ${accepted%.*} - sent - transactional ))
# tx_exact_* are the exact INSERT → accepted figures (and commit_* COMMIT → accepted) of tx-latency.py.
printf 'result rate=%.0f cpu_us=%.1f peak_rss_kb=%d sent=%d accepted=%s connections=%s duplicates=%d h2load_rate=%.0f tx_p50_ms=%s tx_p99_ms=%s tx_mean_ms=%s switches_per_1000=%.0f pg_cpu_us=%.1f mock_cpu_us=%.1f%s\n' \
  "$rate" "$(echo "$cpu * 1000000 / ($sent + $transactional)" | bc -l)" "$peak_kb" "$sent" "$accepted" "$connections" "$duplicates" "$h2rate" "${tx_p50:-n/a}" "${tx_p99:-n/a}" "${tx_mean:-n/a}" "$(echo "$switches * 1000 / $sent" | bc -l)" \
  "$(echo "$pg_ticks / $clock_ticks * 1000000 / $sent" | bc -l)" "$(echo "$mock_ticks / $clock_ticks * 1000000 / $sent" | bc -l)" \
  "$(for pair in $tx_exact; do printf ' tx_exact_%s' "$pair"; done)"
