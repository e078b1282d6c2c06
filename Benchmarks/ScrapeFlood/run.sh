#!/usr/bin/env bash
# The sending rate of one pushd draining a campaign (Benchmarks/DaemonBench/drain.sh)
# with and without a flood of requests on its metrics endpoint, and how long /healthz
# takes to answer meanwhile. Four runs: no flood; a paced flood (32 connections,
# 100 scrapes/s each: 3,200/s, far beyond any real scraper); an unpaced flood (as fast as
# flood.py can send, one Python process: about what one client can do); then no flood
# again, to show how much the rate varies by itself. The flood runs on the same machine,
# so the unpaced run also measures the CPU the flooding client takes from pushd.
#
#   Benchmarks/ScrapeFlood/run.sh [targets]   (default 200,000)
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/opt/swift/usr/bin"
targets=${1:-200000}
swift build -c release --product pushd >/dev/null
swift build -c release --product apns-mock >/dev/null
bin=$(swift build -c release --show-bin-path)
work=$(mktemp -d /tmp/pushd-flood.XXXXXX)
flood_pid=; probe_pid=
cleanup() {
  [ -n "$flood_pid" ] && kill "$flood_pid" 2>/dev/null || true
  [ -n "$probe_pid" ] && kill "$probe_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# Waits for the endpoint, then floods /metrics (flood.py) until killed; flood.count holds
# the number of scrapes answered so far.
flood() {
  local port=$1 rate=$2
  until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do sleep 0.05; done
  exec python3 Benchmarks/ScrapeFlood/flood.py "$port" /metrics 32 "$rate" "$work/flood.count"
}

# Asks /healthz every 0.2 s and records how long each answer took, or "fail" when none
# came within 5 s. Stops when the connection is refused: pushd has ended.
probe() {
  local port=$1 took status
  until curl -sf "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do sleep 0.05; done
  while :; do
    status=0
    took=$(curl -s -o /dev/null --max-time 5 -w '%{time_total}' "http://127.0.0.1:$port/healthz") || status=$?
    [ "$status" = 7 ] && break
    if [ "$status" = 0 ]; then echo "$took"; else echo fail; fi
    sleep 0.2
  done >"$work/probe.log"
}

run() {
  local label=$1; shift
  local port; port=$(free_port)
  : >"$work/probe.log"; echo 0 >"$work/flood.count"
  if [[ "$label" != no\ flood* ]]; then flood "$port" "$1" & flood_pid=$!; fi
  probe "$port" & probe_pid=$!
  local line
  line=$(PUSHD_BENCH_METRICS_PORT=$port scripts/with-postgres.sh bash Benchmarks/DaemonBench/drain.sh "$bin" "$targets" \
         | awk '/notifications\/s/ && /pushd:/')
  kill "$probe_pid" 2>/dev/null || true; wait "$probe_pid" 2>/dev/null || true; probe_pid=
  if [ -n "$flood_pid" ]; then kill "$flood_pid" 2>/dev/null || true; wait "$flood_pid" 2>/dev/null || true; flood_pid=; fi
  local rate; rate=$(echo "$line" | awk '{print $(NF-1)}')
  local probes max fails
  probes=$(grep -c . "$work/probe.log" || true)
  fails=$(grep -c fail "$work/probe.log" || true)
  max=$(grep -v fail "$work/probe.log" | sort -g | tail -n 1)
  local scrapes
  scrapes=$(cat "$work/flood.count")
  printf '  %-14s %8s notifications/s   /healthz: %s probes, %s unanswered, slowest %.3f s   flood: %s scrapes answered\n' \
    "$label" "$rate" "$probes" "$fails" "${max:-0}" "$scrapes"
  echo "$rate" >"$work/rate.$(echo "$label" | tr ' ' _)"
}

echo "scrape flood benchmark: $targets targets, $(nproc) cores (a shared machine: figures vary from run to run)"
run "no flood"
run "paced flood" 100
run "unpaced flood" 0
run "no flood again"
base=$(echo "($(cat "$work/rate.no_flood") + $(cat "$work/rate.no_flood_again")) / 2" | bc -l)
for label in paced_flood unpaced_flood; do
  printf '  %-14s sending rate %.0f%% of the mean of the two runs without flood\n' "${label/_/ }" "$(echo "100 * $(cat "$work/rate.$label") / $base" | bc -l)"
done
