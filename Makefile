.PHONY: demo test build fuzz bench sanitize-address sanitize-thread release

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

build:
	swift build

# Every fuzz target for FUZZ_SECONDS each (Fuzz/run.sh); FUZZ_TARGETS picks some.
FUZZ_SECONDS ?= 300
fuzz:
	bash Fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The whole suite built with AddressSanitizer or ThreadSanitizer, in a build folder of its
# own (docs/security.md has the times). Leak detection is off: the toolchain's Foundation
# leaks in Process.run, which makes every spawned pushd and apns-mock exit 1. Some tests
# measure what a sanitizer changes, and only the normal suite runs them: RateCapTests (a
# delivered rate within 5 % of the cap, which a build several times slower cannot hold on
# two busy cores), residentMemoryStaysFlatWhileSendingGoesOn (resident memory, which
# in a sanitizer build includes shadow memory and ASan's quarantine of freed blocks) and
# CampaignStopWatchTests (a stop seen within 100 ms: a notification, a wake-up and a query).
SANITIZE_SKIP = --skip RateCapTests --skip residentMemoryStaysFlatWhileSendingGoesOn --skip CampaignStopWatchTests
sanitize-address:
	swift build --build-tests --sanitize=address --scratch-path .build/asan
	ASAN_OPTIONS=detect_leaks=0 bash scripts/with-postgres.sh swift test --skip-build --no-parallel --sanitize=address --scratch-path .build/asan $(SANITIZE_SKIP)

sanitize-thread:
	swift build --build-tests --sanitize=thread --scratch-path .build/tsan
	TSAN_OPTIONS=halt_on_error=0 bash scripts/with-postgres.sh swift test --skip-build --no-parallel --sanitize=thread --scratch-path .build/tsan $(SANITIZE_SKIP)

# Every benchmark of the sending path in one run (Benchmarks/bench.sh); not part of `make test`.
# BENCH_ARGS: e.g. --targets 100000, --ten-million.
bench:
	bash Benchmarks/bench.sh $(BENCH_ARGS)

# The one release build (scripts/build-release.sh): pushd and apns-mock with the Swift runtime
# linked in by the toolchain's lld, in .build/static/release, as the container image, the demo
# and the benchmarks build them (Benchmarks/README.md, Memory of the daemon).
release:
	bash scripts/build-release.sh
