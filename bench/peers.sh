#!/usr/bin/env bash
# svc against its nearest peer, LiteLLM's Rust server, and against nginx, in one run (issue 32):
#   LITELLM_RUST=/path/to/litellm-rust bash bench/peers.sh      # about 8 minutes
#
# Build the peer from its source (LiteLLM-Labs/litellm-rust, commit 25683a2a): `cargo build --release --locked`.
#
# Placed as bench/run.sh places the gateway: each gateway (svc with budgets on: a team budget and a key
# `max_budget`, durable spend, metrics and its request line; LiteLLM-Rust with its master key; nginx, one process,
# `master_process off`, a keep-alive pool) alone on core 0 with one worker (TOKIO_WORKER_THREADS=1), the upstreams
# (svc-fake-upstream for `/v1/responses`, svc-fake-anthropic for `/v1/messages`) and svc-bench on core 1. For each
# API (Responses and Messages, both passed through), plain and streamed, and each target (the upstream directly,
# svc, LiteLLM-Rust, nginx): c=1 closed loop (added p50 and p99 over calling the upstream directly) and c=64 closed
# loop (CPU µs per request of the target process, requests/s). BENCH_ROUNDS rounds (default 3), interleaved; a
# measurement during which other processes used more than 0.2 cores is run again (at most twice). Peak RSS is
# each gateway's VmHWM at the end. Medians of the rounds, with the range, in target/bench/peers-<time>/report.md.
#
# Environment: LITELLM_RUST (required), BENCH_ROUNDS (3), BENCH_DURATION (s, 4), BENCH_WARMUP (s, 1),
# BENCH_NO_BUILD=1.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PEER=${LITELLM_RUST:?bench/peers.sh: set LITELLM_RUST to the path of a litellm-rust binary (see the header)}
[[ -x $PEER ]] || { echo "bench/peers.sh: $PEER is not an executable" >&2; exit 1; }
ROUNDS=${BENCH_ROUNDS:-3}; DURATION=${BENCH_DURATION:-4}; WARMUP=${BENCH_WARMUP:-1}
[[ $(nproc) -ge 2 ]] || { echo "bench/peers.sh: needs at least 2 CPU cores" >&2; exit 1; }
for tool in taskset curl timeout python3; do
    command -v "$tool" >/dev/null || { echo "bench/peers.sh: needs $tool" >&2; exit 1; }
done
if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
    echo "== building release binaries" >&2
    cargo build --release --quiet -p svc-cli -p svc-testkit -p svc-bench \
        --bin svc --bin svc-fake-upstream --bin svc-fake-anthropic --bin svc-bench
fi
BIN=$ROOT/target/release
OUT=$ROOT/target/bench/peers-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
begin_agent_bench
NGINX=$(need_nginx)
# The release svc places the functions it runs together by crates/svc-cli/hot-symbols.txt; a list made before
# large changes names functions the binary no longer has, and the resident text (peak RSS) grows back.
if command -v nm >/dev/null; then
    stale=$(comm -23 <(sort -u "$ROOT/crates/svc-cli/hot-symbols.txt") \
        <(nm "$BIN/svc" | awk '$2 ~ /^[tTwW]$/ {print $3}' | sort -u) | wc -l)
    listed=$(wc -l <"$ROOT/crates/svc-cli/hot-symbols.txt")
    if (( stale * 20 > listed )); then
        echo "bench/peers.sh: $stale of the $listed names in crates/svc-cli/hot-symbols.txt are gone from svc:" \
            "run bash bench/hot-symbols.sh and rebuild (peak RSS is measured high otherwise)" >&2
    fi
fi
# svc, budgets on.
peers_svc_yaml "$WORK/svc.db" 0 "$UP" "$ANT" >"$WORK/svc.yaml"
SVC_MASTER_KEY=$MASTER TOKIO_WORKER_THREADS=1 taskset -c 0 "$BIN/svc" serve --config "$WORK/svc.yaml" \
    >/dev/null 2>"$WORK/svc.log" &
SVC_PID=$!; PIDS+=("$SVC_PID")
SVC=$(wait_listening "$WORK/svc.log" "$SVC_PID")
SVC_KEY=$(new_key "$SVC" '{"team_id":"bench","key_alias":"bench","max_budget":1000000}')
[[ $SVC_KEY == sk-* ]] || { echo "bench/peers.sh: could not create a key" >&2; cat "$WORK/svc.log" >&2; exit 1; }

