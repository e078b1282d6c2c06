#!/usr/bin/env bash
# A campaign of N targets (default 1,000,000) drained by one pushd from a throwaway
# PostgreSQL to apns-mock (token auth, every request validated), both release builds.
# Prints notifications/s over the whole drain, pushd's CPU ms per 1,000 notifications,
# its peak RSS, and the ratio to h2load sending the same request (same JWT, headers and
# payload) to the same mock in the same run.
#
#   Benchmarks/DaemonBench/run.sh [targets]
#
# pushd and apns-mock come from the one release build (scripts/build-release.sh, the Swift
# runtime linked in, as the container image builds pushd); drain.sh reads its options
# (PUSHD_BENCH_*) from the environment.
set -euo pipefail
cd "$(dirname "$0")/../.."
export PATH="$PATH:/opt/swift/usr/bin"
targets=${1:-1000000}
bash scripts/build-release.sh >/dev/null
bin=$(bash scripts/build-release.sh --show-bin-path)
exec scripts/with-postgres.sh bash Benchmarks/DaemonBench/drain.sh "$bin" "$targets"
