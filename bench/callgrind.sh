#!/usr/bin/env bash
# Instructions per request, counted without noise: `bench/callgrind.sh` (about 3 minutes).
#
# Runs the gateway (`svc serve`, one tokio worker, SQLite store, a key with a budget and rate limits: the
# bench/run.sh `gw-on` setup) and nginx (Debian's nginx-light, `master_process off` so one process holds it all,
# one worker, a keep-alive upstream pool: a bare reverse proxy in the gateway's place) under
# `valgrind --tool=callgrind`, each twice: N and 5N sequential chat-completions requests (svc-bench, closed loop
# at concurrency 1) to the same upstream (svc-fake-upstream, not under valgrind). User-space instructions of the
# whole process (every thread) per request = (I(5N) − I(N)) / 4N: start-up, key creation and shutdown cancel
# out. valgrind counts instructions, not time, so the figure repeats on a busy machine (this one's `perf`
# cannot count instructions).
#
# It also counts svc-floor (crates/svc-bench/src/bin/svc-floor.rs): a reverse proxy made of the gateway's stack
# (tokio, axum on hyper, hyper's client on kept-alive connections, mimalloc) and nothing else, so the report
# tells apart what the stack costs and what the gateway does on top of it.
#
# CALLGRIND_PEAK=1 sends the requests over 64 connections at once instead (closed loop, as bench/run.sh's peak):
# the figure at peak, where the gateway's batching (spend writes, log lines) has company to batch.
#
# CALLGRIND_PROVIDER=anthropic|gemini|bedrock|azure puts the benchmark's model on that provider instead of an
# OpenAI-compatible one (the same chat-completions requests, translated; each fake as its own process on core 1:
# svc-fake-anthropic, svc-fake-cloud): what a translation costs the gateway per request (issue 31).
#
# Environment: CALLGRIND_N (default 500), CALLGRIND_STREAM=1 (streamed requests), CALLGRIND_PEAK=1,
# BENCH_NO_BUILD=1, CALLGRIND_SVC=/path/to/svc (count that build instead: an experiment against the same upstream),
# CALLGRIND_NGINX=0 (svc alone, without nginx and svc-floor: their figures barely move between runs).
# Output: one line per target and the ratio; everything under target/bench/callgrind-<time>/.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
N=${CALLGRIND_N:-500}
for tool in valgrind curl timeout; do
    command -v "$tool" >/dev/null || { echo "bench/callgrind.sh: needs $tool (apt-get install $tool)" >&2; exit 1; }
done
if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
    echo "== building release binaries" >&2
    cargo build --release --quiet -p svc-cli -p svc-testkit -p svc-bench --bin svc --bin svc-fake-upstream --bin svc-bench \
        --bin svc-floor --bin svc-fake-anthropic --bin svc-fake-cloud
fi
BIN=$ROOT/target/release
SVC=${CALLGRIND_SVC:-$BIN/svc}
OUT=$ROOT/target/bench/callgrind-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
WORK=$(mktemp -d)
PIDS=()
trap stop_children EXIT
trap 'exit 130' INT TERM
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
NGINX=$(need_nginx)
STREAM=()
[[ ${CALLGRIND_STREAM:-0} == 1 ]] && STREAM=(--stream)
MEASURE=(--measure latency)
[[ ${CALLGRIND_PEAK:-0} == 1 ]] && MEASURE=(--measure peak --concurrency 64)

