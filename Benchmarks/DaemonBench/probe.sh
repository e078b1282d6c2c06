#!/usr/bin/env bash
# What a sender and the server cost per notification over a window of a running drain (or
# engine run), in figures that a busy machine does not move much: CPU, context switches,
# system calls by name, reads and writes with their bytes. Counts come from /proc (CPU,
# switches of every thread, syscr/syscw/rchar/wchar) and from the kernel's syscall
# tracepoints through `perf stat` (no ptrace: the traced process keeps its pace, unlike
# under strace, whose slowdown changes how many requests each write carries).
#
#   Benchmarks/DaemonBench/probe.sh SECONDS CONTROL_PORT LABEL=PID [LABEL=PID ...]
#
# CONTROL_PORT is apns-mock's control port: the notifications of the window are the growth
# of its apns_mock_accepted_total. Needs root (or perf_event_paranoid ≤ 1) for the tracepoints.
# Prints one line per process: "probe LABEL key=value ...", every figure per notification
# except where the key says otherwise (per_1000, bytes_per_*). io_reads/io_writes and their
# bytes count read(2)/write(2) only (apns-mock's OpenSSL); libcurl's sendto/recvfrom show in
# the system call counts, not there.
set -euo pipefail
seconds=$1
control_port=$2
shift 2
syscalls=(sendto write writev sendmsg recvfrom read readv recvmsg epoll_wait epoll_pwait epoll_ctl poll ppoll futex
  nanosleep clock_nanosleep mmap munmap madvise mprotect brk eventfd2 getpid clock_gettime)
events=raw_syscalls:sys_enter
for name in "${syscalls[@]}"; do
  [ -e "/sys/kernel/tracing/events/syscalls/sys_enter_$name" ] && events+=",syscalls:sys_enter_$name"
done
accepted() { curl -s "http://127.0.0.1:$control_port/metrics" | awk '/^apns_mock_accepted_total/ {print $2}'; }
snapshot() { # pid -> "ticks voluntary involuntary syscr syscw rchar wchar"
  local pid=$1
  local ticks vol invol
  ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
  read -r vol invol < <(cat /proc/"$pid"/task/*/status 2>/dev/null |
    awk '/^voluntary_ctxt_switches/ { v += $2 } /^nonvoluntary_ctxt_switches/ { n += $2 } END { print v + 0, n + 0 }')
  echo "$ticks $vol $invol $(awk '/^syscr/ {r=$2} /^syscw/ {w=$2} /^rchar/ {rc=$2} /^wchar/ {wc=$2} END {print r, w, rc, wc}' "/proc/$pid/io")"
}
work=$(mktemp -d /tmp/pushd-probe.XXXXXX)
trap 'rm -rf "$work"' EXIT
labels=(); pids=(); perf_pids=()
for pair in "$@"; do
  labels+=("${pair%%=*}"); pids+=("${pair#*=}")
done
for i in "${!pids[@]}"; do snapshot "${pids[$i]}" >"$work/before.$i"; done
before=$(accepted)
for i in "${!pids[@]}"; do
  perf stat -x, -e "$events" -p "${pids[$i]}" -o "$work/perf.$i" -- sleep "$seconds" &
  perf_pids+=($!)
done
for pid in "${perf_pids[@]}"; do wait "$pid" || true; done
after=$(accepted)
for i in "${!pids[@]}"; do snapshot "${pids[$i]}" >"$work/after.$i" 2>/dev/null || echo "0 0 0 0 0 0 0" >"$work/after.$i"; done
n=$(echo "${after%.*} - ${before%.*}" | bc)
[ "$n" -gt 0 ] || { echo "probe: the mock accepted nothing in the window" >&2; exit 1; }
ticks_per_s=$(getconf CLK_TCK)
for i in "${!pids[@]}"; do
  read -r t0 v0 i0 r0 w0 rc0 wc0 <"$work/before.$i"
  read -r t1 v1 i1 r1 w1 rc1 wc1 <"$work/after.$i"
  line="probe ${labels[$i]} notifications=$n"
  line+=$(awk -v t=$((t1 - t0)) -v hz="$ticks_per_s" -v n="$n" -v v=$((v1 - v0)) -v iv=$((i1 - i0)) \
    -v r=$((r1 - r0)) -v w=$((w1 - w0)) -v rc=$((rc1 - rc0)) -v wc=$((wc1 - wc0)) 'BEGIN {
      printf " cpu_us=%.1f voluntary_per_1000=%.0f involuntary_per_1000=%.0f io_reads=%.3f io_writes=%.3f bytes_per_read=%.0f bytes_per_write=%.0f",
        t / hz * 1e6 / n, v * 1000 / n, iv * 1000 / n, r / n, w / n, (r > 0 ? rc / r : 0), (w > 0 ? wc / w : 0) }')
  line+=$(awk -F, -v n="$n" '$1 ~ /^[0-9]+$/ && $1 > 0 { name = $3; sub(/.*sys_enter_?/, "", name); if (name == "") name = "all"
      printf " %s=%.3f", name, $1 / n }' "$work/perf.$i")
  echo "$line"
done
