#!/usr/bin/env bash
# The campaign rate cap is the rate you get. For every cap and number of instances, one
# campaign capped at that rate is drained by that many `pushd run` processes (release
# builds, one database, one apns-mock); the mock's accepted count is sampled every 0.2 s
# and the delivered rate of every 10-second window after the first is printed with its
# ratio to the cap. The campaign is sized for `seconds` (default 35) of sending. Run the
# uncapped drain (Benchmarks/DaemonBench/run.sh) first: the cap holds only below it.
#
#   Benchmarks/DaemonBench/ratecap.sh ["100 500 2000 5000 20000"] ["1 2 3"] [seconds]
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" != --inner ]; then
  export PATH="$PATH:/opt/swift/usr/bin"
  bash scripts/build-release.sh >/dev/null
  exec scripts/with-postgres.sh bash "$0" --inner "$(bash scripts/build-release.sh --show-bin-path)" \
    "${1:-100 500 2000 5000 20000}" "${2:-1 2 3}" "${3:-35}"
fi
bin=$2
caps=$3
instance_counts=$4
seconds=$5
. "$(dirname "$0")/world.sh"
accepted() { curl -s "http://127.0.0.1:$control/metrics" | awk '$1 == "apns_mock_accepted_total" {print $2}'; }
echo "campaign rate cap benchmark: 10-second windows after the first, $(nproc) cores"
offset=0
for instances in $instance_counts; do
  for cap in $caps; do
    targets=$(( cap * seconds ))
    id=$("$bin/pushd" campaign create --config "$work/pushd.yml" --app bench --name "cap-$cap-$instances" --payload "$payload" --rate "$cap")
    targets_file "$targets" "$offset" >"$work/targets.txt"
    offset=$(( offset + targets ))
    "$bin/pushd" campaign import "$id" "$work/targets.txt" >/dev/null
    for _ in $(seq "$instances"); do
      "$bin/pushd" run --config "$work/pushd.yml" 2>>"$work/pushd.log" &
      pids+=($!)
    done
    sleep 2
    base=$(accepted)
    "$bin/pushd" campaign start "$id" >/dev/null
    : >"$work/samples"
    while :; do
      now=$(date +%s.%N); count=$(accepted)
      echo "$now $(( count - base ))" >>"$work/samples"
      [ "$(( count - base ))" -ge "$targets" ] && break
      sleep 0.2
    done
    stop_pids
    python3 - "$work/samples" "$cap" "$instances" "$targets" <<'PY'
import sys
path, cap, instances, targets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
samples = [tuple(map(float, line.split())) for line in open(path)]
first = next(t for t, n in samples if n > 0)
end = next(t for t, n in samples if n >= targets)
def delivered(at):
    return max([n for t, n in samples if t <= at] or [0])
rates = []
start = first + 10
while start + 10 <= end:
    rates.append((delivered(start + 10) - delivered(start)) / 10)
    start += 10
ratios = [r / cap for r in rates]
print(f"  cap {cap:>6}/s, {instances} instance(s): windows " + ", ".join(f"{r:.0f}" for r in rates)
      + (f"/s; ratio to the cap {min(ratios):.3f}-{max(ratios):.3f}" if ratios else ": campaign too short for a window"))
PY
  done
done
