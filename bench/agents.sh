#!/usr/bin/env bash
# The agent APIs' cost, in one command: `bench/agents.sh` (about 2 minutes; BENCH_QUICK=1 for ~30 s).
#
# On 127.0.0.1, placed as bench/run.sh places them: the gateway on core 0 (one tokio worker), the upstreams
# (svc-fake-upstream: chat completions and Responses; svc-fake-anthropic: Messages) and svc-bench on core 1.
# For each path a client can take, closed loop at concurrency 1, plain and streamed (time to first byte):
#
#   chat        POST /v1/chat/completions → openai/ chat completions   (pass-through, the reference)
#   msg-pass    POST /v1/messages         → anthropic/ Messages        (pass-through)
#   msg-chat    POST /v1/messages         → openai/ chat completions   (translation)
#   resp-pass   POST /v1/responses        → openai/ Responses          (pass-through)
#   resp-msg    POST /v1/responses        → anthropic/ Messages        (translation, through chat's form)
#
# and each upstream API called directly (direct-chat, direct-msg, direct-resp). The added latency of a path is
# its p50 minus the p50 of calling its upstream directly, in the same run; each path is then compared with
# chat completions' added latency. Rounds are interleaved (every path once per round, BENCH_ROUNDS rounds,
# default 3) and the median over rounds is reported with the spread. Results under target/bench/agents-<time>/.
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
if [[ "${BENCH_QUICK:-0}" == 1 ]]; then DURATION=${BENCH_DURATION:-1}; WARMUP=0.3; ROUNDS=${BENCH_ROUNDS:-1}
else DURATION=${BENCH_DURATION:-4}; WARMUP=1; ROUNDS=${BENCH_ROUNDS:-3}; fi
[[ $(nproc) -ge 2 ]] || { echo "bench/agents.sh: needs at least 2 CPU cores" >&2; exit 1; }
for tool in taskset curl timeout python3; do
    command -v "$tool" >/dev/null || { echo "bench/agents.sh: needs $tool" >&2; exit 1; }
done
if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
    echo "== building release binaries" >&2
    cargo build --release --quiet -p svc-cli -p svc-testkit -p svc-bench \
        --bin svc --bin svc-fake-upstream --bin svc-fake-anthropic --bin svc-bench
fi
BIN=$ROOT/target/release
OUT=$ROOT/target/bench/agents-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
# shellcheck source=bench/common.sh
source "$ROOT/bench/common.sh"
begin_agent_bench
cat >"$WORK/svc.yaml" <<EOF
server: {host: 127.0.0.1, port: 0, database_url: 'sqlite://$WORK/svc.db'}
model_list:
  - {model_name: chat, params: {model: openai/up-chat, api_base: 'http://$UP/v1', input_cost_per_token: 0.0000004, output_cost_per_token: 0.0000016, max_output_tokens: 32768}}
  - {model_name: msg-pass, params: {model: anthropic/claude-up, api_base: 'http://$ANT', input_cost_per_token: 0.000003, output_cost_per_token: 0.000015, max_output_tokens: 32768}}
  - {model_name: msg-chat, params: {model: openai/up-chat, api_base: 'http://$UP/v1', input_cost_per_token: 0.0000004, output_cost_per_token: 0.0000016, max_output_tokens: 32768}}
  - {model_name: resp-pass, params: {model: openai/up-resp, api_base: 'http://$UP/v1', input_cost_per_token: 0.0000004, output_cost_per_token: 0.0000016, max_output_tokens: 32768}}
  - {model_name: resp-msg, params: {model: anthropic/claude-up, api_base: 'http://$ANT', input_cost_per_token: 0.000003, output_cost_per_token: 0.000015, max_output_tokens: 32768}}
gateway_settings:
  teams: [{team_id: bench, budget_limit: 1000000}]
EOF
SVC_MASTER_KEY=$MASTER TOKIO_WORKER_THREADS=1 taskset -c 0 "$BIN/svc" serve --config "$WORK/svc.yaml" \
    >/dev/null 2>"$WORK/gateway.log" &
GW_PID=$!; PIDS+=("$GW_PID")
GW=$(wait_listening "$WORK/gateway.log" "$GW_PID")
KEY=$(new_key "$GW" '{"team_id":"bench","key_alias":"bench","max_budget":1000000}')
[[ $KEY == sk-* ]] || { echo "bench/agents.sh: could not create a key" >&2; cat "$WORK/gateway.log" >&2; exit 1; }
{
    echo "# svc agent-API benchmark, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (work tree modified)')"
    echo "cores: $(nproc); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "closed loop, concurrency 1, ${DURATION}s per measurement, ${ROUNDS} rounds"
} | tee "$OUT/machine.txt"

