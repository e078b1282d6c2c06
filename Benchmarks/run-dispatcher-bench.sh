#!/usr/bin/env bash
# Runs the Dispatcher transport benchmark and the C curl-multi reference against the same
# local nghttpd in one run, for each connection count and server stream limit, and prints
# both lines with the engine/reference ratios.
#
# usage: Benchmarks/run-dispatcher-bench.sh [--requests N] [--threads N] [--quick] [--mock]
#   --quick runs only 1 connection with 100 streams.
#   --mock also runs both against apns-mock (no authentication, 1000 streams).
set -euo pipefail
cd "$(dirname "$0")/.."

requests=500000
threads=2
quick=0
mock=0
while [ $# -gt 0 ]; do
    case "$1" in
        --requests) requests="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --quick) quick=1; shift ;;
        --mock) mock=1; shift ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done

work="$(mktemp -d)"
server_pid=""
cleanup() {
    if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout "$work/key.pem" -out "$work/cert.pem" \
    -days 1 -subj "/CN=localhost" -addext "subjectAltName=IP:127.0.0.1" >/dev/null 2>&1
mkdir -p "$work/htdocs"
# Non-empty: with content-length 0 libcurl resets each stream after the response headers.
printf '{}' > "$work/htdocs/ok"

swift build -c release --product DispatcherBench >/dev/null
cc -O2 -o "$work/curl_reference" Benchmarks/CurlReference/curl_reference.c -lcurl -lpthread
nghttpd_bin="$(command -v nghttpd || echo /usr/sbin/nghttpd)"

start_server() {
    if [ -n "$server_pid" ]; then kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; fi
    port=$(( 20000 + RANDOM % 20000 ))
    "$nghttpd_bin" --htdocs="$work/htdocs" --max-concurrent-streams="$1" "$port" "$work/key.pem" "$work/cert.pem" >/dev/null 2>&1 &
    server_pid=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0; sleep 0.05; done
    echo "nghttpd did not start" >&2; exit 1
}

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

if [ "$quick" = 1 ]; then variants="1:100"; else variants="1:100 1:500 1:1000 2:100 2:500 2:1000 4:100 4:500 4:1000"; fi
echo "requests=$requests threads=$threads (server: nghttpd, TLS, loopback)"
for variant in $variants; do
    connections="${variant%%:*}"
    streams="${variant##*:}"
    start_server "$streams"
    reference="$("$work/curl_reference" "$port" "$work/cert.pem" "$requests" "$threads" "$connections" "$streams")"
    engine="$(.build/release/DispatcherBench --port "$port" --ca "$work/cert.pem" --requests "$requests" \
        --threads "$threads" --connections "$connections" --streams "$streams" --label "c${connections}s${streams}")"
    rate_ratio=$(awk -v a="$(field rate "$engine")" -v b="$(field rate "$reference")" 'BEGIN { printf "%.2f", a / b }')
    cpu_ratio=$(awk -v a="$(field cpu_us_per_request "$engine")" -v b="$(field cpu_us_per_request "$reference")" 'BEGIN { printf "%.2f", a / b }')
    echo "connections=$connections streams=$streams"
    echo "  C reference: $reference"
    echo "  engine:      $engine"
    echo "  engine/C: rate x$rate_ratio, CPU per request x$cpu_ratio"
done

if [ "$mock" = 1 ]; then
    swift build -c release --product apns-mock >/dev/null
    .build/release/apns-mock gen-certs "$work/mock" >/dev/null
    kill "$server_pid"; wait "$server_pid" 2>/dev/null || true
    port=$(( 20000 + RANDOM % 20000 ))
    .build/release/apns-mock --cert "$work/mock/server.pem" --key "$work/mock/server.key" --port "$port" --max-streams 1000 >/dev/null 2>&1 &
    server_pid=$!
    for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
    path="/3/device/$(printf 'ab%.0s' $(seq 32))"
    reference="$("$work/curl_reference" "$port" "$work/mock/ca.pem" "$requests" "$threads" 1 1000 "$path" || true)"
    engine="$(.build/release/DispatcherBench --port "$port" --ca "$work/mock/ca.pem" --requests "$requests" \
        --threads "$threads" --connections 1 --streams 1000 --path "$path" --label mock || true)"
    rate_ratio=$(awk -v a="$(field rate "$engine")" -v b="$(field rate "$reference")" 'BEGIN { printf "%.2f", a / b }')
    echo "apns-mock connections=1 streams=1000"
    echo "  C reference: $reference"
    echo "  engine:      $engine"
    echo "  engine/C: rate x$rate_ratio"
fi
