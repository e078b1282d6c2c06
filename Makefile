.PHONY: demo test build fuzz bench

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

# Every benchmark of the sending path in one run (Benchmarks/bench.sh); not part of `make test`.
# BENCH_ARGS: e.g. --targets 100000, --ten-million.
bench:
	bash Benchmarks/bench.sh $(BENCH_ARGS)
