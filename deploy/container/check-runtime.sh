#!/usr/bin/env bash
# Checks the image of deploy/container/Containerfile without a container engine.
#
# The runtime stage: debootstrap a minimal Debian 12 (--variant=minbase) into a throwaway
# folder, give it the apt sources in the form debian:bookworm-slim has them, run the stage's
# own instructions from the Containerfile in it (COPY, and RUN as /bin/sh -c in a chroot, as
# a build does), with the release pushd and apns-mock as the build stage's output; then, as
# the stage's USER:
#   - ldd finds every library both programs link,
#   - `pushd version` reports libcurl 8,
#   - apns-mock starts, and `pushd send` gets a 200 from it over TLS with apns-mock's CA.
#
# With --build, the build stage first, approximated: a second Debian 12 minbase with the
# packages the official Swift image for Debian 12 installs, this machine's toolchain copied
# under /usr as that image unpacks it, the sources as the build context sends them
# (.dockerignore), and the stage's own instructions; the runtime stage then gets the pushd
# and apns-mock it built. What this does not check: the image's own base layers (a
# debootstrap is close to, not the same as, debian:bookworm-slim and swift:6.3-bookworm).
#
# Prints PASS or FAIL for each step; exit code 0 only when every step passed.
#
# usage: deploy/container/check-runtime.sh [BIN_DIR]   BIN_DIR: pushd and apns-mock (default:
#                                                      scripts/build-release.sh --show-bin-path)
#        deploy/container/check-runtime.sh --build     build them in the build stage first
# Needs root, debootstrap (Debian package debootstrap), network access to the Debian mirror
# this machine's apt sources name, and minutes (2–5; --build: a release build, 33 minutes on
# 2 busy cores, and 4 GB in the throwaway folder). Not part of the test suite. Environment:
# PUSHD_CHECK_KEEP=1 keeps the folder for a look afterwards; PUSHD_TOOLCHAIN, the toolchain
# --build copies (default /opt/swift: its usr/ is the archive's).
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
containerfile=deploy/container/Containerfile

[ "$(id -u)" = 0 ] || { echo "check-runtime: needs root (debootstrap, chroot)" >&2; exit 2; }
command -v debootstrap >/dev/null || { echo "check-runtime: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

build=0
bin=
case "${1:-}" in
  --build) build=1 ;;
  "") bin=$(PATH="$PATH:/opt/swift/usr/bin" bash scripts/build-release.sh --show-bin-path) ;;
  *) bin=$1 ;;
esac
toolchain=${PUSHD_TOOLCHAIN:-/opt/swift}
if [ "$build" = 1 ]; then
  [ -x "$toolchain/usr/bin/swift" ] || { echo "check-runtime: no toolchain at $toolchain/usr/bin/swift (set PUSHD_TOOLCHAIN)" >&2; exit 2; }
else
  for program in pushd apns-mock; do
    [ -x "$bin/$program" ] || { echo "check-runtime: no $bin/$program (run scripts/build-release.sh)" >&2; exit 2; }
  done
fi

