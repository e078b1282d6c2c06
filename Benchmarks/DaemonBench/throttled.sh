#!/usr/bin/env bash
# A throttled campaign keeps its pace. One `pushd run` (release build, default retry
# settings) drains two campaigns of N targets (default 50,000) from a throwaway PostgreSQL
# to apns-mock, one after the other in the same run: the first with every answer 200, the
# second with 1% 429 TooManyRequests and 1% 500 InternalServerError (after a warm-up
# campaign of the same size). Prints for each the
# first pass (every target sent once; waiting targets are parked) and the time until the
# campaign is done (the last retry waits out its backoff: 429s start from 10 s), and the
# ratio of the two first-pass rates.
#
#   Benchmarks/DaemonBench/throttled.sh [targets]
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" != --inner ]; then
  export PATH="$PATH:/opt/swift/usr/bin"
  bash scripts/build-release.sh >/dev/null
  exec scripts/with-postgres.sh bash "$0" --inner "$(bash scripts/build-release.sh --show-bin-path)" "${1:-50000}"
fi
bin=$2
targets=$3
. "$(dirname "$0")/world.sh"
echo "throttled campaign benchmark: $targets targets per campaign, $(nproc) cores"
"$bin/pushd" run --config "$work/pushd.yml" 2>"$work/pushd.log" &
pushd_pid=$!
pids+=("$pushd_pid")

# Drains one campaign; prints "first-pass-seconds done-seconds".
drain() {
  local offset=$1 id start first= status chunks
  id=$("$bin/pushd" campaign create --config "$work/pushd.yml" --app bench --name "bench-$offset" --payload "$payload")
  targets_file "$targets" "$offset" >"$work/targets-$offset.txt"
  "$bin/pushd" campaign import "$id" "$work/targets-$offset.txt" >/dev/null
  start=$(date +%s.%N)
  "$bin/pushd" campaign start "$id" >/dev/null
  while :; do
    IFS='|' read -r status chunks < <(sql "SELECT status, chunks_done >= chunks_total FROM pushd.campaigns WHERE id = $id")
    if [ -z "$first" ] && [ "$chunks" = t ]; then first=$(echo "$(date +%s.%N) - $start" | bc -l); fi
    [ "$status" = done ] && break
    kill -0 "$pushd_pid" 2>/dev/null || { echo "pushd exited early:" >&2; cat "$work/pushd.log" >&2; exit 1; }
    sleep 0.05
  done
  local sent failed
  IFS='|' read -r sent failed < <(sql "SELECT sent, failed FROM pushd.campaigns WHERE id = $id")
  [ "$sent" = "$targets" ] && [ "$failed" = 0 ] || { echo "campaign $id: sent $sent, failed $failed of $targets" >&2; exit 1; }
  echo "$first $(echo "$(date +%s.%N) - $start" | bc -l)"
}

# A first campaign warms the connections, the provider token and PostgreSQL's caches.
read -r _ _ < <(drain $(( 3 * targets )))
read -r clean_first clean_done < <(drain 0)
curl -s -X PUT --data '{"tooManyRequestsRate":0.01,"internalServerErrorRate":0.01}' "http://127.0.0.1:$control/faults" >/dev/null
read -r faulty_first faulty_done < <(drain "$targets")
printf '  no faults:          every target sent once after %.2f s = %.0f/s, done after %.2f s\n' \
  "$clean_first" "$(echo "$targets / $clean_first" | bc -l)" "$clean_done"
printf '  1%% 429 + 1%% 500:    every target sent once after %.2f s = %.0f/s, done after %.2f s (the last retries wait out their backoff)\n' \
  "$faulty_first" "$(echo "$targets / $faulty_first" | bc -l)" "$faulty_done"
printf '  ratio:              faulty / fault-free first-pass rate = %.2f\n' "$(echo "$clean_first / $faulty_first" | bc -l)"
