#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite
# against a throwaway PostgreSQL, after every fuzz target for 30 s (so the suite's
# summary is the last thing printed).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

bash scripts/install-deps.sh
swift build --build-tests
# Each fuzz target for 30 s (Fuzz/run.sh; longer runs: make fuzz FUZZ_SECONDS=600).
bash Fuzz/run.sh 30
bash scripts/with-postgres.sh swift test --skip-build --no-parallel "$@"
