#!/usr/bin/env bash
# A throttled campaign keeps its pace. One `pushd run` (release build, default retry
# settings) drains two campaigns of N targets (default 50,000) from a throwaway PostgreSQL
# to apns-mock, one after the other in the same run: the first with every answer 200, the
# second with 1% 429 TooManyRequests and 1% 500 InternalServerError. Prints for each the
# first pass (every target sent once; waiting targets are parked) and the time until the
# campaign is done (the last retry waits out its backoff: 429s start from 10 s), and the
# ratio of the two first-pass rates.
#
#   Benchmarks/DaemonBench/throttled.sh [targets]
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" != --inner ]; then
  export PATH="$PATH:/opt/swift/usr/bin"
  swift build -c release --product pushd >/dev/null
  swift build -c release --product apns-mock >/dev/null
  exec scripts/with-postgres.sh bash "$0" --inner "$(swift build -c release --show-bin-path)" "${1:-50000}"
fi
bin=$2
targets=$3
work=$(mktemp -d /tmp/pushd-bench.XXXXXX)
mock_pid=; pushd_pid=
cleanup() {
  [ -n "$pushd_pid" ] && kill -TERM "$pushd_pid" 2>/dev/null && wait "$pushd_pid" 2>/dev/null || true
  [ -n "$mock_pid" ] && kill -TERM "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sql() { psql -X -At "$PUSHD_DATABASE_URL" -c "$1"; }

"$bin/apns-mock" gen-certs "$work/certs" >/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.p8" 2>/dev/null
chmod 600 "$work/key.p8"
openssl pkey -in "$work/key.p8" -pubout -out "$work/key.pub"
port=$(free_port)
control=$(free_port)
"$bin/apns-mock" --cert "$work/certs/server.pem" --key "$work/certs/server.key" --port "$port" --control-port "$control" \
  --provider-key "BENCHKEY01:BENCHTEAM1:$work/key.pub" --topic com.example.bench >"$work/mock.log" 2>&1 &
mock_pid=$!
cat >"$work/pushd.yml" <<YAML
database:
  url: $PUSHD_DATABASE_URL
metrics:
  listen: 127.0.0.1:0
log:
  level: warning
apns:
  host: 127.0.0.1:$port
  ca_file: $work/certs/ca.pem
apps:
  - name: bench
    bundle_id: com.example.bench
    environment: sandbox
    token:
      team_id: BENCHTEAM1
      key_id: BENCHKEY01
      key_file: $work/key.p8
YAML
payload='{"aps":{"alert":{"title":"Spring sale","body":"20% off everything in the store today only"},"sound":"default"}}'
"$bin/pushd" migrate >/dev/null
echo "throttled campaign benchmark: $targets targets per campaign, $(nproc) cores"
"$bin/pushd" run --config "$work/pushd.yml" 2>"$work/pushd.log" &
pushd_pid=$!

# Drains one campaign; prints "first-pass-seconds done-seconds".
drain() {
  local offset=$1 id start first= status chunks
  id=$("$bin/pushd" campaign create --app bench --name "bench-$offset" --payload "$payload")
  python3 -c "
import sys
w=sys.stdout.write
for i in range($targets): w('%064x\n' % ((i + $offset) * 2654435761 + 1))" >"$work/targets-$offset.txt"
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

read -r clean_first clean_done < <(drain 0)
curl -s -X PUT --data '{"tooManyRequestsRate":0.01,"internalServerErrorRate":0.01}' "http://127.0.0.1:$control/faults" >/dev/null
read -r faulty_first faulty_done < <(drain "$targets")
printf '  no faults:          every target sent once after %.2f s = %.0f/s, done after %.2f s\n' \
  "$clean_first" "$(echo "$targets / $clean_first" | bc -l)" "$clean_done"
printf '  1%% 429 + 1%% 500:    every target sent once after %.2f s = %.0f/s, done after %.2f s (the last retries wait out their backoff)\n' \
  "$faulty_first" "$(echo "$targets / $faulty_first" | bc -l)" "$faulty_done"
printf '  ratio:              faulty / fault-free first-pass rate = %.2f\n' "$(echo "$clean_first / $faulty_first" | bc -l)"