taskset -c 1 "$BIN/svc-fake-upstream" --port 0 --threads 1 2>"$WORK/upstream.log" &
UP_PID=$!; PIDS+=("$UP_PID")
UP=$(wait_listening "$WORK/upstream.log" "$UP_PID")
MASTER="sk-master-bench-$(date +%s%N)"
PROVIDER=${CALLGRIND_PROVIDER:-openai}
# The model's params on another provider: its fake started on core 1, and the lines that replace `model:`,
# `api_base:` and `api_key:` of the benchmark's config.
PARAMS=""
case $PROVIDER in
    openai) ;;
    anthropic)
        taskset -c 1 "$BIN/svc-fake-anthropic" --no-record 2>"$WORK/cloud.log" &
        PIDS+=("$!"); CLOUD=$(wait_listening "$WORK/cloud.log" "$!")
        PARAMS="      model: anthropic/up-mini\n      api_base: http://$CLOUD" ;;
    gemini)
        taskset -c 1 "$BIN/svc-fake-cloud" --cloud gemini 2>"$WORK/cloud.log" &
        PIDS+=("$!"); CLOUD=$(wait_listening "$WORK/cloud.log" "$!")
        PARAMS="      model: gemini/up-mini\n      api_base: http://$CLOUD\n      api_key: AIzaFakeGeminiKey0001" ;;
    bedrock)
        taskset -c 1 "$BIN/svc-fake-cloud" --cloud bedrock 2>"$WORK/cloud.log" &
        PIDS+=("$!"); CLOUD=$(wait_listening "$WORK/cloud.log" "$!")
        PARAMS="      model: 'bedrock/meta.llama3-3-70b-instruct-v1:0'\n      aws_bedrock_runtime_endpoint: http://$CLOUD"
        PARAMS+="\n      aws_region_name: us-west-2\n      aws_access_key_id: AKIAFAKEBEDROCK00001"
        PARAMS+="\n      aws_secret_access_key: fake/Secret+Key/for/the/bedrock/fake0001" ;;
    azure)
        taskset -c 1 "$BIN/svc-fake-cloud" --cloud azure 2>"$WORK/cloud.log" &
        PIDS+=("$!"); CLOUD=$(wait_listening "$WORK/cloud.log" "$!")
        PARAMS="      model: azure/up-mini\n      api_base: http://$CLOUD\n      api_key: az-key" ;;
    *) echo "bench/callgrind.sh: CALLGRIND_PROVIDER is openai, anthropic, gemini, bedrock or azure" >&2; exit 2 ;;
esac
# The benchmark's config, its model on $PROVIDER.
config_yaml() {
    if [[ -z $PARAMS ]]; then gateway_yaml "$@"; return; fi
    gateway_yaml "$@" | awk -v params="$PARAMS" '
        /^      model: openai\/up-mini$/ { gsub(/\\n/, "\n", params); print params; next }
        /^      api_base: |^      api_key: / { next }
        { print }'
}

