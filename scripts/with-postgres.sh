#!/usr/bin/env bash
# Runs a command with a throwaway PostgreSQL: initdb into a temporary folder, a free
# port on 127.0.0.1, trust authentication for user "pushd", database "pushd".
# The server runs as a non-root user (PostgreSQL refuses root) and is stopped and
# deleted when the command ends, whether it passed, failed or was interrupted.
#
# The command sees PUSHD_TEST_DATABASE_URL and PUSHD_DATABASE_URL.
#   scripts/with-postgres.sh swift test
set -euo pipefail

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$pg_bin" ] || { echo "with-postgres: no PostgreSQL server found under /usr/lib/postgresql (run scripts/install-deps.sh)" >&2; exit 1; }

workdir=$(mktemp -d /tmp/pushd-pg.XXXXXX)
chmod 755 "$workdir"
run_as=()
if [ "$(id -u)" = 0 ]; then
  owner=postgres
  id "$owner" >/dev/null 2>&1 || { owner=pushd-pg; id "$owner" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$owner"; }
  chown "$owner" "$workdir"
  run_as=(runuser -u "$owner" --)
fi

cleanup() {
  status=$?
  if [ -f "$workdir/data/postmaster.pid" ]; then
    "${run_as[@]}" "$pg_bin/pg_ctl" -D "$workdir/data" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  rm -rf "$workdir"
  exit $status
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()' 2>/dev/null && return
  local port
  for _ in $(seq 1 100); do
    port=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { echo "$port"; return; }
  done
  echo "with-postgres: no free port found" >&2
  return 1
}

"${run_as[@]}" "$pg_bin/initdb" -D "$workdir/data" -U pushd --auth=trust -E UTF8 --no-locale >"$workdir/initdb.log" 2>&1 || {
  cat "$workdir/initdb.log" >&2
  exit 1
}
port=$(free_port)
cat >>"$workdir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$workdir'
max_connections = 200
shared_buffers = 256MB
max_wal_size = 4GB
log_min_messages = warning
CONF
"${run_as[@]}" "$pg_bin/pg_ctl" -D "$workdir/data" -l "$workdir/server.log" -w -t 60 start >/dev/null || {
  cat "$workdir/server.log" >&2
  exit 1
}
"$pg_bin/psql" -X -q -h 127.0.0.1 -p "$port" -U pushd -d postgres -c "CREATE DATABASE pushd" >/dev/null

export PUSHD_TEST_DATABASE_URL="postgresql://pushd@127.0.0.1:$port/pushd"
export PUSHD_DATABASE_URL="$PUSHD_TEST_DATABASE_URL"
echo "with-postgres: throwaway PostgreSQL at $PUSHD_TEST_DATABASE_URL" >&2
set +e
"$@"
status=$?
set -e
exit $status
