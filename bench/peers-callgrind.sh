#!/usr/bin/env bash
# Instructions per request of svc and of LiteLLM-Rust, counted without noise (issue 32):
#   LITELLM_RUST=/path/to/lite bash bench/peers-callgrind.sh      # about 12 minutes
#
# Each gateway under `valgrind --tool=callgrind` (one tokio worker, on core 0; svc with budgets on, as
# bench/peers.sh), twice: N and 5N sequential requests (svc-bench, closed loop, c=1) to `/v1/responses` and to
# `/v1/messages`, plain and streamed, the upstreams (svc-fake-upstream, svc-fake-anthropic) outside valgrind on core
# 1. Per request = (I(5N) − I(N)) / 4N: start-up and shutdown cancel out. svc's figure excludes quanta's clock
# calibration, as bench/callgrind.sh does (LiteLLM-Rust has none).
#
# Environment: LITELLM_RUST (required), CALLGRIND_N (default 400), BENCH_NO_BUILD=1.
# Output: a table, and everything under target/bench/peers-callgrind-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PEER=${LITELLM_RUST:?bench/peers-callgrind.sh: set LITELLM_RUST to a litellm-rust binary (see bench/peers.sh)}
N=${CALLGRIND_N:-400}
for tool in valgrind callgrind_annotate curl timeout; do
    command -v "$tool" >/dev/null || { echo "bench/peers-callgrind.sh: needs $tool" >&2; exit 1; }
done
if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
    cargo build --release --quiet -p svc-cli -p svc-testkit -p svc-bench \
        --bin svc --bin svc-fake-upstream --bin svc-fake-anthropic --bin svc-bench
fi
BIN=$ROOT/target/release
OUT=$ROOT/target/bench/peers-callgrind-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
begin_agent_bench
PEER_KEY="sk-peer-bench-$(date +%s%N)"

# One run: gateway $1 (svc, peer), api $2, mode $3 (plain, stream), $4 requests; prints its instructions.
run() {
    local who=$1 api=$2 mode=$3 n=$4 port key out body path done
    port=$(free_port)
    out="$OUT/$who-$api-$mode-$n.out"
    if [[ $who == svc ]]; then
        rm -f "$WORK/svc.db"*
        peers_svc_yaml "$WORK/svc.db" "$port" "$UP" "$ANT" >"$WORK/svc.yaml"
        SVC_MASTER_KEY=$MASTER TOKIO_WORKER_THREADS=1 taskset -c 0 valgrind --tool=callgrind --callgrind-out-file="$out" \
            "$BIN/svc" serve --config "$WORK/svc.yaml" 2>"$WORK/$who.log" &
    else
        peers_litellm_yaml "$UP" "$ANT" "$PEER_KEY" >"$WORK/peer.yaml"
        (cd "$WORK" && RUST_LOG=warn TOKIO_WORKER_THREADS=1 exec taskset -c 0 valgrind --tool=callgrind \
            --callgrind-out-file="$out" "$PEER" serve --config "$WORK/peer.yaml" --host 127.0.0.1 --port "$port" \
            >/dev/null 2>"$WORK/$who.log") &
    fi
    local pid=$!
    PIDS+=("$pid")
    wait_port "$port" "$pid" "$WORK/$who.log"
    if [[ $who == svc ]]; then
        key=$(new_key "127.0.0.1:$port" '{"team_id":"bench","key_alias":"bench","max_budget":1000000}')
    else
        key=$PEER_KEY
    fi
    if [[ $api == responses ]]; then body=$PEERS_RESP; path=/v1/responses; done=response.completed
    else body=$PEERS_MSG; path=/v1/messages; done=message_stop; fi
    local stream=()
    [[ $mode == stream ]] && stream=(--stream)
    SVC_BENCH_KEY=$key timeout 900 taskset -c 1 "$BIN/svc-bench" run --label "$who" --url "http://127.0.0.1:$port$path" \
        --body "$body" --done "$done" --header "anthropic-version: 2023-06-01" --measure latency --requests "$n" \
        --duration 3600 --warmup 0 "${stream[@]}" >>"$OUT/load.txt"
    kill -TERM "$pid"; wait "$pid" || true
    callgrind_instructions "$out"
}

echo "| API, mode | svc | LiteLLM-Rust | svc ÷ LiteLLM-Rust |" | tee "$OUT/report.md"
echo "|---|---:|---:|---:|" | tee -a "$OUT/report.md"
for api in responses messages; do
    for mode in plain stream; do
        declare -A per=()
        for who in svc peer; do
            one=$(run "$who" "$api" "$mode" "$N"); five=$(run "$who" "$api" "$mode" $((5 * N)))
            per[$who]=$(( (five - one) / (4 * N) ))
        done
        ratio=$(python3 -c "print(f'{${per[svc]} / ${per[peer]}:.2f}')")
        echo "| \`/v1/$api\` $mode | ${per[svc]} | ${per[peer]} | $ratio |" | tee -a "$OUT/report.md"
    done
done
echo "results in $OUT" >&2
