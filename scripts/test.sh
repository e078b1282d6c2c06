#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite
# against a throwaway PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

bash scripts/install-deps.sh
swift build --build-tests
bash scripts/with-postgres.sh swift test --skip-build --no-parallel "$@"
