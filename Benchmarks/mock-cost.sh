#!/usr/bin/env bash
# CPU per request of one or two apns-mock binaries under the same h2load load, alternating,
# so that two builds meet the same machine load: the mock's CPU from /proc (its threads'
# schedstat run time, and its voluntary context switches) around each h2load run.
#
# usage: Benchmarks/mock-cost.sh [options] MOCK [MOCK_B]
#   --requests N    requests per run (default 200000)
#   --clients N     h2load connections (default 4)
#   --streams N     h2load streams per connection, also the mock's --max-streams (default 500)
#   --delay-ms N    the mock answers after N ms (--delay-ms); default 0 (loopback)
#   --pairs N       runs of each binary, alternating (default 3)
#   --callgrind N   instead: each binary once under `valgrind --tool=callgrind`, counters
#                   zeroed after a warm-up, N requests; prints instructions per request
#   --strace N      instead: each binary once under `strace -c -f`, N requests; prints the
#                   system calls per request
#   --perf N        instead: each binary once under `perf record -e cpu-clock -g`, N requests;
#                   prints the shares by library and the top functions (perf.data kept in
#                   /tmp/mock-cost-perf)
#   --engine BIN    drive the mock with this DispatcherBench (2 threads x 1 connection x the
#                   streams, a device path per request, libcurl writing each request on its
#                   own as the daemon does) instead of h2load (--clients is then unused)
# The mock runs as the drains run it: token auth (an ES256 JWT made here with openssl),
# --topic, --read-ahead (and --no-start-at-one-stream: h2load opens its streams before it
# reads SETTINGS); h2load sends the daemon's header lines and a small payload.
set -euo pipefail

requests=200000 clients=4 streams=500 delay=0 pairs=3 callgrind=0 strace_requests=0 perf_requests=0 engine=""
while [ $# -gt 0 ]; do
    case "$1" in
        --requests) requests="$2"; shift 2 ;;
        --clients) clients="$2"; shift 2 ;;
        --streams) streams="$2"; shift 2 ;;
        --delay-ms) delay="$2"; shift 2 ;;
        --pairs) pairs="$2"; shift 2 ;;
        --callgrind) callgrind="$2"; shift 2 ;;
        --strace) strace_requests="$2"; shift 2 ;;
        --engine) engine="$2"; shift 2 ;;
        --perf) perf_requests="$2"; shift 2 ;;
        -*) echo "unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { echo "usage: $0 [options] MOCK [MOCK_B]" >&2; exit 2; }
mocks=("$@")

