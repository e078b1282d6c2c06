#!/usr/bin/env bash
# `make bench`: every benchmark of the sending path in one run, release builds
# (scripts/build-release.sh, as the container image builds pushd), on one
# throwaway PostgreSQL (scripts/with-postgres.sh), apns-mock and nghttpd on loopback:
#   - the C curl-multi reference and DispatcherBench (Benchmarks/run-dispatcher-bench.sh --quick --mock),
#   - the daemon draining a campaign, h2load and aioapns against the same apns-mock
#     (Benchmarks/DaemonBench/drain.sh; aioapns from a throwaway Python venv),
#   - the transactional INSERT → accepted latency during a drain,
#   - two and three daemons draining one campaign,
#   - drains with apns-mock answering after 50 ms and after 150 ms,
#   - the loopback and 50 ms drains again with campaigns.adaptive_in_flight on.
# Prints one table with the ratios daemon/engine, engine/C reference, daemon/h2load and
# daemon/aioapns, and writes it with the date, libcurl version and machine to
# Benchmarks/results/latest.md. Not part of `make test`.
#
# usage: Benchmarks/bench.sh [--targets N (1000000)] [--ten-million] [--requests N (500000)]
#                            [--peer-count N (50000)] [--note TEXT]
#   --targets: campaign size of each drain; --ten-million: 10,000,000 instead;
#   --requests: DispatcherBench and C reference requests; --peer-count: aioapns notifications;
#   --note: a line written under the table (say what else ran on the machine).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/opt/swift/usr/bin"

targets=1000000
requests=500000
peer_count=50000
note=""
arguments=("$@")
while [ $# -gt 0 ]; do
    case "$1" in
        --targets) targets="$2"; shift 2 ;;
        --ten-million) targets=10000000; shift ;;
        --requests) requests="$2"; shift 2 ;;
        --peer-count) peer_count="$2"; shift 2 ;;
        --note) note="$2"; shift 2 ;;
        *) echo "bench: unknown option $1" >&2; exit 2 ;;
    esac
done

# One throwaway PostgreSQL for every drain: run the rest inside it.
if [ -z "${PUSHD_BENCH_INSIDE:-}" ]; then
    bash scripts/build-release.sh DispatcherBench >/dev/null
    PUSHD_BENCH_INSIDE=1 exec scripts/with-postgres.sh bash "$0" "${arguments[@]}"
fi

