#!/usr/bin/env bash
# The demo command: installs what is missing, builds pushd, starts a throwaway
# PostgreSQL and shows that pushd reaches it.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

bash scripts/install-deps.sh
swift build -c release --product pushd
bin=$(swift build -c release --show-bin-path)
bash scripts/with-postgres.sh bash -c '
  set -euo pipefail
  "$1/pushd" version
  psql -X -q -At "$PUSHD_DATABASE_URL" -c "SELECT '\''PostgreSQL '\'' || current_setting('\''server_version'\'')"
' demo "$bin"
