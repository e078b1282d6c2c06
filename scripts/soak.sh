#!/usr/bin/env bash
# Fault soak: two `pushd run` instances sharing one throwaway PostgreSQL send a campaign
# (300,000 targets by default) and transactional jobs (~50/s) to apns-mock while one fault
# is applied mid-drain; then the database is compared with the mock's per-token answer
# counts, and every check prints PASS or FAIL. Exits 0 only if all pass. Not part of the
# test suite: a run takes minutes. See "Fault soak" in docs/operations.md.
#
# usage: scripts/soak.sh [--no-build] [--scenario outage|503|shutdown|429|kill|goaway|prune|restart]
#                        [--targets N] [--fault-seconds S] [--rate N] ...   (scripts/soak.py --help)
set -euo pipefail
cd "$(dirname "$0")/.."

build=1
args=()
for arg in "$@"; do
    if [ "$arg" = --no-build ]; then build=0; else args+=("$arg"); fi
done
if [ "$build" = 1 ]; then
    bash scripts/build-release.sh >&2
fi
bin=${PUSHD_SOAK_BIN:-$(bash scripts/build-release.sh --show-bin-path)}
for program in pushd apns-mock; do
    [ -x "$bin/$program" ] || { echo "soak: $bin/$program is missing (run without --no-build)" >&2; exit 1; }
done
exec bash scripts/with-postgres.sh python3 scripts/soak.py --bin "$bin" "${args[@]}"