bin=$(bash scripts/build-release.sh --show-bin-path)
work=$(mktemp -d /tmp/pushd-make-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
log="$work/log"
started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

field() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2" | head -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0 || a == "n/a" || b == "n/a") print "n/a"; else printf "%.2f", a / b }'; }
mb() { awk -v k="$1" 'BEGIN { if (k == "" || k == "n/a") print "n/a"; else printf "%.0f", k / 1024 }'; }

echo "== aioapns into a throwaway venv"
peer=""
if python3 -m venv "$work/venv" >>"$log" 2>&1 && "$work/venv/bin/pip" install -q aioapns >>"$log" 2>&1; then
    peer="$work/venv/bin/python Benchmarks/Peers/aioapns_peer.py --count $peer_count --concurrency 1000"
    aioapns_version=$("$work/venv/bin/pip" show aioapns | awk '/^Version/ {print $2}')
else
    echo "  aioapns could not be installed (see below); its row stays empty"; tail -5 "$log"
    aioapns_version="not installed"
fi

echo "== DispatcherBench and the C reference (nghttpd and apns-mock, 2 threads × 1 connection × 100 streams, $requests requests)"
dispatcher=$(bash Benchmarks/run-dispatcher-bench.sh --quick --mock --requests "$requests" 2>&1 | tee -a "$log")
c_nghttpd=$(grep -A2 '^nghttpd connections=1 streams=100' <<<"$dispatcher" | sed -n 's/^  C reference: //p')
e_nghttpd=$(grep -A2 '^nghttpd connections=1 streams=100' <<<"$dispatcher" | sed -n 's/^  engine: *//p')
c_mock=$(grep -A2 '^apns-mock connections=1 streams=100' <<<"$dispatcher" | sed -n 's/^  C reference: //p')
e_mock=$(grep -A2 '^apns-mock connections=1 streams=100' <<<"$dispatcher" | sed -n 's/^  engine: *//p')
echo "  engine (nghttpd): $e_nghttpd"

drain() { # label, then environment assignments for drain.sh (DRAIN_TARGETS overrides the size)
    local label="$1"; shift
    local size="${DRAIN_TARGETS:-$targets}"
    echo "== daemon drain: $label ($size targets)"
    local out
    if ! out=$(env "$@" bash Benchmarks/DaemonBench/drain.sh "$bin" "$size" 2>&1 | tee -a "$log"); then
        echo "  this drain failed; its row stays empty:"
        tail -5 <<<"$out" | sed 's/^/    /'
    fi
    sed -n 's/^  pushd: /  /p' <<<"$out"
    printf '%s\n' "$out" > "$work/drain-$label"
}

drain loopback PUSHD_BENCH_PEER="$peer"
drain transactional PUSHD_BENCH_H2LOAD=0 PUSHD_BENCH_ENGINE=0 PUSHD_BENCH_TRANSACTIONAL=300
# The same 300 transactional jobs with no campaign to speak of (one target): the idle latency.
DRAIN_TARGETS=1 drain transactional-idle PUSHD_BENCH_H2LOAD=0 PUSHD_BENCH_ENGINE=0 PUSHD_BENCH_TRANSACTIONAL=300
drain two-daemons PUSHD_BENCH_H2LOAD=0 PUSHD_BENCH_ENGINE=0 PUSHD_BENCH_INSTANCES=2
drain three-daemons PUSHD_BENCH_H2LOAD=0 PUSHD_BENCH_ENGINE=0 PUSHD_BENCH_INSTANCES=3
drain delay50 PUSHD_BENCH_H2LOAD=0 PUSHD_BENCH_ENGINE=0 PUSHD_BENCH_MOCK_ARGS="--delay-ms 50"
drain delay150 PUSHD_BENCH_H2LOAD=0 PUSHD_BENCH_ENGINE=0 PUSHD_BENCH_MOCK_ARGS="--delay-ms 150"
# campaigns.adaptive_in_flight (off by default) on loopback and at 50 ms, beside the rows above.
drain adaptive PUSHD_BENCH_H2LOAD=0 PUSHD_BENCH_ENGINE=0 PUSHD_BENCH_ADAPTIVE=true
drain adaptive50 PUSHD_BENCH_H2LOAD=0 PUSHD_BENCH_ENGINE=0 PUSHD_BENCH_ADAPTIVE=true PUSHD_BENCH_MOCK_ARGS="--delay-ms 50"

result() { sed -n 's/^result //p' "$work/drain-$1"; }
d=$(result loopback); tx=$(result transactional); two=$(result two-daemons); d50=$(result delay50); d150=$(result delay150)
idle=$(result transactional-idle); three=$(result three-daemons)
adaptive=$(result adaptive); adaptive50=$(result adaptive50)
# DispatcherBench sending the daemon's very requests to the loopback drain's mock.
e_same=$(sed -n 's/^engine //p' "$work/drain-loopback")
c_same=$(sed -n 's/^reference //p' "$work/drain-loopback")
aio=$(sed -n 's/^peer //p' "$work/drain-loopback")

row() { # name, server, line with rate/cpu/rss fields (engine or drain style), notes
    local rate cpu rss
    rate=$(field rate "$3"); cpu=$(field cpu_us_per_request "$3"); [ -z "$cpu" ] && cpu=$(field cpu_us "$3")
    rss=$(field peak_rss_kb "$3")
    printf '| %s | %s | %s | %s | %s | %s |\n' "$1" "$2" "${rate:-n/a}" "${cpu:-n/a}" "$(mb "$rss")" "$4"
}
# INSERT → accepted exact, from each job's created_at and pushd's trace of it (tx-latency.py),
# and COMMIT → accepted, the part after the application's own commit.
tx_notes() {
    printf 'INSERT → accepted p50 %s, p90 %s, p99 %s, max %s ms, mean %s ms; COMMIT → accepted p50 %s, p99 %s ms' \
        "$(field tx_exact_p50_ms "$1")" "$(field tx_exact_p90_ms "$1")" "$(field tx_exact_p99_ms "$1")" "$(field tx_exact_max_ms "$1")" \
        "$(field tx_exact_mean_ms "$1")" "$(field tx_exact_commit_p50_ms "$1")" "$(field tx_exact_commit_p99_ms "$1")"
}
h2rate=$(field h2load_rate "$d")
table=$(
    echo "| client | server | rate/s | CPU µs per notification | peak RSS MB | notes |"
    echo "|---|---|---|---|---|---|"
    row "C curl-multi reference" nghttpd "$c_nghttpd" "2 threads × 1 connection × 100 streams"
    row "pushd engine (DispatcherBench)" nghttpd "$e_nghttpd" "same shape"
    row "C curl-multi reference" apns-mock "$c_mock" "no authorization header"
    row "pushd engine (DispatcherBench)" apns-mock "$e_mock" "no authorization header"
    row "pushd engine, the daemon's requests (DispatcherBench)" apns-mock "$e_same" "2 threads × 1 connection × 500 streams; the daemon's JWT, headers, payload and a device path per request"
    row "C curl-multi reference, the daemon's requests" apns-mock "$c_same" "same shape, same header lines, payload and device paths"
    printf '| h2load | apns-mock | %s | n/a | n/a | 4 connections × 100 streams, same JWT, headers and payload as the daemon |\n' "${h2rate:-n/a}"
    row "**pushd daemon draining a campaign**" apns-mock "$d" "$targets targets from PostgreSQL, token auth; the mock saw $(field connections "$d") connections; beside it PostgreSQL $(field pg_cpu_us "$d") and apns-mock $(field mock_cpu_us "$d") CPU µs per notification"
    row "pushd daemon, transactional jobs during the drain" apns-mock "$tx" "300 INSERTs 20 ms apart: $(tx_notes "$tx")"
    row "pushd daemon, transactional jobs, no campaign" apns-mock "$idle" "300 INSERTs 20 ms apart, idle otherwise: $(tx_notes "$idle")"
    row "two pushd daemons, one campaign" apns-mock "$two" "aggregate rate, CPU summed, RSS of the larger; $(field duplicates "$two") accepted twice"
    row "three pushd daemons, one campaign" apns-mock "$three" "aggregate rate, CPU summed, RSS of the largest; $(field duplicates "$three") accepted twice"
    row "pushd daemon, mock answers after 50 ms" "apns-mock --delay-ms 50" "$d50" "max_connections_per_app 8 (default); the mock saw $(field connections "$d50") connections"
    row "pushd daemon, mock answers after 150 ms" "apns-mock --delay-ms 150" "$d150" "max_connections_per_app 8 (default); the mock saw $(field connections "$d150") connections"
    row "pushd daemon, adaptive in-flight limit" apns-mock "$adaptive" "\`campaigns.adaptive_in_flight: true\` (off by default); the mock saw $(field connections "$adaptive") connections"
    row "pushd daemon, adaptive in-flight limit, mock answers after 50 ms" "apns-mock --delay-ms 50" "$adaptive50" "\`campaigns.adaptive_in_flight: true\`; the mock saw $(field connections "$adaptive50") connections"
    row "aioapns $aioapns_version (Python)" apns-mock "$aio" "$peer_count notifications, 1,000 at once, 4 connections"
    echo
    echo "| ratio | rate | CPU per notification |"
    echo "|---|---|---|"
    printf '| daemon / engine (apns-mock) | %s | %s |\n' "$(ratio "$(field rate "$d")" "$(field rate "$e_mock")")" "$(ratio "$(field cpu_us "$d")" "$(field cpu_us_per_request "$e_mock")")"
    printf '| daemon / engine, the same requests | %s | %s |\n' "$(ratio "$(field rate "$d")" "$(field rate "$e_same")")" "$(ratio "$(field cpu_us "$d")" "$(field cpu_us_per_request "$e_same")")"
    printf '| engine / C reference, the daemon'"'"'s requests | %s | %s |\n' "$(ratio "$(field rate "$e_same")" "$(field rate "$c_same")")" "$(ratio "$(field cpu_us_per_request "$e_same")" "$(field cpu_us_per_request "$c_same")")"
    printf '| engine / C reference (nghttpd) | %s | %s |\n' "$(ratio "$(field rate "$e_nghttpd")" "$(field rate "$c_nghttpd")")" "$(ratio "$(field cpu_us_per_request "$e_nghttpd")" "$(field cpu_us_per_request "$c_nghttpd")")"
    printf '| daemon / h2load | %s | n/a |\n' "$(ratio "$(field rate "$d")" "$h2rate")"
    printf '| daemon / aioapns | %s | %s |\n' "$(ratio "$(field rate "$d")" "$(field rate "$aio")")" "$(ratio "$(field cpu_us "$d")" "$(field cpu_us "$aio")")"
    printf '| daemon at 50 ms / loopback | %s | %s |\n' "$(ratio "$(field rate "$d50")" "$(field rate "$d")")" "$(ratio "$(field cpu_us "$d50")" "$(field cpu_us "$d")")"
    printf '| daemon at 150 ms / loopback | %s | %s |\n' "$(ratio "$(field rate "$d150")" "$(field rate "$d")")" "$(ratio "$(field cpu_us "$d150")" "$(field cpu_us "$d")")"
    printf '| adaptive / pinned in-flight limit, loopback | %s | %s |\n' "$(ratio "$(field rate "$adaptive")" "$(field rate "$d")")" "$(ratio "$(field cpu_us "$adaptive")" "$(field cpu_us "$d")")"
    printf '| adaptive / pinned in-flight limit, 50 ms | %s | %s |\n' "$(ratio "$(field rate "$adaptive50")" "$(field rate "$d50")")" "$(ratio "$(field cpu_us "$adaptive50")" "$(field cpu_us "$d50")")"
)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
libcurl=$(curl-config --version 2>/dev/null || curl --version | head -1 | cut -d' ' -f1-2)
cpu_model=$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)

echo
echo "$table"
mkdir -p Benchmarks/results
{
    echo "# make bench: latest results"
    echo
    echo "- date: $started_at"
    echo "- libcurl: $libcurl ($(curl --version | head -1 | grep -o 'nghttp2/[0-9.]*' || true))"
    echo "- machine: $(uname -srm), $(nproc) cores, $cpu_model"
    echo "- load average (1, 5, 15 min): $load_before before, $load_after after"
    echo "- command: Benchmarks/bench.sh --targets $targets --requests $requests --peer-count $peer_count"
    echo
    echo "Every program ran on this machine one after the other, with PostgreSQL, apns-mock and"
    echo "nghttpd sharing it; CPU per notification is user + system time of the client process."
    echo "The drains and the engine with the daemon's requests run apns-mock with --read-ahead (many TLS"
    echo "records per read, as a server does); the engine and C rows with no authorization header do not."
    [ -n "$note" ] && { echo; echo "$note"; }
    echo
    echo "$table"
} > Benchmarks/results/latest.md
echo
echo "written to Benchmarks/results/latest.md"
