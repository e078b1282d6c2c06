# Sourced by the daemon benchmarks, inside scripts/with-postgres.sh, with $bin set to the
# release binaries: a work directory, throwaway certificates and signing key, apns-mock with
# a control port ($port, $control), pushd's configuration ($work/pushd.yml), the migrated
# schema, and a cleanup that stops every process listed in $pids.
work=$(mktemp -d /tmp/pushd-bench.XXXXXX)
pids=()
stop_pids() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
}
cleanup() {
  stop_pids
  [ -n "${mock_pid:-}" ] && kill -TERM "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
sql() { psql -X -At "$PUSHD_DATABASE_URL" -c "$1"; }
# Writes N targets, numbered from OFFSET, one hex token a line.
targets_file() {
  python3 -c "
import sys
w=sys.stdout.write
for i in range($1): w('%064x\n' % ((i + $2) * 2654435761 + 1))"
}

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