# LiteLLM-Rust: the same two models, its master key.
PEER_PORT=$(free_port)
PEER_KEY="sk-peer-bench-$(date +%s%N)"
peers_litellm_yaml "$UP" "$ANT" "$PEER_KEY" >"$WORK/peer.yaml"
# (From its own folder: it reads a `.env` there, of which there is none.)
(cd "$WORK" && RUST_LOG=warn TOKIO_WORKER_THREADS=1 exec taskset -c 0 "$PEER" serve --config "$WORK/peer.yaml" \
    --host 127.0.0.1 --port "$PEER_PORT" >"$WORK/peer.out" 2>"$WORK/peer.log") &
PEER_PID=$!; PIDS+=("$PEER_PID")
wait_port "$PEER_PORT" "$PEER_PID" "$WORK/peer.log"

# nginx in the gateways' place: each path to its upstream.
NGINX_PORT=$(free_port)
mkdir -p "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $WORK/nginx/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    upstream up { server $UP; keepalive 64; }
    upstream ant { server $ANT; keepalive 64; }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_buffering off;
        location /v1/responses { proxy_pass http://up; }
        location /v1/messages { proxy_pass http://ant; }
    }
}
EOF
taskset -c 0 "$NGINX" -p "$WORK/nginx" -c "$WORK/nginx/nginx.conf" 2>"$WORK/nginx.log" &
NGINX_PID=$!; PIDS+=("$NGINX_PID")
wait_port "$NGINX_PORT" "$NGINX_PID" "$WORK/nginx.log"

{
    echo "# svc against LiteLLM-Rust and nginx, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (work tree modified)')"
    echo "peer: $PEER ($("$PEER" --version 2>/dev/null || echo 'no --version'))"
    echo "cores: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "rounds: $ROUNDS; ${DURATION}s per measurement after ${WARMUP}s of warm-up; c=1 and c=64 closed loops"
} | tee "$OUT/machine.txt"


# One measurement: target $1 (direct, svc, peer, nginx), api $2 (responses, messages), mode $3 (plain, stream),
# measure $4 (latency, peak). Run again when the outside load passed 0.2 cores.
measure() {
    local target=$1 api=$2 mode=$3 what=$4 base key="" pid="" path body done
    case $target in
        direct) [[ $api == responses ]] && base=$UP || base=$ANT ;;
        svc) base=$SVC; key=$SVC_KEY; pid=$SVC_PID ;;
        peer) base=127.0.0.1:$PEER_PORT; key=$PEER_KEY; pid=$PEER_PID ;;
        nginx) base=127.0.0.1:$NGINX_PORT; pid=$NGINX_PID ;;
    esac
    if [[ $api == responses ]]; then path=/v1/responses; body=$PEERS_RESP; done=response.completed
    else path=/v1/messages; body=$PEERS_MSG; done=message_stop; fi
    [[ $target == direct && $api == responses ]] && body=${body//\"resp\"/\"up-resp\"}
    [[ $target == direct && $api == messages ]] && body=${body//\"msg\"/\"claude-up\"}
    local args=(--label "$target" --url "http://$base$path" --body "$body" --measure "$what" --done "$done"
        --header "anthropic-version: 2023-06-01" --duration "$DURATION" --warmup "$WARMUP" --concurrency 64
        --also-pid "$UP_PID" --also-pid "$ANT_PID")
    [[ $mode == stream ]] && args+=(--stream)
    [[ -n $pid ]] && args+=(--watch-pid "$pid")
    # Every gateway but the one measured is idle on core 0; their few timers are outside load.
    for pid_other in "$SVC_PID" "$PEER_PID" "$NGINX_PID"; do
        [[ $pid_other != "$pid" ]] && args+=(--also-pid "$pid_other")
    done
    for attempt in 1 2 3; do
        SVC_BENCH_KEY=$key timeout 120 taskset -c 1 "$BIN/svc-bench" run "${args[@]}" >"$WORK/run.out" \
            || { echo "bench/peers.sh: $target $api $mode $what failed" >&2; cat "$WORK/run.out" >&2; }
        cat "$WORK/run.out" >>"$OUT/log.txt"
        local line
        line=$(grep '^{' "$WORK/run.out" | head -1 || true)
        [[ -n $line ]] || return 0
        local outside
        outside=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1]).get("outside_load_cores", 0))' "$line")
        if python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= 0.2 or int(sys.argv[2]) == 3 else 1)' \
            "$outside" "$attempt"; then
            echo "$line" | sed "s/^{/{\"round\":$ROUND,\"api\":\"$api\",\"attempt\":$attempt,/" >>"$OUT/results.jsonl"
            return 0
        fi
        echo "bench/peers.sh: $target $api $mode $what: outside load $outside cores, again" >&2
    done
}

