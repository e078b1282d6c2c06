#!/usr/bin/env bash
# Installs the Debian packages pushd builds, tests and demos with, when any is missing.
# Needs root (or passwordless sudo) only when something is missing.
#   install-deps.sh                    everything pushd builds, tests and demos with
#   install-deps.sh --libcurl          only libcurl 8 with its headers (a build image)
#   install-deps.sh --libcurl-runtime  only libcurl 8's shared library (a runtime image)
set -euo pipefail

mode=all
case "${1:-}" in
  "") ;;
  --libcurl) mode=libcurl ;;
  --libcurl-runtime) mode=libcurl-runtime ;;
  *) echo "install-deps: unknown option $1 (expected --libcurl or --libcurl-runtime)" >&2; exit 2 ;;
esac

packages=(
  pkg-config
  libcurl4-openssl-dev libssl-dev libpq-dev libnghttp2-dev libmicrohttpd-dev libyaml-dev
  postgresql postgresql-client
  nghttp2-client nghttp2-server
  openssl ca-certificates curl procps util-linux bc
  # systemd-analyze and PyYAML check deploy/systemd and deploy/kubernetes in the suite.
  systemd python3-yaml
)
[ "${PUSHD_SKIP_PROMETHEUS:-}" = 1 ] || packages+=(prometheus)

sudo=()
if [ "$(id -u)" != 0 ]; then
  sudo=(sudo)
fi

# libcurl 8 is the baseline (docs/dispatcher.md): Debian 12's libcurl 7.88 sends
# RST_STREAM after nearly every answered stream. On bookworm, take libcurl from
# bookworm-backports, on the mirror this machine already uses.
enable_backports() {
  local codename
  codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  [ "$codename" = bookworm ] || return 0
  local list=/etc/apt/sources.list.d/pushd-bookworm-backports.list
  [ -f "$list" ] && return 0
  if grep -rqsE '^[^#]*bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
    return 0
  fi
  # The first Debian main archive entry (not security) in either sources format.
  local mirror
  mirror=$(
    { awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ && u !~ /security/ {print u; exit}' \
        /etc/apt/sources.list.d/*.sources 2>/dev/null
      awk '$1 == "deb" && $3 == "bookworm" && $2 !~ /security/ {print $2; exit}' \
        /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
    } | head -n 1 || true)
  if [ -z "$mirror" ]; then
    echo "install-deps: no Debian bookworm entry in the apt sources; add bookworm-backports by hand for libcurl 8" >&2
    return 1
  fi
  echo "install-deps: enabling bookworm-backports from $mirror for libcurl 8" >&2
  echo "deb $mirror bookworm-backports main" | "${sudo[@]}" tee "$list" >/dev/null
  backports_added=1
}

# True when the installed libcurl4-openssl-dev is older than 8.
old_libcurl() {
  local version
  version=$(dpkg-query -W -f='${Version}' libcurl4-openssl-dev 2>/dev/null || true)
  [ -n "$version" ] || return 1
  dpkg --compare-versions "$version" lt 8
}

# The libcurl modes, for container images: libcurl 8 and nothing else.
if [ "$mode" != all ]; then
  export DEBIAN_FRONTEND=noninteractive
  codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
  backports_added=0
  enable_backports
  "${sudo[@]}" apt-get update -qq
  release=()
  [ "$codename" = bookworm ] && release=(-t bookworm-backports)
  if [ "$mode" = libcurl ]; then
    wanted=(libcurl4-openssl-dev)
  elif apt-cache show libcurl4t64 >/dev/null 2>&1; then
    wanted=(libcurl4t64)
  else
    wanted=(libcurl4)
  fi
  echo "install-deps: ${wanted[*]}${release[*]:+ from bookworm-backports}" >&2
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${release[@]}" "${wanted[@]}" >/dev/null
  version=$(dpkg-query -W -f='${Version}' "${wanted[0]}")
  if dpkg --compare-versions "$version" lt 8; then
    echo "install-deps: ${wanted[0]} $version is older than 8; pushd needs libcurl 8" >&2
    exit 1
  fi
  exit 0
fi

missing=()
for package in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  [ "$status" = "install ok installed" ] || missing+=("$package")
done

backports_added=0
codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
if [ ${#missing[@]} -eq 0 ] && { [ "$codename" != bookworm ] || ! old_libcurl; }; then
  exit 0
fi

if [ ${#sudo[@]} -gt 0 ] && ! command -v sudo >/dev/null; then
  echo "install-deps: missing ${missing[*]:-libcurl 8} and not root; install them and retry" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
enable_backports
"${sudo[@]}" apt-get update -qq
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
fi
if [ "$codename" = bookworm ]; then
  # libcurl4, curl and the -dev package move together: curl pins its libcurl4.
  echo "install-deps: libcurl 8 from bookworm-backports" >&2
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends -t bookworm-backports \
    libcurl4-openssl-dev libcurl4 curl >/dev/null
fi
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

if old_libcurl; then
  echo "install-deps: libcurl4-openssl-dev is still older than 8 ($(dpkg-query -W -f='${Version}' libcurl4-openssl-dev)); pushd needs libcurl 8" >&2
  exit 1
fi

command -v swift >/dev/null || [ -x /opt/swift/usr/bin/swift ] || {
  echo "install-deps: no Swift toolchain found (expected swift on PATH or /opt/swift)" >&2
  exit 1
}
