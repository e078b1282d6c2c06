#!/usr/bin/env bash
# Called by run.sh inside scripts/with-postgres.sh (PUSHD_DATABASE_URL is set).
set -euo pipefail
bin=$1
targets=$2
work=$(mktemp -d /tmp/pushd-bench.XXXXXX)
mock_pid=; pushd_pid=
cleanup() {
  [ -n "$pushd_pid" ] && kill -TERM "$pushd_pid" 2>/dev/null && wait "$pushd_pid" 2>/dev/null || true
  [ -n "$mock_pid" ] && kill -TERM "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$bin/apns-mock" gen-certs "$work/certs" >/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.p8" 2>/dev/null
chmod 600 "$work/key.p8"
openssl pkey -in "$work/key.p8" -pubout -out "$work/key.pub"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$bin/apns-mock" --cert "$work/certs/server.pem" --key "$work/certs/server.key" --port "$port" \
  --provider-key "BENCHKEY01:BENCHTEAM1:$work/key.pub" --topic com.example.bench >"$work/mock.log" 2>&1 &
mock_pid=$!
cat >"$work/pushd.yml" <<YAML
database:
  url: $PUSHD_DATABASE_URL
metrics:
  listen: 127.0.0.1:${PUSHD_BENCH_METRICS_PORT:-0}
log:
  level: warning
apns:
  host: 127.0.0.1:$port
  ca_file: $work/certs/ca.pem
  streams_per_connection: ${PUSHD_BENCH_STREAMS:-500}
apps:
  - name: bench
    bundle_id: com.example.bench
    environment: sandbox
    token:
      team_id: BENCHTEAM1
      key_id: BENCHKEY01
      key_file: $work/key.p8
YAML
payload='{"aps":{"alert":{"title":"Spring sale","body":"20% off everything in the store today only"},"sound":"default","badge":1},"campaign":"spring-2026","offer":"SALE20"}'
"$bin/pushd" migrate >/dev/null
id=$("$bin/pushd" campaign create --app bench --name bench --payload "$payload")
python3 -c "
import sys
w=sys.stdout.write
for i in range($targets): w('%064x\n' % (i * 2654435761 + 1))" >"$work/targets.txt"
echo "pushd drain benchmark: $targets targets, payload ${#payload} bytes, $(nproc) cores"
"$bin/pushd" campaign import "$id" "$work/targets.txt" | sed 's/^/  import: /'
"$bin/pushd" campaign start "$id" >/dev/null

clock_ticks=$(getconf CLK_TCK)
start=$(date +%s.%N)
"$bin/pushd" run --config "$work/pushd.yml" 2>"$work/pushd.log" &
pushd_pid=$!
while :; do
  status=$(psql -X -At "$PUSHD_DATABASE_URL" -c "SELECT status FROM pushd.campaigns WHERE id = $id")
  [ "$status" = done ] && break
  kill -0 "$pushd_pid" 2>/dev/null || { echo "pushd exited early:"; cat "$work/pushd.log"; exit 1; }
  sleep 0.2
done
end=$(date +%s.%N)
read -r utime stime < <(awk '{print $14, $15}' "/proc/$pushd_pid/stat")
peak_kb=$(awk '/VmHWM/ {print $2}' "/proc/$pushd_pid/status")
sent=$(psql -X -At "$PUSHD_DATABASE_URL" -c "SELECT sent FROM pushd.campaigns WHERE id = $id")
jwt=$(psql -X -At "$PUSHD_DATABASE_URL" -c "SELECT token FROM pushd.provider_tokens LIMIT 1")
kill -TERM "$pushd_pid"; wait "$pushd_pid" || true; pushd_pid=

elapsed=$(echo "$end - $start" | bc -l)
cpu=$(echo "($utime + $stime) / $clock_ticks" | bc -l)
rate=$(echo "$sent / $elapsed" | bc -l)

# The reference: h2load sending the very same request to the same mock.
printf '%s' "$payload" >"$work/payload.json"
h2_requests=$(( targets < 300000 ? targets : 300000 ))
h2out=$(h2load -n "$h2_requests" -c 4 -m 100 -t 1 -d "$work/payload.json" \
  -H "authorization: bearer $jwt" -H "apns-topic: com.example.bench" -H "apns-push-type: alert" -H "apns-priority: 10" \
  "https://127.0.0.1:$port/3/device/$(printf '%064x' 12345)" 2>&1)
h2rate=$(echo "$h2out" | awk '/^finished in/ {gsub(",", "", $4); print $4}')
h2ok=$(echo "$h2out" | awk '/status codes:/ {print $3}')

printf '  pushd:   %d sent in %.1f s = %.0f notifications/s\n' "$sent" "$elapsed" "$rate"
printf '  pushd:   %.1f CPU ms per 1,000 notifications, peak RSS %.1f MB\n' "$(echo "$cpu * 1000000 / $sent" | bc -l)" "$(echo "$peak_kb / 1024" | bc -l)"
printf '  h2load:  %.0f requests/s (%s of %s answered 2xx) against the same mock\n' "$h2rate" "$h2ok" "$h2_requests"
printf '  ratio:   pushd / h2load = %.2f\n' "$(echo "$rate / $h2rate" | bc -l)"
