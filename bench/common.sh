# Helpers shared by the bench/*.sh scripts (sourced).

# Kills the benchmark's children ($PIDS), waits for them and removes its scratch folder ($WORK): every script's
# exit trap.
stop_children() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$WORK"
}

# Waits (at most 30 s) for `listening on http://ADDR` in log $1; prints ADDR.
wait_listening() {
    local log=$1 pid=$2 addr=""
    for _ in $(seq 300); do
        addr=$(grep -o 'listening on http://[0-9.:]*' "$log" 2>/dev/null | head -1 | sed 's|listening on http://||') || true
        [[ -n $addr ]] && { echo "$addr"; return 0; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    echo "bench: no 'listening on' in $log:" >&2
    cat "$log" >&2
    return 1
}

# Creates a virtual key on the gateway at $1 with the JSON body $2 (master key $MASTER); prints the key.
new_key() {
    curl -sS --max-time 10 -H "Authorization: Bearer $MASTER" -H 'Content-Type: application/json' \
        -d "$2" "http://$1/key/generate" | grep -o '"key":"[^"]*"' | head -1 | cut -d'"' -f4
}

# Prints the benchmark's gateway config for store $1 and upstream address $2: one priced model; team bench-off
# without a budget, team bench-on with an ample one.
gateway_yaml() {
    cat <<EOF
server:
  host: 127.0.0.1
  port: 0
  database_url: $1
model_list:
  - model_name: openai/gpt-4.1-mini
    params:
      model: openai/up-mini
      api_base: http://$2/v1
      api_key: upstream-secret
      timeout_seconds: 30
      input_cost_per_token: 0.0000004
      output_cost_per_token: 0.0000016
      max_output_tokens: 32768
gateway_settings:
  budget_duration: 30d
  teams:
    - team_id: bench-off
      models: [openai/gpt-4.1-mini]
    - team_id: bench-on
      budget_limit: 1000000
      models: [openai/gpt-4.1-mini]
EOF
}

# Waits (at most 60 s: valgrind starts programs slowly) for 127.0.0.1:$1 to accept, while process $2 lives
# (its log is $3).
wait_port() {
    for _ in $(seq 600); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    echo "bench: nothing listens on 127.0.0.1:$1; $3:" >&2
    cat "$3" >&2
    return 1
}

# Prints an nginx config for a bare reverse proxy in the gateway's place: prefix folder $1 (pid, temp files),
# upstream address $2, listen port $3. One process (`master_process off`), a keep-alive pool to the upstream,
# responses passed on as they come (streams), no access log.
nginx_conf() {
    cat <<EOF
daemon off;
master_process off;
worker_processes 1;
pid $1/nginx.pid;
error_log stderr warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path $1/body;
    proxy_temp_path $1/proxy;
    upstream up { server $2; keepalive 64; }
    server {
        listen 127.0.0.1:$3;
        location / {
            proxy_pass http://up;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
        }
    }
}
EOF
}

# Prints the path of nginx, installing Debian's nginx-light first when it is missing (as root or with sudo -n).
need_nginx() {
    local nginx
    nginx=$(command -v nginx || echo /usr/sbin/nginx)
    if [[ ! -x $nginx ]]; then
        echo "== installing nginx-light (Debian)" >&2
        local sudo=""
        [[ $(id -u) -eq 0 ]] || sudo="sudo -n"
        { $sudo apt-get update -qq && $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light; } >&2 \
            || { echo "bench: cannot install nginx-light (Debian)" >&2; return 1; }
        nginx=/usr/sbin/nginx
    fi
    echo "$nginx"
}

