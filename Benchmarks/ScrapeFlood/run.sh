#!/usr/bin/env bash
# The sending rate of one pushd draining a campaign (Benchmarks/DaemonBench/drain.sh)
# with and without a flood of requests on its metrics endpoint, how long /healthz takes
# to answer meanwhile, and the CPU the metrics server's threads take.
#
# The machine is shared, so the rate drifts by itself; comparing two separate drains
# showed nothing (they varied 1.9x). Instead one drain is cut into windows of equal
# length that alternate without and with flood (after a warm-up window that is not
# counted), beginning and ending without, so every flooded window has a window without
# flood on either side; the flood's effect is the median of the ratio of each flooded window to the
# mean of the two windows beside it, which cancels drift slower than a window. Medians of
# each kind are printed too.
#
# The flood: 32 keep-alive connections from one Python process (flood.py), paced at
# RATE scrapes/s each (100: 3,200 scrapes/s, far beyond any real scraper) or as fast as
# they go (0). The client runs on the same cores as pushd, so its own CPU is printed as
# well: that share of a drop is the test's, not the server's.
#
#   Benchmarks/ScrapeFlood/run.sh [targets] [windows] [seconds] [rate]
#   (defaults: 4,000,000 targets, 21 windows of 8 s, rate 100; an even window count is
#   rounded up). A window of 8 s is short enough that the load of other work on the
#   machine changes little within three neighbouring windows, and long enough for
#   about 100,000 notifications.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/opt/swift/usr/bin"
targets=${1:-4000000}
windows=${2:-21}
windows=$((windows | 1))
seconds=${3:-8}
rate=${4:-100}
bash scripts/build-release.sh >/dev/null
bin=$(bash scripts/build-release.sh --show-bin-path)
work=$(mktemp -d /tmp/pushd-flood.XXXXXX)
drain_pid=; flood_pid=; probe_pid=
cleanup() {
  for pid in $flood_pid $probe_pid $drain_pid; do kill "$pid" 2>/dev/null || true; done
  [ -n "$flood_pid" ] && kill -CONT "$flood_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
port=$(free_port)
clock_ticks=$(getconf CLK_TCK)

# Asks /healthz every 0.2 s and records the time and how long each answer took, or "fail"
# when none came within 5 s.
probe() {
  local took status
  while :; do
    status=0
    took=$(curl -s -o /dev/null --max-time 5 -w '%{time_total}' "http://127.0.0.1:$port/healthz") || status=$?
    if [ "$status" = 0 ]; then echo "$(date +%s.%N) $took"; else echo "$(date +%s.%N) fail"; fi
    sleep 0.2
  done >"$work/probe.log"
}

# Notifications sent so far (all series of pushd_notifications_sent_total).
sent_total() {
  curl -s --max-time 10 --retry 2 "http://127.0.0.1:$port/metrics" |
    awk '/^pushd_notifications_sent_total/ { total += $NF } END { printf "%.0f\n", total }'
}

# CPU ticks so far of the metrics server's pool threads (libmicrohttpd names them
# MHD-worker), of the whole pushd process, and of the flood client (0 when none).
mhd_ticks() {
  local total=0 task
  for task in /proc/"$pushd_pid"/task/*; do
    [ "$(cat "$task/comm" 2>/dev/null)" = MHD-worker ] || continue
    total=$((total + $(awk '{print $14 + $15}' "$task/stat")))
  done
  echo "$total"
}
process_ticks() { [ -n "$1" ] && awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }

echo "scrape flood benchmark: $targets targets, $windows windows of $seconds s after a warm-up, flood of 32 connections at rate $rate/s each (0: unpaced), $(nproc) cores, load average $(cut -d' ' -f1 /proc/loadavg)"
PUSHD_BENCH_METRICS_PORT=$port PUSHD_BENCH_H2LOAD=0 scripts/with-postgres.sh \
  bash Benchmarks/DaemonBench/drain.sh "$bin" "$targets" >"$work/drain.log" 2>&1 &
drain_pid=$!
until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do
  kill -0 "$drain_pid" 2>/dev/null || { echo "the drain ended before pushd answered:"; cat "$work/drain.log"; exit 1; }
  sleep 0.1
done
pushd_pid=$(ss -Hltnp "sport = :$port" | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -n 1)
probe & probe_pid=$!
# One flood client for the whole run, stopped (SIGSTOP) between its windows and continued
# (SIGCONT) in them, so no window pays for starting Python. flood.count: scrapes answered
# so far, written every second.
echo 0 >"$work/flood.count"
python3 Benchmarks/ScrapeFlood/flood.py "$port" /metrics 32 "$rate" "$work/flood.count" & flood_pid=$!
sleep "$seconds"   # warm-up: connections open, the first chunks claimed, the client ready
kill -STOP "$flood_pid"

printf '  %-6s %-8s %14s %14s %14s %14s\n' window flood "notifications/s" "MHD CPU %" "pushd CPU %" "client CPU %"
for window in $(seq "$windows"); do
  flooded=$((window % 2 == 0))
  [ "$flooded" = 1 ] && kill -CONT "$flood_pid"
  start=$(date +%s.%N); sent_start=$(sent_total); scrapes_start=$(cat "$work/flood.count")
  mhd_start=$(mhd_ticks); pushd_start=$(process_ticks "$pushd_pid"); client_start=$(process_ticks "$flood_pid")
  sleep "$seconds"
  client_end=$(process_ticks "$flood_pid"); mhd_end=$(mhd_ticks); pushd_end=$(process_ticks "$pushd_pid")
  sent_end=$(sent_total); end=$(date +%s.%N)
  [ "$flooded" = 1 ] && kill -STOP "$flood_pid"
  scrapes=$(( $(cat "$work/flood.count") - scrapes_start ))
  if [ "$sent_end" = "$sent_start" ]; then echo "  window $window: nothing sent (the campaign is drained: give more targets)"; exit 1; fi
  elapsed=$(echo "$end - $start" | bc -l)
  window_rate=$(echo "($sent_end - $sent_start) / $elapsed" | bc -l)
  percent() { echo "100 * ($1) / $clock_ticks / $elapsed" | bc -l; }
  printf '  %-6s %-8s %14.0f %14.1f %14.1f %14.1f   %s\n' "$window" "$([ "$flooded" = 1 ] && echo yes || echo no)" "$window_rate" \
    "$(percent "$mhd_end - $mhd_start")" "$(percent "$pushd_end - $pushd_start")" "$(percent "$client_end - $client_start")" \
    "$([ "$flooded" = 1 ] && echo "about $scrapes scrapes answered")"
  echo "$flooded $window_rate" >>"$work/windows"
done
kill "$probe_pid" 2>/dev/null || true; wait "$probe_pid" 2>/dev/null || true; probe_pid=
kill "$flood_pid"; kill -CONT "$flood_pid"; wait "$flood_pid" 2>/dev/null || true; flood_pid=
# Ends the drain early: drain.sh sees pushd gone and cleans up the mock and PostgreSQL.
kill -TERM "$pushd_pid" 2>/dev/null || true
wait "$drain_pid" 2>/dev/null || true; drain_pid=

python3 - "$work/windows" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1])]
flags, rates = [int(r[0]) for r in rows], [float(r[1]) for r in rows]
plain = [r for f, r in zip(flags, rates) if not f]
flooded = [r for f, r in zip(flags, rates) if f]
# Each flooded window against the mean of the unflooded windows on either side of it.
ratios = []
for i, f in enumerate(flags):
    if f:
        beside = [rates[j] for j in (i - 1, i + 1) if 0 <= j < len(rates) and not flags[j]]
        ratios.append(rates[i] / statistics.mean(beside))
print(f"  median without flood {statistics.median(plain):.0f}/s, with flood {statistics.median(flooded):.0f}/s "
      f"({100 * statistics.median(flooded) / statistics.median(plain):.1f} %)")
print("  flooded window / mean of its neighbours: " + ", ".join(f"{100 * r:.1f} %" for r in ratios)
      + f"; median {100 * statistics.median(ratios):.1f} %")
PY
probes=$(grep -c . "$work/probe.log" || true)
fails=$(grep -c fail "$work/probe.log" || true)
slowest=$(grep -v fail "$work/probe.log" | awk '{print $2}' | sort -g | tail -n 1)
printf '  /healthz: %s probes, %s unanswered within 5 s, slowest %.3f s\n' "$probes" "$fails" "${slowest:-0}"
