#!/usr/bin/env bash
# The gateway benchmark, in one command: `bench/run.sh` (about 6 minutes; BENCH_QUICK=1 for a ~40 s smoke run).
#
# Builds the release binaries, then on 127.0.0.1:
#   - svc-fake-upstream (a fast OpenAI-compatible upstream), pinned to core 1, one worker thread;
#   - the gateway (`svc serve`), pinned to core 0, one tokio worker thread (TOKIO_WORKER_THREADS=1), with a
#     temporary config and SQLite store, and two virtual keys:
#       gw-off: team without budget_limit, key without max_budget/rpm/tpm: key auth only (spend records are
#               still written: they cannot be switched off);
#       gw-on:  team with budget_limit, key with max_budget, rpm_limit and tpm_limit (set high enough never
#               to reject): budgets and rate limits on;
#   - nginx (Debian's nginx-light, installed when missing) exactly in the gateway's place: core 0, one worker
#     (`master_process off`: one process, whose CPU is measured), a keep-alive pool to the same upstream,
#     `proxy_buffering off` (streams flow as they come), no access log: the floor any proxy pays for the hop;
#   - svc-floor (crates/svc-bench/src/bin/svc-floor.rs), the gateway's stack alone (tokio, axum on hyper,
#     hyper's client, mimalloc; no keys, budgets, JSON or spend) in the same place: core 0, one tokio worker;
#   - svc-bench (the load generator), pinned to core 1 beside the upstream,
# and measures, for each of direct (the upstream itself), nginx, floor, gw-off and gw-on, non-streaming and
# streaming:
#   latency: closed loop at concurrency 1;  open: open loop at 1,000 req/s;  peak: closed loop at concurrency 64.
# Added latency = gateway − direct, same measurement. For reference, latency and open are also measured
# against a second upstream pinned to core 0 (direct-core0): the cost of crossing between the cores, which
# the path through the gateway does four times and the direct path never. Every measurement also reports the
# CPU used outside the benchmark's processes (other work on the machine: the noise). Then prints the tables
# (svc-bench report), with the gateway's peak RSS (VmHWM). Everything is kept under target/bench/<time>/
# (log.txt, results.jsonl, report.md, machine.txt).
#
# Environment: BENCH_QUICK=1 (short runs), BENCH_DURATION (s, default 5), BENCH_OPEN_DURATION (s, default 10),
# BENCH_RATE (default 1000), BENCH_CONCURRENCY (default 64), BENCH_WARMUP (s, default 1), BENCH_NO_BUILD=1,
# BENCH_HALT_POLL_NS: run with the guest kernel's idle halt polling set to this many ns (KVM guests with the
# cpuidle-haltpoll driver; needs root), restored afterwards. Idle cores then poll for that long before they
# halt, so waking one (which the path through the gateway does at every hop between the cores) is cheap.
# Unset: the machine's own setting, which machine.txt records either way.
# BENCH_BASELINE_SVC=/path/to/svc: also start a second gateway from that binary (an older build, say), placed
# and configured exactly like the first, and measure it in the same run, interleaved, as `base-off` and
# `base-on`: old and new side by side.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD

if [[ "${BENCH_QUICK:-0}" == 1 ]]; then
    DURATION=${BENCH_DURATION:-1}
    OPEN_DURATION=${BENCH_OPEN_DURATION:-2}
    WARMUP=${BENCH_WARMUP:-0.3}
else
    DURATION=${BENCH_DURATION:-5}
    OPEN_DURATION=${BENCH_OPEN_DURATION:-10}
    WARMUP=${BENCH_WARMUP:-1}
fi
RATE=${BENCH_RATE:-1000}
CONCURRENCY=${BENCH_CONCURRENCY:-64}

if [[ $(nproc) -lt 2 ]]; then
    echo "bench/run.sh: needs at least 2 CPU cores (gateway on core 0, upstream and load generator on core 1)" >&2
    exit 1
fi

for tool in taskset curl timeout python3; do
    command -v "$tool" >/dev/null || { echo "bench/run.sh: needs $tool" >&2; exit 1; }
