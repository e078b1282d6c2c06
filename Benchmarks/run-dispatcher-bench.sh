#!/usr/bin/env bash
# Runs the Dispatcher transport benchmark and the C curl-multi reference against the same
# local nghttpd in one run, for each connection count and server stream limit, and prints
# both lines with the engine/reference ratios.
#
# usage: Benchmarks/run-dispatcher-bench.sh [--requests N] [--threads N] [--rounds N] [--quick] [--mock] [--shared]
#   Connections 1 and 2 per thread × server stream limits 100, 500 and 1000.
#   --rounds N (default 1) runs each row N times, the C loop and the engine taking turns to
#   go first, and reports the median of each and the ratio of the medians, with the lowest
#   and highest ratio of a single round: on a shared host one run's ratio moves by ±20 %.
#   --quick runs only 1 connection with 100 streams.
#   DispatcherBench and apns-mock come from the one release build (scripts/build-release.sh:
#   the Swift runtime linked in by lld with `-z pack-relative-relocs`, as the container image
#   links pushd); --static and --relr, which chose that build before, are still accepted.
#   --shared builds DispatcherBench with the Swift runtime as shared libraries instead.
#   --mock also runs the same rows against apns-mock (no authentication), and measures
#   the latency a request pays when the connection idled past idleCloseSeconds.
# Ends with a markdown table: rate, CPU per request and peak RSS of both, and the ratios.
set -euo pipefail
cd "$(dirname "$0")/.."

requests=500000
threads=2
rounds=1
quick=0
mock=0
shared=0
while [ $# -gt 0 ]; do
    case "$1" in
        --requests) requests="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --rounds) rounds="$2"; shift 2 ;;
        --quick) quick=1; shift ;;
        --mock) mock=1; shift ;;
        --static|--relr) shift ;;
        --shared) shared=1; shift ;;
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

bash scripts/build-release.sh DispatcherBench >/dev/null
bin=$(bash scripts/build-release.sh --show-bin-path)
bench=$bin/DispatcherBench
if [ "$shared" = 1 ]; then
    swift build -c release --product DispatcherBench >/dev/null
    bench=.build/release/DispatcherBench
fi
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

if [ "$quick" = 1 ]; then variants="1:100"; else variants="1:100 1:500 1:1000 2:100 2:500 2:1000"; fi

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# `rounds` engine lines and C reference lines against the server on $port, taking turns to go
# first, and the ratios of their medians; a markdown row goes to $work/table.
compare() {
    local server="$1" connections="$2" streams="$3" ca="$4" path="$5"
    local rates_c="" rates_e="" cpus_c="" cpus_e="" rss_c="" rss_e="" round_ratios=""
    for round in $(seq "$rounds"); do
        run_reference() { "$work/curl_reference" "$port" "$ca" "$requests" "$threads" "$connections" "$streams" "$path" || true; }
        run_engine() {
            "$bench" --port "$port" --ca "$ca" --requests "$requests" \
                --threads "$threads" --connections "$connections" --streams "$streams" --path "$path" \
                --label "$server-c${connections}s${streams}" || true
        }
        if [ $((round % 2)) = 1 ]; then reference="$(run_reference)"; engine="$(run_engine)"
        else engine="$(run_engine)"; reference="$(run_reference)"; fi
        echo "$server connections=$connections streams=$streams$([ "$rounds" -gt 1 ] && echo " round=$round")"
        echo "  C reference: $reference"
        echo "  engine:      $engine"
        rates_c+="$(field rate "$reference") "; rates_e+="$(field rate "$engine") "
        cpus_c+="$(field cpu_us_per_request "$reference") "; cpus_e+="$(field cpu_us_per_request "$engine") "
        rss_c+="$(field peak_rss_kb "$reference") "; rss_e+="$(field peak_rss_kb "$engine") "
        round_ratios+="$(awk -v a="$(field rate "$engine")" -v b="$(field rate "$reference")" 'BEGIN { printf "%.2f", a / b }') "
    done
    local rc re cc ce mc me
    rc=$(tr ' ' '\n' <<<"$rates_c" | grep . | median); re=$(tr ' ' '\n' <<<"$rates_e" | grep . | median)
    cc=$(tr ' ' '\n' <<<"$cpus_c" | grep . | median); ce=$(tr ' ' '\n' <<<"$cpus_e" | grep . | median)
    mc=$(tr ' ' '\n' <<<"$rss_c" | grep . | median); me=$(tr ' ' '\n' <<<"$rss_e" | grep . | median)
    rate_ratio=$(awk -v a="$re" -v b="$rc" 'BEGIN { printf "%.2f", a / b }')
    cpu_ratio=$(awk -v a="$ce" -v b="$cc" 'BEGIN { printf "%.2f", a / b }')
    rss_diff=$(awk -v a="$me" -v b="$mc" 'BEGIN { printf "%+.1f", (a - b) / 1024 }')
    spread=$(tr ' ' '\n' <<<"$round_ratios" | grep . | sort -g | awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s–%s", lo, hi }')
    echo "  engine/C$([ "$rounds" -gt 1 ] && echo " (medians of $rounds rounds; rate ratio per round $spread)"): rate x$rate_ratio, CPU per request x$cpu_ratio, peak RSS ${rss_diff} MB"
    printf '| %s | %s | %s | %s | %s | x%s | %s | %s | %s | x%s | %s | %s | %s |\n' "$server" "$connections" "$streams" \
        "$rc" "$re" "$rate_ratio" "$spread" "$cc" "$ce" "$cpu_ratio" \
        "$(awk -v k="$mc" 'BEGIN { printf "%d", k / 1024 }')" "$(awk -v k="$me" 'BEGIN { printf "%d", k / 1024 }')" "$rss_diff" >> "$work/table"
}

echo "requests=$requests threads=$threads (TLS, loopback)$([ "$shared" = 1 ] && echo ", Swift runtime as shared libraries" || echo ", Swift runtime linked in, RELR relocations")"
for variant in $variants; do
    start_server "${variant##*:}"
    compare nghttpd "${variant%%:*}" "${variant##*:}" "$work/cert.pem" /ok
done

if [ "$mock" = 1 ]; then
    "$bin/apns-mock" gen-certs "$work/mock" >/dev/null
    path="/3/device/$(printf 'ab%.0s' $(seq 32))"
    for variant in $variants; do
        if [ -n "$server_pid" ]; then kill "$server_pid"; wait "$server_pid" 2>/dev/null || true; fi
        port=$(( 20000 + RANDOM % 20000 ))
        "$bin/apns-mock" --cert "$work/mock/server.pem" --key "$work/mock/server.key" --port "$port" \
            --max-streams "${variant##*:}" >/dev/null 2>&1 &
        server_pid=$!
        for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.05; done
        compare apns-mock "${variant%%:*}" "${variant##*:}" "$work/mock/ca.pem" "$path"
    done
    # What closing idle connections costs: a request after an idle period opens a new connection.
    echo "idle close: $("$bench" --port "$port" --ca "$work/mock/ca.pem" --path "$path" --idle-probe 5 --label idle)"
fi

echo
echo "rounds=$rounds: each figure is the median of the rounds; 'rate per round' is the lowest and highest engine/C rate ratio of one round"
echo "| server | conns | streams | C rate/s | engine rate/s | rate | rate per round | C µs/req | engine µs/req | CPU | C RSS MB | engine RSS MB | RSS diff MB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
cat "$work/table"
