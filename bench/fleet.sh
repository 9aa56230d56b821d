#!/usr/bin/env bash
# The fleet benchmark (issue 11), in one command: `bench/fleet.sh` (about 5 minutes; BENCH_QUICK=1 for a
# short smoke run; BENCH_ROUNDS, default 3).
#
# On 127.0.0.1, placed as in bench/run.sh (gateway under load on core 0 with one tokio worker; upstream and
# load generator on core 1):
#   single: one gateway on its SQLite store (today's single-node mode);
#   fleet:  three gateways on one fresh PostgreSQL database (the local server); node n1 takes the load on core
#           0, n2 and n3 are live fleet members on core 1 (heartbeats, leases, the push claim);
#   remote: the same three-node fleet on a second database reached through `svc-bench delay-proxy`, which
#           holds every chunk 0.5 ms each way (PostgreSQL 1 ms away; this kernel has no `netem`). The proxy
#           also counts what the nodes send PostgreSQL: round trips per request at steady state.
# Every gateway has budgets and rate limits on: the key has max_budget, rpm_limit and tpm_limit, its team a
# budget_limit (all ample). Per round, interleaved: latency (closed loop, concurrency 1), open (1,000 req/s)
# and peak (concurrency 64) against direct, single, fleet and remote; then a steady-state open run on remote
# with the round trips counted. Output under target/bench/fleet-<time>/ (log.txt, results.jsonl, summary.md).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"

if [[ "${BENCH_QUICK:-0}" == 1 ]]; then
    DURATION=1 OPEN_DURATION=2 WARMUP=0.3 ROUNDS=${BENCH_ROUNDS:-1}
else
    DURATION=5 OPEN_DURATION=10 WARMUP=1 ROUNDS=${BENCH_ROUNDS:-3}
