#!/usr/bin/env bash
# Builds the libFuzzer targets into .build/fuzz/<target>, each with AddressSanitizer.
#
# A target is the harness in Fuzz/Targets compiled together with the sources it reads
# (one module, so the harness reaches internal API), instrumented with
# `swiftc -sanitize=fuzzer,address`. The toolchain's libFuzzer supplies main().
#
#   Fuzz/build.sh [target…]     (default: every target)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"
out=.build/fuzz
mkdir -p "$out"

targets=(json-payload apns-error-body yaml-config command-line campaign-line)
[ $# -gt 0 ] && targets=("$@")

build() {
  local name=$1 harness=$2; shift 2
  echo "fuzz: building $name" >&2
  swiftc -sanitize=fuzzer,address -parse-as-library -Onone -g -swift-version 6 \
    -module-name "PushdFuzz_${name//-/_}" "$harness" "$@" -o "$out/$name" \
    2> >(grep -v "Cannot export local symbol '__asan" >&2)
}

apns_sources=$(find Sources/APNs -name '*.swift' | sort)
queue_sources=$(find Sources/QueueStore -name '*.swift' | sort)

# APNs imports the Locking and Posix modules (Posix has the dates, ids and file reading),
# QueueStore imports Posix, and the configuration imports the APNs, QueueStore and Posix
# modules: build them once as modules of their own (instrumented too).
library() {
  local name=$1; shift
  echo "fuzz: building module $name" >&2
  swiftc -sanitize=fuzzer,address -parse-as-library -Onone -g -swift-version 6 -module-name "$name" \
    -emit-library -static -emit-module -emit-module-path "$out/modules/$name.swiftmodule" -o "$out/lib$name.a" "$@" \
    2> >(grep -v "Cannot export local symbol '__asan" >&2)
}
mkdir -p "$out/modules"
library Locking Sources/Locking/*.swift
library Posix Sources/Posix/*.swift
locking_flags=(-I "$out/modules" -L "$out" -lLocking -lPosix)
modules_built=0
config_modules() {
  [ $modules_built = 1 ] && return 0
  modules_built=1
  # shellcheck disable=SC2086
  library APNs $apns_sources -I Sources/COpenSSL "${locking_flags[@]}"
  # shellcheck disable=SC2086
  library QueueStore $queue_sources -I Sources/CLibPQ $(pkg-config --cflags-only-I libpq | sed 's/-I/-Xcc -I/g') -I "$out/modules"
}
config_flags=(-I "$out/modules" -I Sources/COpenSSL -I Sources/CLibPQ -L "$out" -lAPNs -lQueueStore -lPosix -lLocking -lssl -lcrypto -lpq)

for target in "${targets[@]}"; do
  case $target in
    json-payload)
      # shellcheck disable=SC2086
      build "$target" Fuzz/Targets/JSONPayloadFuzz.swift $apns_sources -I Sources/COpenSSL "${locking_flags[@]}" -lssl -lcrypto ;;
    apns-error-body)
      # shellcheck disable=SC2086
      build "$target" Fuzz/Targets/APNsErrorBodyFuzz.swift $apns_sources -I Sources/COpenSSL "${locking_flags[@]}" -lssl -lcrypto ;;
    yaml-config)
      config_modules
      build "$target" Fuzz/Targets/YAMLConfigFuzz.swift Sources/pushd/Config/*.swift -I Sources/CYAML -lyaml "${config_flags[@]}" ;;
    command-line)
      config_modules
      # The parser suggests close option names with the configuration reader's edit distance.
      build "$target" Fuzz/Targets/CommandLineFuzz.swift Sources/pushd/CLI/ArgumentParser.swift Sources/pushd/CLI/Commands.swift \
        Sources/pushd/CLI/TextLayout.swift Sources/pushd/Config/*.swift -I Sources/CYAML -lyaml "${config_flags[@]}" ;;
    campaign-line)
      build "$target" Fuzz/Targets/CampaignLineFuzz.swift Sources/QueueStore/Campaigns/TargetImport.swift Sources/QueueStore/Jobs/Job.swift "${locking_flags[@]}" ;;
    *) echo "fuzz: unknown target '$target' (known: json-payload apns-error-body yaml-config command-line campaign-line)" >&2; exit 2 ;;
  esac
done