work="$(mktemp -d)"
mock_pid=""
cleanup() {
    if [ -n "$mock_pid" ]; then kill -INT "$mock_pid" 2>/dev/null || true; wait "$mock_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

"${mocks[0]}" gen-certs "$work/certs" >/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$work/key.pem" 2>/dev/null
openssl pkey -in "$work/key.pem" -pubout -out "$work/key.pub"
b64url() { base64 -w0 | tr '+/' '-_' | tr -d '='; }
signing_input="$(printf '{"alg":"ES256","kid":"BENCHKEY01"}' | b64url).$(printf '{"iss":"BENCHTEAM1","iat":%d}' "$(date +%s)" | b64url)"
# openssl signs in DER; a JWT carries r and s as 32 bytes each.
printf '%s' "$signing_input" | openssl dgst -sha256 -sign "$work/key.pem" -out "$work/sig.der"
rs=$(openssl asn1parse -inform DER -in "$work/sig.der" | awk -F: '/INTEGER/ { v = $NF; while (length(v) < 64) v = "0" v; printf "%s", substr(v, length(v) - 63) }')
jwt="$signing_input.$(printf '%s' "$rs" | xxd -r -p | b64url)"
printf '{"aps":{"alert":{"title":"Order shipped","body":"Parcel 1042 arrives tomorrow."},"sound":"default"},"order":"A-1042"}' >"$work/payload.json"

start_mock() { # wrapper... -- binary
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$@" --cert "$work/certs/server.pem" --key "$work/certs/server.key" --port "$port" \
        --provider-key "BENCHKEY01:BENCHTEAM1:$work/key.pub" --topic com.example.bench --read-ahead --no-start-at-one-stream \
        --max-streams "$streams" --delay-ms "$delay" >"$work/mock.log" 2>&1 &
    mock_pid=$!
    for _ in $(seq 400); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0; sleep 0.05; done
    echo "apns-mock did not start:" >&2; cat "$work/mock.log" >&2; exit 1
}
stop_mock() { kill -INT "$mock_pid" 2>/dev/null || true; wait "$mock_pid" 2>/dev/null || true; mock_pid=""; }

drive() { # requests
    if [ -n "$engine" ]; then
        out=$("$engine" --port "$port" --ca "$work/certs/ca.pem" --requests "$1" --threads 2 --connections 1 \
            --streams "$streams" --device-paths yes --payload-file "$work/payload.json" --label mock-cost \
            --header "authorization: bearer $jwt" --header "apns-topic: com.example.bench" --header "apns-push-type: alert" 2>&1 | tail -1)
        ok=$(sed -n 's/.* ok=\([0-9]*\).*/\1/p' <<<"$out")
        [ "${ok:-0}" -eq "$1" ] || echo "DispatcherBench: ${ok:-0} of $1 answered 2xx: $out" >&2
        return 0
    fi
    h2load -n "$1" -c "$clients" -m "$streams" -t 1 -d "$work/payload.json" \
        -H "authorization: bearer $jwt" -H "apns-topic: com.example.bench" -H "apns-push-type: alert" \
        "https://127.0.0.1:$port/3/device/$(printf '%064x' 12345)" >"$work/h2load.out" 2>&1 || true
    ok=$(awk '/^status codes:/ {print $3}' "$work/h2load.out")
    [ "${ok:-0}" -eq "$1" ] || { echo "h2load: ${ok:-0} of $1 answered 2xx" >&2; grep -E '^(requests|status)' "$work/h2load.out" >&2; }
}

# Nanoseconds on CPU of every thread of $1, and its voluntary context switches.
run_ns() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ s += $1 } END { printf "%d", s }'; }
switches() { cat /proc/"$1"/task/*/status 2>/dev/null | awk '/^voluntary_ctxt_switches/ { s += $2 } END { printf "%d", s }'; }

echo "requests=$requests clients=$clients streams=$streams delay_ms=$delay load=$(cut -d' ' -f1-3 /proc/loadavg)"
if [ "$callgrind" -gt 0 ]; then
    for mock in "${mocks[@]}"; do
        start_mock valgrind --tool=callgrind --callgrind-out-file="$work/cg.%p" "$mock"
        drive 2000
        callgrind_control -z "$mock_pid" >/dev/null
        drive "$callgrind"
        callgrind_control -d "$mock_pid" >/dev/null
        stop_mock
        # The dump made after the measured run (the first file with a part number), not the final one.
        file=$(ls "$work"/cg.*.* | sort | head -1)
        total=$(awk '/^summary:/ {print $2}' "$file")
        printf '%s: %d instructions for %d requests = %.0f per request\n' "$mock" "$total" "$callgrind" "$(echo "$total / $callgrind" | bc -l)"
        mkdir -p /tmp/mock-cost-callgrind && cp "$file" "/tmp/mock-cost-callgrind/$(basename "$(dirname "$(dirname "$mock")")")-$(basename "$mock")-d$delay.out"
        rm -f "$work"/cg.*
    done
    exit 0
fi
if [ "$strace_requests" -gt 0 ]; then
    for mock in "${mocks[@]}"; do
        start_mock "$mock"
        drive 2000
        strace -c -f -p "$mock_pid" -o "$work/strace.out" &
        tracer=$!
        sleep 1
        drive "$strace_requests"
        kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
        stop_mock
        echo "$mock: system calls per request ($strace_requests requests)"
        awk -v n="$strace_requests" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ && $NF != "total" { printf "  %-16s %.3f\n", $NF, $4 / n }' "$work/strace.out"
    done
    exit 0
fi
if [ "$perf_requests" -gt 0 ]; then
    mkdir -p /tmp/mock-cost-perf
    for mock in "${mocks[@]}"; do
        start_mock "$mock"
        drive 2000
        data="/tmp/mock-cost-perf/$(basename "$mock")-d$delay.data"
        perf record -q -e cpu-clock -g -p "$mock_pid" -o "$data" 2>/dev/null &
        recorder=$!
        sleep 0.5
        drive "$perf_requests"
        kill -INT "$recorder"; wait "$recorder" 2>/dev/null || true
        stop_mock
        echo "$mock: perf, $perf_requests requests, by library:"
        perf report -i "$data" --no-children --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -10 || true
        echo "$mock: top functions:"
        perf report -i "$data" --no-children --sort dso,sym --stdio -g none 2>/dev/null | grep -E '^ +[0-9]' | head -25 || true
    done
    exit 0
fi
for pair in $(seq "$pairs"); do
    for mock in "${mocks[@]}"; do
        start_mock "$mock"
        drive 2000
        before_ns=$(run_ns "$mock_pid"); before_sw=$(switches "$mock_pid")
        started=$(date +%s.%N)
        drive "$requests"
        ended=$(date +%s.%N)
        after_ns=$(run_ns "$mock_pid"); after_sw=$(switches "$mock_pid")
        stop_mock
        printf 'pair %d %s: %.2f CPU us/request, %.1f voluntary switches per 1000, %.0f requests/s, load %s\n' "$pair" "$mock" \
            "$(echo "($after_ns - $before_ns) / 1000 / $requests" | bc -l)" "$(echo "($after_sw - $before_sw) * 1000 / $requests" | bc -l)" \
            "$(echo "$requests / ($ended - $started)" | bc -l)" "$(cut -d' ' -f1 /proc/loadavg)"
    done
done
