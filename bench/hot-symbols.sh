#!/usr/bin/env bash
# Regenerates crates/svc-cli/hot-symbols.txt, the functions `svc serve` runs (start-up and the request paths), which
# the release build of `svc` places together (crates/svc-cli/build.rs: lld's --symbol-ordering-file):
#   bash bench/hot-symbols.sh      # about 4 minutes
#
# Why: the kernel maps a program's code in 64 KiB windows around each page it runs (fault-around), so code that
# runs scattered among code that never runs keeps nearly the whole 18 MiB of text resident. Placed together, the
# few MiB that run are what is resident (BENCHMARKS.md, peak RSS).
#
# How: `svc serve` (release, the bench/peers.sh configuration: SQLite, budgets on) under
# `valgrind --tool=callgrind --demangle=no`, 30 sequential requests to each of `/v1/chat/completions`,
# `/v1/responses` and `/v1/messages`, plain and streamed; every function of svc's own symbol table that ran, by
# name, sorted. A function renamed or added since is simply placed after the listed ones (no error, no warning):
# run this again after large changes to the request path.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
for tool in valgrind nm curl timeout; do
    command -v "$tool" >/dev/null || { echo "bench/hot-symbols.sh: needs $tool" >&2; exit 1; }
done
cargo build --release --quiet -p svc-cli -p svc-testkit -p svc-bench \
    --bin svc --bin svc-fake-upstream --bin svc-fake-anthropic --bin svc-bench
BIN=$ROOT/target/release
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
begin_agent_bench
CHAT='{"model":"resp","messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Say hello in five words."}],"max_tokens":64}'

for api in chat responses messages; do
    for mode in plain stream; do
        port=$(free_port)
        rm -f "$WORK/svc.db"*
        peers_svc_yaml "$WORK/svc.db" "$port" "$UP" "$ANT" >"$WORK/svc.yaml"
        SVC_MASTER_KEY=$MASTER TOKIO_WORKER_THREADS=1 valgrind --tool=callgrind --demangle=no \
            --callgrind-out-file="$WORK/$api-$mode.out" "$BIN/svc" serve --config "$WORK/svc.yaml" 2>"$WORK/svc.log" &
        pid=$!
        PIDS+=("$pid")
        wait_port "$port" "$pid" "$WORK/svc.log"
        key=$(new_key "127.0.0.1:$port" '{"team_id":"bench","key_alias":"bench","max_budget":1000000}')
        case $api in
            chat) body=$CHAT; path=/v1/chat/completions; done='[DONE]' ;;
            responses) body=$PEERS_RESP; path=/v1/responses; done=response.completed ;;
            messages) body=$PEERS_MSG; path=/v1/messages; done=message_stop ;;
        esac
        stream=()
        [[ $mode == stream ]] && stream=(--stream)
        SVC_BENCH_KEY=$key timeout 300 "$BIN/svc-bench" run --label svc --url "http://127.0.0.1:$port$path" \
            --body "$body" --done "$done" --header "anthropic-version: 2023-06-01" --measure latency --requests 30 \
            --duration 3600 --warmup 0 "${stream[@]}" >/dev/null
        kill -TERM "$pid"
        wait "$pid" || true
    done
done

# Function names as callgrind wrote them (`'2` marks a recursion level), kept when svc's symbol table has them.
nm "$BIN/svc" | awk '$2 ~ /^[tTwW]$/ {print $3}' | sort -u >"$WORK/defined.txt"
sed -n "s/^c\{0,1\}fn=([0-9]*) \(.*\)$/\1/p" "$WORK"/*.out | sed "s/'[0-9]*$//" | sort -u >"$WORK/ran.txt"
comm -12 "$WORK/defined.txt" "$WORK/ran.txt" >crates/svc-cli/hot-symbols.txt
echo "crates/svc-cli/hot-symbols.txt: $(wc -l <crates/svc-cli/hot-symbols.txt) functions" >&2
