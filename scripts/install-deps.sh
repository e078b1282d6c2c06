#!/usr/bin/env bash
# Installs the Debian packages pushd builds, tests and demos with, when any is missing.
# Needs root (or passwordless sudo) only when something is missing.
set -euo pipefail

packages=(
  pkg-config
  libcurl4-openssl-dev libssl-dev libpq-dev libnghttp2-dev libmicrohttpd-dev libyaml-dev
  postgresql postgresql-client
  nghttp2-client nghttp2-server
  openssl ca-certificates curl procps util-linux bc
)
[ "${PUSHD_SKIP_PROMETHEUS:-}" = 1 ] || packages+=(prometheus)

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$package")
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
sudo=()
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: missing ${missing[*]} and not root; install them and retry" >&2; exit 1; }
  sudo=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

command -v swift >/dev/null || [ -x /opt/swift/usr/bin/swift ] || {
  echo "install-deps: no Swift toolchain found (expected swift on PATH or /opt/swift)" >&2
  exit 1
}