fi
PG=${SVC_BENCH_POSTGRES:-postgres://postgres@127.0.0.1:5432}
PG_PORT=${PG##*:}
for tool in taskset curl psql; do
    command -v "$tool" >/dev/null || { echo "bench/fleet.sh: needs $tool" >&2; exit 1; }
done
if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
    echo "== building release binaries" >&2
    cargo build --release --quiet -p svc-cli -p svc-testkit -p svc-bench --bin svc --bin svc-fake-upstream --bin svc-bench
fi
BIN=$ROOT/target/release
OUT=$ROOT/target/bench/fleet-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
WORK=$(mktemp -d)
PIDS=()
STAMP=$(date +%s)
DBS=("svc_bench_${STAMP}_fleet" "svc_bench_${STAMP}_remote")
cleanup() {
    stop_children
    for db in "${DBS[@]}"; do psql -q "$PG/test" -c "DROP DATABASE IF EXISTS $db" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

{
    echo "# svc fleet benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (work tree modified)')"
    echo "cores: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "rounds: $ROUNDS; latency ${DURATION}s, open ${OPEN_DURATION}s at 1000 req/s, peak ${DURATION}s at concurrency 64"
} | tee "$OUT/machine.txt"

taskset -c 1 "$BIN/svc-fake-upstream" --port 0 --threads 1 2>"$WORK/upstream.log" &
UP_PID=$!
PIDS+=("$UP_PID")
UP_ADDR=$(wait_listening "$WORK/upstream.log" "$UP_PID")

taskset -c 1 "$BIN/svc-bench" delay-proxy --listen 127.0.0.1:0 --to "127.0.0.1:$PG_PORT" --one-way-us 500 \
    2>"$WORK/proxy.log" &
PROXY_PID=$!
PIDS+=("$PROXY_PID")
for _ in $(seq 100); do grep -q 'listening on' "$WORK/proxy.log" && break; sleep 0.1; done
PROXY_ADDR=$(grep -o 'listening on [0-9.:]*' "$WORK/proxy.log" | head -1 | cut -d' ' -f3)
[[ -n $PROXY_ADDR ]] || { echo "bench/fleet.sh: the delay proxy did not start" >&2; cat "$WORK/proxy.log" >&2; exit 1; }

MASTER="sk-master-bench-$(date +%s%N)"
# config <dir> <database url> [<fleet node>]
config() {
    local dir=$1 url=$2 node=${3:-}
    mkdir -p "$dir"
    gateway_yaml "$url" "$UP_ADDR" >"$dir/svc.yaml"
    if [[ -n $node ]]; then
        printf 'fleet:\n  name: bench\n  node: %s\n  journal_dir: %s/journal\n' "$node" "$dir" >>"$dir/svc.yaml"
    fi
}
# start <core> <dir>: starts a gateway; sets ADDR (its address) and GW (its pid).
start() {
    local core=$1 dir=$2 threads=()
    [[ $core == 0 ]] && threads=(env TOKIO_WORKER_THREADS=1)
    SVC_MASTER_KEY=$MASTER "${threads[@]}" taskset -c "$core" "$BIN/svc" serve --config "$dir/svc.yaml" \
        >/dev/null 2>"$dir/log" &
    GW=$!
    PIDS+=("$GW")
    ADDR=$(wait_listening "$dir/log" "$GW")
}

for db in "${DBS[@]}"; do psql -q "$PG/test" -c "CREATE DATABASE $db" >/dev/null; done
mkdir -p "$WORK/single"
config "$WORK/single" "sqlite://$WORK/single/svc.db"
start 0 "$WORK/single"
SINGLE=$ADDR SINGLE_PID=$GW
for i in 1 2 3; do
    config "$WORK/fleet$i" "$PG/${DBS[0]}" "n$i"
    config "$WORK/remote$i" "postgres://postgres@$PROXY_ADDR/${DBS[1]}" "n$i"
done
start 0 "$WORK/fleet1"
FLEET=$ADDR FLEET_PID=$GW
start 1 "$WORK/fleet2"
start 1 "$WORK/fleet3"
start 0 "$WORK/remote1"
REMOTE=$ADDR REMOTE_PID=$GW
start 1 "$WORK/remote2"
start 1 "$WORK/remote3"

KEY_BODY='{"team_id":"bench-on","key_alias":"bench-on","max_budget":1000000,"rpm_limit":1000000000,"tpm_limit":1000000000000}'
KEY_SINGLE=$(new_key "$SINGLE" "$KEY_BODY")
KEY_FLEET=$(new_key "$FLEET" "$KEY_BODY")
KEY_REMOTE=$(new_key "$REMOTE" "$KEY_BODY")
[[ $KEY_SINGLE == sk-* && $KEY_FLEET == sk-* && $KEY_REMOTE == sk-* ]] || { echo "bench/fleet.sh: could not create the keys" >&2; exit 1; }
echo "single http://$SINGLE (pid $SINGLE_PID); fleet n1 http://$FLEET (pid $FLEET_PID); remote n1 http://$REMOTE (pid $REMOTE_PID); proxy $PROXY_ADDR" | tee -a "$OUT/machine.txt"

: >"$OUT/results.jsonl"
# bench <label> <url> <key> <pid> <measure> [extra args]
bench() {
    local label=$1 url=$2 key=$3 pid=$4 measure=$5
    shift 5
    SVC_BENCH_KEY=$key timeout 300 taskset -c 1 "$BIN/svc-bench" run --label "$label" --url "$url" --measure "$measure" \
        --duration "$DURATION" --open-duration "$OPEN_DURATION" --rate 1000 --concurrency 64 --warmup "${RUN_WARMUP:-$WARMUP}" \
        --watch-pid "$pid" --also-pid "$UP_PID" --also-pid "$PROXY_PID" "$@" >"$WORK/run.out" ||
        echo "bench/fleet.sh: svc-bench failed for $label $measure" >&2
    cat "$WORK/run.out" >>"$OUT/log.txt"
    grep -v '^{' "$WORK/run.out" >&2 || true
    grep '^{' "$WORK/run.out" >>"$OUT/results.jsonl" || true
}
sent() { grep -o 'delay-proxy: sent [0-9]*' "$WORK/proxy.log" | tail -1 | awk '{print $3}'; }
PATH_="/v1/chat/completions"
for round in $(seq "$ROUNDS"); do
    for measure in latency open peak; do
        echo "== round $round: $measure" >&2
        bench direct "http://$UP_ADDR$PATH_" "" "$UP_PID" "$measure"
        bench single "http://$SINGLE$PATH_" "$KEY_SINGLE" "$SINGLE_PID" "$measure"
        bench fleet "http://$FLEET$PATH_" "$KEY_FLEET" "$FLEET_PID" "$measure"
        bench remote "http://$REMOTE$PATH_" "$KEY_REMOTE" "$REMOTE_PID" "$measure"
    done
    # Steady state: round trips to PostgreSQL (all three nodes, background included) per request answered,
    # beside the same time with no requests (heartbeats, lease upkeep, outbox, key polls of three nodes).
    sleep 1.2
    idle_before=$(sent)
    sleep "$OPEN_DURATION"
    idle=$(($(sent) - idle_before))
    before=$(sent)
    RUN_WARMUP=0 bench remote-steady "http://$REMOTE$PATH_" "$KEY_REMOTE" "$REMOTE_PID" open
    sleep 1.2
    after=$(sent)
    ok=$(grep '^{' "$WORK/run.out" | grep -o '"ok":[0-9]*' | head -1 | cut -d: -f2)
    echo "round $round: $((after - before)) round trips to PostgreSQL for $ok requests in ${OPEN_DURATION} s; idle, the same time: $idle" | tee -a "$OUT/machine.txt"
done
{
    echo "single peak RSS (VmHWM): $(awk '/^VmHWM:/ {print $2}' "/proc/$SINGLE_PID/status") KiB; fleet n1: $(awk '/^VmHWM:/ {print $2}' "/proc/$FLEET_PID/status") KiB; remote n1: $(awk '/^VmHWM:/ {print $2}' "/proc/$REMOTE_PID/status") KiB"
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee -a "$OUT/machine.txt"
# Medians over the rounds, with the range: p50 added over direct, p99, CPU per request, throughput.
python3 - "$OUT/results.jsonl" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def med(xs):
    return "n/a" if not xs else f"{statistics.median(xs):.0f} ({min(xs):.0f} … {max(xs):.0f})"
for measure in ["latency", "open", "peak"]:
    print(f"\n### {measure}\n\n| target | p50 µs | p50 added over direct µs | p99 µs | CPU µs/request | req/s |\n|---|---:|---:|---:|---:|---:|")
    runs = [r for r in rows if r["measure"] == measure]
    direct = {i: r["latency_us"]["p50"] for i, r in enumerate(x for x in runs if x["label"] == "direct")}
    for label in ["direct", "single", "fleet", "remote", "remote-steady"]:
        mine = [r for r in runs if r["label"] == label]
        if not mine:
            continue
        added = [r["latency_us"]["p50"] - direct.get(i, 0) for i, r in enumerate(mine)]
        print(f"| {label} | {med([r['latency_us']['p50'] for r in mine])} | {med(added) if label != 'direct' else ''} | "
              f"{med([r['latency_us']['p99'] for r in mine])} | {med([r['watch']['cpu_us_per_req'] for r in mine])} | {med([r['rps'] for r in mine])} |")
PY
echo "results in $OUT" >&2
