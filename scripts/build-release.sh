#!/usr/bin/env bash
# The one release build of pushd: `make release`, scripts/demo.sh, the container image
# (deploy/container/Containerfile) and the benchmarks build with it. The Swift runtime is
# linked in (--static-swift-stdlib: no libswift*.so to load, about 6 MB less resident memory),
# by the toolchain's own lld (-use-ld=lld; Debian 12's lld 14 does not know the next flag)
# with packed relative relocations (-z pack-relative-relocs, glibc 2.36 or later: the loader
# reads kilobytes of relocations instead of half a megabyte). In .build/static/release.
#
# usage: scripts/build-release.sh [PRODUCT...]    pushd and apns-mock, then each PRODUCT
#                                                 (e.g. DispatcherBench for the benchmarks)
#        scripts/build-release.sh --show-bin-path the folder of the built programs
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

flags=(-c release --static-swift-stdlib --scratch-path .build/static
       -Xswiftc -use-ld=lld -Xlinker -z -Xlinker pack-relative-relocs)
if [ "${1:-}" = --show-bin-path ]; then
    exec swift build "${flags[@]}" --show-bin-path
fi
for product in pushd apns-mock "$@"; do
    swift build "${flags[@]}" --product "$product"
done
