# Helpers shared by bench/run.sh and bench/fleet.sh (sourced).

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
