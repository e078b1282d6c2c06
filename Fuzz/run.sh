#!/usr/bin/env bash
# Runs every fuzz target (or the ones named) for a given time each, one after another.
#
#   Fuzz/run.sh [seconds] [target…]       (default: 30 s each, every target)
#
# Builds the targets first (Fuzz/build.sh). Each target starts from its seeds in
# Fuzz/Corpus/<target> and keeps what it learns in .build/fuzz/corpus/<target>, so a
# later run goes on from there. A crash, a sanitizer report, a leak or an input slower
# than 10 s stops that target; the input is saved as .build/fuzz/crashes/<target>/…,
# and the script exits 1 after running the others. Reproduce with
# `.build/fuzz/<target> <file>`, then add the input to the target's regression test.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-30}
shift || true
targets=(json-payload apns-error-body yaml-config command-line campaign-line)
[ $# -gt 0 ] && targets=("$@")

bash Fuzz/build.sh "${targets[@]}" || exit 1
failed=()
for target in "${targets[@]}"; do
  corpus=.build/fuzz/corpus/$target
  crashes=.build/fuzz/crashes/$target
  mkdir -p "$corpus" "$crashes"
  log=.build/fuzz/$target.log
  .build/fuzz/"$target" "$corpus" Fuzz/Corpus/"$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
    -max_len=8192 -print_final_stats=1 -artifact_prefix="$crashes/" >"$log" 2>&1
  status=$?
  runs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log")
  if [ $status -eq 0 ]; then
    echo "fuzz: $target: ${runs:-?} inputs in ${seconds} s, no crash"
  else
    echo "fuzz: $target FAILED (exit $status); input saved in $crashes/, log in $log:" >&2
    grep -E "ERROR|SUMMARY|==[0-9]+==|Fatal error|Test unit written" "$log" | head -n 20 >&2
    failed+=("$target")
  fi
done
[ ${#failed[@]} -eq 0 ] || { echo "fuzz: crashes in ${failed[*]}" >&2; exit 1; }
