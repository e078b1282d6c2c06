#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite
# against a throwaway PostgreSQL, then every fuzz target for 30 s.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

bash scripts/install-deps.sh
swift build --build-tests
bash scripts/with-postgres.sh swift test --skip-build --no-parallel "$@"
# Each fuzz target for 30 s (Fuzz/run.sh; longer runs: make fuzz FUZZ_SECONDS=600).
bash Fuzz/run.sh 30