CHAT='{"model":"MODEL","messages":[{"role":"system","content":"You are a terse assistant."},{"role":"user","content":"Say hello in five words."}],"max_tokens":64}'
MSG='{"model":"MODEL","max_tokens":64,"system":[{"type":"text","text":"You are a terse assistant.","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":[{"type":"text","text":"Say hello in five words."}]}]}'
RESP='{"model":"MODEL","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a terse assistant."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"Say hello in five words."}]}],"max_output_tokens":64,"store":false}'

# label  url  key  body  model  stream-end  extra-header
run_one() {
    local label=$1 url=$2 key=$3 body=$4 model=$5 done=$6 mode=$7
    local stream=() header=(--header "anthropic-version: 2023-06-01")
    [[ $mode == stream ]] && stream=(--stream)
    SVC_BENCH_KEY=$key timeout 120 taskset -c 1 "$BIN/svc-bench" run --label "$label" --url "$url" \
        --body "${body//MODEL/$model}" --measure latency "${stream[@]}" --done "$done" "${header[@]}" \
        --duration "$DURATION" --warmup "$WARMUP" --watch-pid "$GW_PID" \
        --also-pid "$UP_PID" --also-pid "$ANT_PID" >"$WORK/run.out" || echo "bench/agents.sh: $label $mode failed" >&2
    cat "$WORK/run.out" >>"$OUT/log.txt"
    grep '^{' "$WORK/run.out" | sed "s/^{/{\"round\":$ROUND,/" >>"$OUT/results.jsonl" || true
}

: >"$OUT/results.jsonl"
for ROUND in $(seq "$ROUNDS"); do
    for mode in plain stream; do
        echo "== round $ROUND, $mode" >&2
        run_one direct-chat "http://$UP/v1/chat/completions" "" "$CHAT" up-chat "data: [DONE]" "$mode"
        run_one direct-msg "http://$ANT/v1/messages" "" "$MSG" claude-up "message_stop" "$mode"
        run_one direct-resp "http://$UP/v1/responses" "" "$RESP" up-resp "response.completed" "$mode"
        run_one chat "http://$GW/v1/chat/completions" "$KEY" "$CHAT" chat "data: [DONE]" "$mode"
        run_one msg-pass "http://$GW/v1/messages" "$KEY" "$MSG" msg-pass "message_stop" "$mode"
        run_one msg-chat "http://$GW/v1/messages" "$KEY" "$MSG" msg-chat "message_stop" "$mode"
        run_one resp-pass "http://$GW/v1/responses" "$KEY" "$RESP" resp-pass "response.completed" "$mode"
        run_one resp-msg "http://$GW/v1/responses" "$KEY" "$RESP" resp-msg "response.completed" "$mode"
    done
done

python3 - "$OUT/results.jsonl" <<'PY' | tee "$OUT/report.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
def p50(label, stream, rnd):
    for r in rows:
        if r["label"] == label and r["stream"] == stream and r["round"] == rnd and r["failed"] == 0:
            return (r["ttfb_us"] if stream else r["latency_us"])["p50"]
    return None
paths = [("chat", "direct-chat", "chat completions → chat (pass-through)"),
         ("msg-pass", "direct-msg", "Messages → anthropic/ (pass-through)"),
         ("msg-chat", "direct-chat", "Messages → chat (translation)"),
         ("resp-pass", "direct-resp", "Responses → openai/ (pass-through)"),
         ("resp-msg", "direct-msg", "Responses → anthropic/ (translation)")]
rounds = sorted({r["round"] for r in rows})
print("| path | mode | added p50 µs (median; range over rounds) | minus chat completions' added µs (median; range) |")
print("|---|---|---:|---:|")
for stream in (False, True):
    ref = {n: (p50("chat", stream, n) or 0) - (p50("direct-chat", stream, n) or 0) for n in rounds}
    for label, direct, name in paths:
        added, extra = [], []
        for n in rounds:
            g, d = p50(label, stream, n), p50(direct, stream, n)
            if g is None or d is None:
                continue
            added.append(g - d)
            extra.append(g - d - ref[n])
        if not added:
            print(f"| {name} | {'stream TTFB' if stream else 'plain'} | failed | |")
            continue
        fmt = lambda xs: f"{statistics.median(xs):+.0f} ({min(xs):+.0f} … {max(xs):+.0f})"
        print(f"| {name} | {'stream TTFB' if stream else 'plain'} | {fmt(added)} | {fmt(extra) if label != 'chat' else '—'} |")
PY
echo "results in $OUT" >&2
