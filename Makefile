.PHONY: demo test build

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

build:
	swift build
