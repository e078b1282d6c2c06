#!/usr/bin/env bash
# The demo command: installs what is missing, builds pushd in release mode
# (scripts/build-release.sh) and runs
# `pushd demo`, which starts its own throwaway PostgreSQL and apns-mock, sends a
# campaign and a stream of transactional pushes, reports, and cleans up.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

bash scripts/install-deps.sh
bash scripts/build-release.sh
"$(bash scripts/build-release.sh --show-bin-path)/pushd" demo "$@"
