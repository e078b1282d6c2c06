#!/usr/bin/env bash
# The test command: installs what is missing, builds, and runs the whole suite
# against a throwaway PostgreSQL, after every fuzz target for 30 s (so the suite's
# summaries are the last thing printed: one for the tests that run two at a time, one for
# those that run alone).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

bash scripts/install-deps.sh
swift build --build-tests
# Each fuzz target for 30 s (Fuzz/run.sh; longer runs: make fuzz FUZZ_SECONDS=600).
bash Fuzz/run.sh 30
# The suite's output goes to the terminal and to a file; when a test fails, its lines are
# printed again at the end, so the tail of a long log names what failed and why.
log="$(mktemp /tmp/pushd-test.XXXXXX.log)"
set +e
if [ "$#" -eq 0 ]; then
    # Two tests at a time, but the suites of scripts/suites-run-alone.txt, which then run one
    # test at a time with nothing beside them; on one throwaway PostgreSQL. Given arguments
    # (--filter …), the tests they name run one at a time, as before.
    alone="\.($(awk '!/^#/ && NF { print $1 }' scripts/suites-run-alone.txt | paste -sd '|'))\b"
    bash scripts/with-postgres.sh bash -c '
        SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=2 swift test --skip-build --skip "$1"; first=$?
        swift test --skip-build --no-parallel --filter "$1"; second=$?
        [ "$first" -eq 0 ] && [ "$second" -eq 0 ]' suites "$alone" 2>&1 | tee "$log"
else
    bash scripts/with-postgres.sh swift test --skip-build --no-parallel "$@" 2>&1 | tee "$log"
fi
status=${PIPESTATUS[0]}
set -e
if [ "$status" -ne 0 ]; then
    echo "--- what failed (the whole output: $log) ---"
    # Each failed expectation with the comment lines (↳) under it; a crash with the suite and
    # test that were running and the crashed thread's first frames; SwiftPM's errors (which
    # can arrive in the middle of a line of the backtrace).
    awk '/^◇ Suite .* started\./ { suite = $0 }
         /^◇ Test .* started\./ { test = $0 }
         /^✘ Test run with/ { next }
         /^✘ / { keep = /recorded an issue/; print; next }
         /^↳ / { if (keep) print; next }
         /Program crashed/ { print "crashed while running:"; print suite; print test; print; next }
         / crashed:$/ { frames = 16; print; next }
         frames > 0 { if (/^Thread |^Registers|^\.\.\.$/) frames = 0; else if (/^ *[0-9]+ /) { print; frames-- } }
         /error: Process .* exited with/ { sub(/.*error: Process/, "error: Process") }
         /^error: |Fatal error/ { print }
         { keep = 0 }' "$log" | cut -c1-800 | tail -n 80 || true
    grep -E '^✘ Test run with' "$log" || true
else
    rm -f "$log"
fi
exit "$status"