: >"$OUT/results.jsonl"
for ROUND in $(seq "$ROUNDS"); do
    for mode in plain stream; do
        for api in responses messages; do
            echo "== round $ROUND, $api, $mode" >&2
            measure direct "$api" "$mode" latency
            for target in svc peer nginx; do
                measure "$target" "$api" "$mode" latency
                measure "$target" "$api" "$mode" peak
            done
        done
    done
done
hwm() { awk '/^VmHWM:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }
echo "{\"rss_mib\": {\"svc\": $(hwm "$SVC_PID"), \"peer\": $(hwm "$PEER_PID"), \"nginx\": $(hwm "$NGINX_PID")}}" >"$OUT/rss.json"

python3 - "$OUT/results.jsonl" "$OUT/rss.json" <<'PY' | tee "$OUT/report.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
rss = json.load(open(sys.argv[2]))["rss_mib"]
rounds = sorted({r["round"] for r in rows})
def one(target, api, stream, measure, rnd):
    for r in rows:
        if (r["label"], r["api"], r["stream"], r["measure"], r["round"]) == (target, api, stream, measure, rnd) and r["failed"] == 0:
            return r
    return None
def series(f, *key):
    out = []
    for n in rounds:
        v = f(n, *key)
        if v is not None:
            out.append(v)
    return out
def med(xs, fmt="{:.1f}"):
    if not xs:
        return "failed"
    return (fmt + " ({}…{})").format(statistics.median(xs), fmt.format(min(xs)), fmt.format(max(xs)))
def lat(r, stream, q):
    return (r["ttfb_us"] if stream else r["latency_us"])[q]
print("| API, mode | CPU µs/request at c=64: svc · LiteLLM-Rust · nginx | svc ÷ LiteLLM-Rust | svc ÷ nginx | added p50 at c=1 (µs): svc · LiteLLM-Rust · nginx | added p99 at c=1 (µs): svc · LiteLLM-Rust · nginx | req/s at c=64: svc · LiteLLM-Rust · nginx |")
print("|---|---|---:|---:|---|---|---|")
for api in ("responses", "messages"):
    for stream in (False, True):
        cpu = {t: series(lambda n, t=t: (one(t, api, stream, "peak", n) or {}).get("watch", {}).get("cpu_us_per_req")) for t in ("svc", "peer", "nginx")}
        rps = {t: series(lambda n, t=t: (one(t, api, stream, "peak", n) or {}).get("rps")) for t in ("svc", "peer", "nginx")}
        def added(t, q):
            def f(n):
                g, d = one(t, api, stream, "latency", n), one("direct", api, stream, "latency", n)
                return None if g is None or d is None else lat(g, stream, q) - lat(d, stream, q)
            return series(f)
        ratio = lambda a, b: [x / y for x, y in zip(cpu[a], cpu[b]) if y]
        name = f"`/v1/{api}` {'streamed' if stream else 'plain'}"
        print(f"| {name} | {' · '.join(med(cpu[t]) for t in ('svc', 'peer', 'nginx'))} | {med(ratio('svc', 'peer'), '{:.2f}')} | {med(ratio('svc', 'nginx'), '{:.2f}')} "
              f"| {' · '.join(med(added(t, 'p50'), '{:.0f}') for t in ('svc', 'peer', 'nginx'))} "
              f"| {' · '.join(med(added(t, 'p99'), '{:.0f}') for t in ('svc', 'peer', 'nginx'))} "
              f"| {' · '.join(med(rps[t], '{:.0f}') for t in ('svc', 'peer', 'nginx'))} |")
print()
print(f"Peak RSS (VmHWM at the end), MiB: svc {rss['svc']} · LiteLLM-Rust {rss['peer']} · nginx {rss['nginx']}")
reruns = [r for r in rows if r.get("attempt", 1) > 1]
print(f"Measurements run again for outside load over 0.2 cores: {len(reruns)}; kept over it after three attempts: "
      f"{sum(1 for r in rows if r.get('outside_load_cores', 0) > 0.2)}")
PY
echo "results in $OUT" >&2
