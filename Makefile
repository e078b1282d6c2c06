.PHONY: demo test build fuzz

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