# Prints a TCP port free on 127.0.0.1 now.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# The peers benchmarks' svc config (bench/peers.sh, bench/peers-callgrind.sh): store $1, listening on port $2, the
# Responses upstream at $3 and the Messages upstream at $4; budgets on (a team budget).
peers_svc_yaml() {
    cat <<EOF
server: {host: 127.0.0.1, port: $2, database_url: 'sqlite://$1'}
model_list:
  - {model_name: resp, params: {model: openai/up-resp, api_base: 'http://$3/v1', input_cost_per_token: 0.0000004, output_cost_per_token: 0.0000016, max_output_tokens: 32768}}
  - {model_name: msg, params: {model: anthropic/claude-up, api_base: 'http://$4', input_cost_per_token: 0.000003, output_cost_per_token: 0.000015, max_output_tokens: 32768}}
gateway_settings:
  teams: [{team_id: bench, budget_limit: 1000000}]
EOF
}

# LiteLLM-Rust's config for the same two models: the Responses upstream at $1, the Messages one at $2, master key $3.
peers_litellm_yaml() {
    cat <<EOF
model_list:
  - model_name: resp
    litellm_params: {model: openai/up-resp, api_base: 'http://$1', api_key: upstream-secret}
  - model_name: msg
    litellm_params: {model: anthropic/claude-up, api_base: 'http://$2', api_key: ant-secret}
general_settings:
  master_key: $3
EOF
}

# Instructions of a finished callgrind run: its total (the `summary:` line) less what quanta's clock calibration
# took. governor's clock calibrates itself against the wall clock once, when the first rate limiter is made, for
# as long as the wall clock says, and under valgrind that varies by millions of instructions between runs: left
# in, it moved the figure per request by up to ±6,000 (quanta::Calibration::calibrate's inclusive cost: the
# function's own line, `calibrate [binary]`; the lines of code inlined into it from other files are part of it).
callgrind_instructions() {
    local total calibration
    total=$(awk '/^summary:/ {print $2}' "$1")
    calibration=$(callgrind_annotate --inclusive=yes --threshold=100 --auto=no "$1" 2>/dev/null |
        awk '/quanta::Calibration::calibrate \[/ && !/[<>*]/ {gsub(",", "", $1); sum += $1} END {print sum + 0}')
    echo $((total - calibration))
}

# The peers benchmarks' requests (bench/peers.sh, bench/peers-callgrind.sh): the same bodies to svc and LiteLLM-Rust.
PEERS_RESP='{"model":"resp","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"You are a terse assistant."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"Say hello in five words."}]}],"max_output_tokens":64,"store":false}'
PEERS_MSG='{"model":"msg","max_tokens":64,"system":[{"type":"text","text":"You are a terse assistant."}],"messages":[{"role":"user","content":[{"type":"text","text":"Say hello in five words."}]}]}'

# The start of the agent-API benchmarks (bench/agents.sh, bench/peers.sh, bench/peers-callgrind.sh,
# bench/hot-symbols.sh): a scratch folder in WORK, the children in PIDS stopped at exit, the two upstreams started
# (start_agent_upstreams) and a master key in MASTER.
begin_agent_bench() {
    WORK=$(mktemp -d)
    PIDS=()
    trap stop_children EXIT
    trap 'exit 130' INT TERM
    start_agent_upstreams
    MASTER="sk-master-bench-$(date +%s%N)"
}

# The upstreams of the agent-API benchmarks (bench/agents.sh, bench/peers.sh, bench/peers-callgrind.sh) on core 1:
# svc-fake-upstream (chat completions and Responses; its address in UP) and svc-fake-anthropic (Messages; in ANT),
# their PIDs in UP_PID and ANT_PID and added to PIDS.
start_agent_upstreams() {
    taskset -c 1 "$BIN/svc-fake-upstream" --port 0 --threads 1 2>"$WORK/upstream.log" &
    UP_PID=$!; PIDS+=("$UP_PID")
    UP=$(wait_listening "$WORK/upstream.log" "$UP_PID")
    taskset -c 1 "$BIN/svc-fake-anthropic" --no-record 2>"$WORK/anthropic.log" &
    ANT_PID=$!; PIDS+=("$ANT_PID")
    ANT=$(wait_listening "$WORK/anthropic.log" "$ANT_PID")
}