done


if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
    echo "== building release binaries" >&2
    cargo build --release --quiet -p svc-cli -p svc-testkit -p svc-bench \
        --bin svc --bin svc-fake-upstream --bin svc-bench --bin svc-floor
fi
BIN=$ROOT/target/release
for b in svc svc-fake-upstream svc-bench svc-floor; do
    [[ -x $BIN/$b ]] || { echo "bench/run.sh: $BIN/$b is missing" >&2; exit 1; }
done

OUT=$ROOT/target/bench/$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
WORK=$(mktemp -d)
PIDS=()
HALT_POLL=/sys/module/haltpoll/parameters/guest_halt_poll_ns
HALT_POLL_BEFORE=""
cleanup() {
    if [[ -n $HALT_POLL_BEFORE ]]; then
        echo "$HALT_POLL_BEFORE" >"$HALT_POLL" || echo "bench/run.sh: could not restore $HALT_POLL to $HALT_POLL_BEFORE" >&2
    fi
    stop_children
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -n ${BENCH_HALT_POLL_NS:-} ]]; then
    [[ -w $HALT_POLL ]] || { echo "bench/run.sh: BENCH_HALT_POLL_NS needs a writable $HALT_POLL (a KVM guest with cpuidle-haltpoll, as root)" >&2; exit 1; }
    HALT_POLL_BEFORE=$(cat "$HALT_POLL")
    echo "$BENCH_HALT_POLL_NS" >"$HALT_POLL"
fi

# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
NGINX=$(need_nginx)