# The Debian mirror of this machine's apt sources, in either format: the first bookworm main
# archive entry, and the security archive's entry if there is one.
sources() { cat /etc/apt/sources.list.d/*.sources 2>/dev/null || true; }
lists() { cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true; }
mirror=$(
  { sources | awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm( |$)/ && u !~ /security/ {print u; exit}'
    lists | awk '$1 == "deb" && $3 == "bookworm" && $2 !~ /security/ {print $2; exit}'
  } | head -n 1)
security=$(
  { sources | awk '/^URIs:/ {u=$2} /^Suites:/ && / bookworm-security( |$)/ {print u; exit}'
    lists | awk '$1 == "deb" && $3 == "bookworm-security" {print $2; exit}'
  } | head -n 1)
[ -n "$mirror" ] || { echo "check-runtime: no Debian bookworm entry in this machine's apt sources" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/var/tmp}/pushd-image-check.XXXXXX")
mock_pid=
cleanup() {
  local status=$? root
  [ -n "$mock_pid" ] && kill -TERM "$mock_pid" 2>/dev/null && wait "$mock_pid" 2>/dev/null || true
  for root in "$work/build" "$work/runtime"; do
    if mountpoint -q "$root/proc" 2>/dev/null; then umount "$root/proc" || umount -l "$root/proc" || true; fi
  done
  if [ "${PUSHD_CHECK_KEEP:-0}" = 1 ]; then
    echo "check-runtime: kept $work"
  elif grep -q " $work/" /proc/mounts; then
    echo "check-runtime: something is still mounted under $work; not deleting it" >&2
  else
    rm -rf "$work"
  fi
  exit $status
}
trap cleanup EXIT

failed=0
# step NAME COMMAND...: runs COMMAND with its output in a log of the step; PASS or FAIL.
step() {
  local name=$1; shift
  local log
  log="$work/$(tr -c 'a-zA-Z0-9\n' '_' <<<"$name" | cut -c1-60).log"
  last_log=$log
  if "$@" </dev/null >"$log" 2>&1; then
    echo "PASS $name"
  else
    echo "FAIL $name"
    sed 's/^/    /' "$log" | tail -n 30
    failed=1
  fi
}
# Stops after a failed step: the later ones need its result.
must() { step "$@"; [ "$failed" = 0 ] || { echo "check-runtime: FAIL"; exit 1; }; }

# A clean environment in the chroot, as a container's: no variables of this shell.
chroot=$(command -v chroot)
in_root() {
  local root=$1; shift
  env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$chroot" "$root" "$@"
}

# bootstrap ROOT: Debian 12 minbase, with the apt sources as the Debian images have them
# (one deb822 file, no sources.list), the host's resolver and /proc.
bootstrap() {
  local root=$1
  debootstrap --variant=minbase bookworm "$root" "$mirror" || return 1
  rm -f "$root/etc/apt/sources.list"
  {
    printf 'Types: deb\nURIs: %s\nSuites: bookworm bookworm-updates\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$mirror"
    if [ -n "$security" ]; then
      printf '\nTypes: deb\nURIs: %s\nSuites: bookworm-security\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' "$security"
    fi
  } >"$root/etc/apt/sources.list.d/debian.sources"
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  mount -t proc proc "$root/proc"
}

# run_stage N ROOT CONTEXT OUT: the instructions of the Containerfile's Nth FROM up to the
# next, continuation lines joined. COPY takes from CONTEXT, COPY --from=build from OUT.
# Sets user to the stage's USER.
run_stage() {
  local n=$1 root=$2 context=$3 out=$4 instruction words destination source workdir=/
  local stage
  stage=$(awk -v n="$n" '/^FROM / {k++} k == n && !/^FROM /' "$containerfile" \
    | sed -e ':a' -e '/\\$/{N;s/\\\n//;ba' -e '}')
  user=root
  while IFS= read -r instruction; do
    case "$instruction" in
      "COPY --from=build "*)
        read -r -a words <<<"${instruction#COPY --from=build }"
        destination=${words[-1]}
        for source in "${words[@]:0:${#words[@]}-1}"; do
          must "COPY $(basename "$source") from the build stage" install -D -m 755 "$out$source" "$root$destination$(basename "$source")"
        done ;;
      "COPY . .")
        must "COPY . . (the build context) into $workdir" cp -a "$context/." "$root$workdir/" ;;
      "COPY "*)
        read -r -a words <<<"${instruction#COPY }"
        must "COPY ${words[0]}" install -D "$context/${words[0]}" "$root${words[1]}" ;;
      "WORKDIR "*)
        workdir=${instruction#WORKDIR }; mkdir -p "$root$workdir" ;;
      "RUN "*)
        must "RUN ${instruction:4:60}…" in_root "$root" /bin/sh -c 'cd "$1" && exec /bin/sh -c "$2"' sh "$workdir" "${instruction#RUN }" ;;
      "USER "*) user=${instruction#USER } ;;
      EXPOSE*|ENTRYPOINT*|CMD*|"#"*|"") ;;
      *) echo "check-runtime: stage $n has an instruction this check does not know: $instruction" >&2; exit 2 ;;
    esac
  done <<<"$stage"
}

if [ "$build" = 1 ]; then
  broot=$work/build
  echo "check-runtime: the build stage, approximated, in $broot"
  must "debootstrap minbase bookworm (build)" bootstrap "$broot"
  # The packages the official Swift image for Debian 12 installs next to the toolchain.
  must "the Swift image's packages" in_root "$broot" /bin/sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    binutils-gold libicu-dev libcurl4-openssl-dev libedit-dev libsqlite3-dev libncurses-dev libpython3-dev \
    libxml2-dev pkg-config uuid-dev tzdata git gcc libstdc++-12-dev >/dev/null && rm -rf /var/lib/apt/lists/*'
  must "the toolchain under /usr, as the Swift image unpacks it" cp -a "$toolchain/usr/." "$broot/usr/"
  must "ld.lld is /usr/bin/ld.lld" test -x "$broot/usr/bin/ld.lld"
  # The build context: the sources without what .dockerignore leaves out.
  context=$work/context
  excludes=()
  while IFS= read -r pattern; do
    pattern=${pattern%/}
    case "$pattern" in
      "#"*|"") ;;
      "**/"*) excludes+=(--no-anchored --exclude="${pattern#\*\*/}") ;;
      *) excludes+=(--anchored --exclude="./$pattern") ;;
    esac
  done <.dockerignore
  mkdir -p "$context"
  must "the build context (.dockerignore applied)" bash -c 'tar -C "$1" -cf - "${@:3}" . | tar -C "$2" -xf -' bash "$repo" "$context" "${excludes[@]}"
  run_stage 1 "$broot" "$context" ""
  must "the build stage's /out holds pushd and apns-mock" test -x "$broot/out/pushd" -a -x "$broot/out/apns-mock"
  out=$broot
else
  # The build stage's output is BIN_DIR: /out/pushd is $bin/pushd.
  out=$work/out
  mkdir -p "$out/out"
  cp "$bin/pushd" "$bin/apns-mock" "$out/out/"
fi

root=$work/runtime
echo "check-runtime: the runtime stage in $root"
must "debootstrap minbase bookworm (runtime)" bootstrap "$root"
run_stage 2 "$root" "$repo" "$out"

uid=$(in_root "$root" id -u "$user"); gid=$(in_root "$root" id -g "$user")
as_user() { env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp "$chroot" --userspec="$uid:$gid" "$root" "$@"; }

all_found() {
  local program libraries
  for program in pushd apns-mock; do
    libraries=$(as_user ldd "/usr/local/bin/$program") || return 1
    echo "$program:"; echo "$libraries"
    grep 'not found' <<<"$libraries" && return 1
  done
  return 0
}
step "ldd finds every library of pushd and apns-mock" all_found
libcurl_8() { as_user /usr/local/bin/pushd version | tee /dev/stderr | grep '^libcurl 8\.' >/dev/null; }
step "pushd version reports libcurl 8" libcurl_8
grep '^libcurl' "$last_log" | sed 's/^/    /' || true

# apns-mock with token auth, and pushd send to it trusting its CA.
check=$root/tmp/pushd-check
mkdir -p "$check"
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$check/key.p8" 2>/dev/null
openssl pkey -in "$check/key.p8" -pubout -out "$check/key.pub"
chmod 600 "$check/key.p8"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$check/pushd.yml" <<YAML
database:
  url: postgresql://pushd@127.0.0.1:1/unused
apns:
  host: 127.0.0.1:$port
  ca_file: /tmp/pushd-check/certs/ca.pem
apps:
  - name: check
    bundle_id: com.example.check
    environment: production
    token:
      team_id: CHECKTEAM1
      key_id: CHECKKEY01
      key_file: /tmp/pushd-check/key.p8
YAML
chown -R "$uid:$gid" "$check"
step "apns-mock gen-certs" as_user /usr/local/bin/apns-mock gen-certs /tmp/pushd-check/certs
# Not through the function: $! is then the pid that becomes apns-mock (env and chroot exec it).
env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/tmp "$chroot" --userspec="$uid:$gid" "$root" /usr/local/bin/apns-mock --cert /tmp/pushd-check/certs/server.pem --key /tmp/pushd-check/certs/server.key \
  --port "$port" --provider-key CHECKKEY01:CHECKTEAM1:/tmp/pushd-check/key.pub --topic com.example.check \
  >"$work/mock.log" 2>&1 &
mock_pid=$!
listening() {
  for _ in $(seq 100); do
    kill -0 "$mock_pid" 2>/dev/null || { cat "$work/mock.log"; return 1; }
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
    sleep 0.1
  done
  cat "$work/mock.log"; return 1
}
step "apns-mock starts and listens" listening
# The exit code of send is 0 only when APNs answered 200 (docs/cli.md).
send_200() {
  as_user /usr/local/bin/pushd send --config /tmp/pushd-check/pushd.yml \
    --token "$(printf 'ab%.0s' $(seq 32))" --alert 'runtime check'
}
step "pushd send gets 200 from apns-mock" send_200
head -n 3 "$last_log" | sed 's/^/    /' || true

if [ "$failed" = 0 ]; then echo "check-runtime: PASS"; else echo "check-runtime: FAIL"; exit 1; fi