# The store's writes in a finished run of svc: SQLite's worker thread (sqlx runs each connection on a thread of
# its own) and the spend writer's calls into the store. Printed apart: under valgrind their cost per request
# depends on how many records a batch gathers in its 50 ms, so a change elsewhere is easier to see without them.
# (The writer's path before issue 29 is matched too, so that CALLGRIND_SVC can count an older build.)
store_writes() {
    callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$1" 2>/dev/null | awk '
        /sqlx-sqlite-[0-9.]+\/src\/connection\/worker\.rs:std::sys::backtrace::__rust_begin_short_backtrace( |$)/ ||
        /(spend_writer|writer)\.rs:svc_gateway::(pipeline::spend_writer|spend::writer)::Target::write::\{\{closure\}\} \[/ {
            if (!/[<>*]/) { gsub(",", "", $1); sum += $1 }
        }
        END {print sum + 0}'
}

# $3 requests to $1 with key $2 (in sequence, or over 64 connections with CALLGRIND_PEAK=1).
load() {
    SVC_BENCH_KEY=$2 timeout 900 "$BIN/svc-bench" run --label callgrind --url "$1" "${MEASURE[@]}" \
        --requests "$3" --duration 3600 --warmup 0 "${STREAM[@]}" >>"$OUT/load.txt"
}

# One run of the gateway under callgrind with $1 requests; prints its instructions.
svc_run() {
    local n=$1 port
    port=$(free_port)
    rm -f "$WORK/svc.db"* "$WORK"/spend-*
    config_yaml "sqlite://$WORK/svc.db" "$UP" | sed "s/^  port: 0/  port: $port/" >"$WORK/svc.yaml"
    SVC_MASTER_KEY=$MASTER TOKIO_WORKER_THREADS=1 taskset -c 0 valgrind --tool=callgrind \
        --callgrind-out-file="$OUT/svc-$n.out" "$SVC" serve --config "$WORK/svc.yaml" 2>"$WORK/svc-$n.log" &
    local pid=$!
    PIDS+=("$pid")
    wait_port "$port" "$pid" "$WORK/svc-$n.log"
    local key
    key=$(new_key "127.0.0.1:$port" '{"team_id":"bench-on","key_alias":"bench-on","max_budget":1000000,"rpm_limit":1000000000,"tpm_limit":1000000000000}')
    [[ $key == sk-* ]] || { echo "bench/callgrind.sh: no key" >&2; cat "$WORK/svc-$n.log" >&2; exit 1; }
    load "http://127.0.0.1:$port/v1/chat/completions" "$key" "$n"
    kill -TERM "$pid"; wait "$pid" || true
    echo "$(callgrind_instructions "$OUT/svc-$n.out") $(store_writes "$OUT/svc-$n.out")"
}

# One run under callgrind of a proxy in the gateway's place, named $1 (its output: $OUT/$1-$2.out), with $2
# requests to port $4, stopped with signal $3; the rest ($5...) is its command. Prints its instructions.
proxy_run() {
    local name=$1 n=$2 signal=$3 port=$4
    shift 4
    taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$OUT/$name-$n.out" "$@" 2>"$WORK/$name-$n.log" &
    local pid=$!
    PIDS+=("$pid")
    wait_port "$port" "$pid" "$WORK/$name-$n.log"
    load "http://127.0.0.1:$port/v1/chat/completions" "" "$n"
    kill "-$signal" "$pid"; wait "$pid" || true
    callgrind_instructions "$OUT/$name-$n.out"
}

# nginx with $1 requests (`master_process off`: one process; QUIT stops it gracefully).
nginx_run() {
    local port
    port=$(free_port)
    mkdir -p "$WORK/nginx"
    nginx_conf "$WORK/nginx" "$UP" "$port" >"$WORK/nginx/nginx.conf"
    proxy_run nginx "$1" QUIT "$port" "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf"
}

# svc-floor with $1 requests, on one tokio worker as the gateway.
floor_run() {
    local port
    local -x TOKIO_WORKER_THREADS=1
    port=$(free_port)
    proxy_run floor "$1" TERM "$port" "$BIN/svc-floor" --port "$port" --upstream "$UP"
}

echo "== svc: $N and $((5 * N)) requests under callgrind" >&2
RUN_1=$(svc_run "$N"); RUN_5=$(svc_run $((5 * N)))
read -r SVC_1 STORE_1 <<<"$RUN_1"; read -r SVC_5 STORE_5 <<<"$RUN_5"
STORE=$(( (STORE_5 - STORE_1) / (4 * N) ))
if [[ ${CALLGRIND_NGINX:-1} == 0 ]]; then
    echo "svc ($PROVIDER): $(( (SVC_5 - SVC_1) / (4 * N) )) instructions per request ($SVC_1 and $SVC_5 in all; $SVC);" \
        "without the store's writes ($STORE): $(( (SVC_5 - SVC_1) / (4 * N) - STORE ))" | tee "$OUT/report.txt"
    echo "results in $OUT" >&2
    exit 0
fi
echo "== svc-floor: $N and $((5 * N)) requests under callgrind" >&2
FLOOR_1=$(floor_run "$N"); FLOOR_5=$(floor_run $((5 * N)))
echo "== nginx: $N and $((5 * N)) requests under callgrind" >&2
NGX_1=$(nginx_run "$N"); NGX_5=$(nginx_run $((5 * N)))
python3 - "$N" "$SVC_1" "$SVC_5" "$NGX_1" "$NGX_5" "${CALLGRIND_STREAM:-0}" "${CALLGRIND_PEAK:-0}" "$FLOOR_1" "$FLOOR_5" "$STORE" \
    <<'EOF' | tee "$OUT/report.txt"
import sys
n, s1, s5, g1, g5 = int(sys.argv[1]), *map(int, sys.argv[2:6])
stream, peak = sys.argv[6] == "1", sys.argv[7] == "1"
f1, f5 = int(sys.argv[8]), int(sys.argv[9])
svc, ngx, floor = (s5 - s1) / (4 * n), (g5 - g1) / (4 * n), (f5 - f1) / (4 * n)
kind = "streamed" if stream else "non-streaming"
how = "64 connections at once" if peak else "in sequence"
print(f"{kind} chat completions {how}, user-space instructions per request (difference of {n} and {5*n} requests):")
store = int(sys.argv[10])
print(f"  svc   {svc:>10,.0f}   ({s1:,} and {s5:,} in all; without the store's writes ({store:,}): {svc - store:,.0f})")
print(f"  svc-floor {floor:>6,.0f}   ({f1:,} and {f5:,} in all; the stack alone)")
print(f"  nginx {ngx:>10,.0f}   ({g1:,} and {g5:,} in all)")
print(f"  svc / nginx: {svc / ngx:.1f}x; svc-floor / nginx: {floor / ngx:.1f}x; svc - svc-floor: {svc - floor:,.0f}")
EOF
echo "results in $OUT" >&2