{
    echo "# svc benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (work tree modified)')$([[ "${BENCH_NO_BUILD:-0}" == 1 ]] && echo "; binaries not rebuilt (svc built $(date -u -r "$BIN/svc" +%H:%M:%SZ))")"
    echo "cores: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
    echo "kernel: $(uname -r); load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "idle: cpuidle driver $(cat /sys/devices/system/cpu/cpuidle/current_driver 2>/dev/null || echo unknown); halt polling $([[ -r $HALT_POLL ]] && echo "$(cat "$HALT_POLL") ns$([[ -n $HALT_POLL_BEFORE ]] && echo " (BENCH_HALT_POLL_NS; the machine's own: $HALT_POLL_BEFORE ns)")" || echo "not available")"
    echo "durations: latency ${DURATION}s, open ${OPEN_DURATION}s at ${RATE} req/s, peak ${DURATION}s at concurrency ${CONCURRENCY}; warmup ${WARMUP}s each"
} | tee "$OUT/machine.txt"

# The upstream: core 1, one thread.
taskset -c 1 "$BIN/svc-fake-upstream" --port 0 --threads 1 2>"$WORK/upstream.log" &
UP_PID=$!
PIDS+=("$UP_PID")
UP_ADDR=$(wait_listening "$WORK/upstream.log" "$UP_PID")
# The same upstream on core 0, idle except during the direct-core0 measurements.
taskset -c 0 "$BIN/svc-fake-upstream" --port 0 --threads 1 2>"$WORK/upstream0.log" &
UP0_PID=$!
PIDS+=("$UP0_PID")
UP0_ADDR=$(wait_listening "$WORK/upstream0.log" "$UP0_PID")

# The gateway: core 0, one tokio worker thread.
MASTER="sk-master-bench-$(date +%s%N)"
gateway_yaml "sqlite://$WORK/svc.db" "$UP_ADDR" >"$WORK/svc.yaml"
SVC_MASTER_KEY=$MASTER TOKIO_WORKER_THREADS=1 taskset -c 0 "$BIN/svc" serve --config "$WORK/svc.yaml" \
    >/dev/null 2>"$WORK/gateway.log" &
GW_PID=$!
PIDS+=("$GW_PID")
GW_ADDR=$(wait_listening "$WORK/gateway.log" "$GW_PID")
echo "upstream http://$UP_ADDR (pid $UP_PID, core 1); gateway http://$GW_ADDR (pid $GW_PID, core 0, $(ls /proc/$GW_PID/task | wc -l) threads)" |
    tee -a "$OUT/machine.txt"

# nginx in the gateway's place: core 0, one process, keep-alive upstream pool.
NGX_PORT=$(free_port)
mkdir -p "$WORK/nginx"
nginx_conf "$WORK/nginx" "$UP_ADDR" "$NGX_PORT" >"$WORK/nginx/nginx.conf"
taskset -c 0 "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" 2>"$WORK/nginx.log" &
NGX_PID=$!
PIDS+=("$NGX_PID")
wait_port "$NGX_PORT" "$NGX_PID" "$WORK/nginx.log"
echo "nginx $("$NGINX" -v 2>&1 | sed 's|.*/||') http://127.0.0.1:$NGX_PORT (pid $NGX_PID, core 0, master_process off)" |
    tee -a "$OUT/machine.txt"

# svc-floor in the gateway's place: core 0, one tokio worker thread.
TOKIO_WORKER_THREADS=1 taskset -c 0 "$BIN/svc-floor" --port 0 --upstream "$UP_ADDR" 2>"$WORK/floor.log" &
FLOOR_PID=$!
PIDS+=("$FLOOR_PID")
FLOOR_ADDR=$(wait_listening "$WORK/floor.log" "$FLOOR_PID")
echo "svc-floor http://$FLOOR_ADDR (pid $FLOOR_PID, core 0, one tokio worker)" | tee -a "$OUT/machine.txt"

KEY_OFF=$(new_key "$GW_ADDR" '{"team_id":"bench-off","key_alias":"bench-off"}')
KEY_ON=$(new_key "$GW_ADDR" '{"team_id":"bench-on","key_alias":"bench-on","max_budget":1000000,"rpm_limit":1000000000,"tpm_limit":1000000000000}')
[[ $KEY_OFF == sk-* && $KEY_ON == sk-* ]] || { echo "bench/run.sh: could not create the keys" >&2; cat "$WORK/gateway.log" >&2; exit 1; }

# The baseline gateway (BENCH_BASELINE_SVC): the same placement and configuration, its own store.
BASE_PID=""
if [[ -n ${BENCH_BASELINE_SVC:-} ]]; then
    [[ -x $BENCH_BASELINE_SVC ]] || { echo "bench/run.sh: BENCH_BASELINE_SVC=$BENCH_BASELINE_SVC is not executable" >&2; exit 1; }
    sed "s|sqlite://$WORK/svc.db|sqlite://$WORK/base.db|" "$WORK/svc.yaml" >"$WORK/base.yaml"
    SVC_MASTER_KEY=$MASTER TOKIO_WORKER_THREADS=1 taskset -c 0 "$BENCH_BASELINE_SVC" serve --config "$WORK/base.yaml" \
        >/dev/null 2>"$WORK/base.log" &
    BASE_PID=$!
    PIDS+=("$BASE_PID")
    BASE_ADDR=$(wait_listening "$WORK/base.log" "$BASE_PID")
    BASE_OFF=$(new_key "$BASE_ADDR" '{"team_id":"bench-off","key_alias":"bench-off"}')
    BASE_ON=$(new_key "$BASE_ADDR" '{"team_id":"bench-on","key_alias":"bench-on","max_budget":1000000,"rpm_limit":1000000000,"tpm_limit":1000000000000}')
    [[ $BASE_OFF == sk-* && $BASE_ON == sk-* ]] || { echo "bench/run.sh: could not create the baseline's keys" >&2; cat "$WORK/base.log" >&2; exit 1; }
    echo "baseline gateway http://$BASE_ADDR (pid $BASE_PID, core 0): $BENCH_BASELINE_SVC" | tee -a "$OUT/machine.txt"
fi

# One svc-bench measurement on core 1, bounded in time; its JSON line goes to results.jsonl.
bench() {
    local label=$1 url=$2 key=$3 pid=$4 measure=$5 mode=$6
    local stream=()
    [[ $mode == stream ]] && stream=(--stream)
    if ! SVC_BENCH_KEY=$key timeout 300 taskset -c 1 "$BIN/svc-bench" run --label "$label" --url "$url" \
        --measure "$measure" "${stream[@]}" --duration "$DURATION" --open-duration "$OPEN_DURATION" \
        --rate "$RATE" --concurrency "$CONCURRENCY" --warmup "$WARMUP" --watch-pid "$pid" \
        --also-pid "$UP_PID" --also-pid "$UP0_PID" --also-pid "$GW_PID" --also-pid "$NGX_PID" --also-pid "$FLOOR_PID" \
        ${BASE_PID:+--also-pid "$BASE_PID"} >"$WORK/run.out"; then
        echo "bench/run.sh: svc-bench failed for $label $measure $mode" >&2
    fi
    cat "$WORK/run.out" >>"$OUT/log.txt"
    grep -v '^{' "$WORK/run.out" >&2 || true
    grep '^{' "$WORK/run.out" >>"$OUT/results.jsonl" || true
}

: >"$OUT/results.jsonl"
DIRECT=http://$UP_ADDR/v1/chat/completions
GATEWAY=http://$GW_ADDR/v1/chat/completions
# Interleaved (direct, nginx, floor, gw-off, gw-on for each measurement) so that drift of the machine hits them all alike.
for measure in latency open peak; do
    for mode in plain stream; do
        echo "== $measure, $mode" >&2
        bench direct "$DIRECT" "" "$UP_PID" "$measure" "$mode"
        if [[ $measure != peak ]]; then
            bench direct-core0 "http://$UP0_ADDR/v1/chat/completions" "" "$UP0_PID" "$measure" "$mode"
        fi
        bench nginx "http://127.0.0.1:$NGX_PORT/v1/chat/completions" "" "$NGX_PID" "$measure" "$mode"
        bench floor "http://$FLOOR_ADDR/v1/chat/completions" "" "$FLOOR_PID" "$measure" "$mode"
        bench gw-off "$GATEWAY" "$KEY_OFF" "$GW_PID" "$measure" "$mode"
        bench gw-on "$GATEWAY" "$KEY_ON" "$GW_PID" "$measure" "$mode"
        if [[ -n $BASE_PID ]]; then
            bench base-off "http://$BASE_ADDR/v1/chat/completions" "$BASE_OFF" "$BASE_PID" "$measure" "$mode"
            bench base-on "http://$BASE_ADDR/v1/chat/completions" "$BASE_ON" "$BASE_PID" "$measure" "$mode"
        fi
    done
done

RSS_KIB=$(awk '/^VmHWM:/ {print $2}' "/proc/$GW_PID/status")
NGX_RSS_KIB=$(awk '/^VmHWM:/ {print $2}' "/proc/$NGX_PID/status")
FLOOR_RSS_KIB=$(awk '/^VmHWM:/ {print $2}' "/proc/$FLOOR_PID/status")
if [[ -n $BASE_PID ]]; then
    echo "baseline gateway peak RSS (VmHWM): $(awk '/^VmHWM:/ {print $2}' "/proc/$BASE_PID/status") KiB" | tee -a "$OUT/machine.txt"
fi
SPEND_ROWS=$(curl -sS --max-time 10 -H "Authorization: Bearer $MASTER" "http://$GW_ADDR/team/info?team_id=bench-on" | head -c 600 || true)
{
    echo "gateway peak RSS (VmHWM): $RSS_KIB KiB ($((RSS_KIB / 1024)) MiB); nginx: $NGX_RSS_KIB KiB; svc-floor: $FLOOR_RSS_KIB KiB; load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "team bench-on after the run: $SPEND_ROWS"
} | tee -a "$OUT/machine.txt"
"$BIN/svc-bench" report "$OUT/results.jsonl" --rss-kib "$RSS_KIB" --proxy-rss-kib "$NGX_RSS_KIB" --floor-rss-kib "$FLOOR_RSS_KIB" | tee "$OUT/report.md"
echo "results in $OUT" >&2
