#!/usr/bin/env bash
# A rolling upgrade, checked: a two-node fleet on one PostgreSQL database, node A on the binary of an earlier
# commit and node B on this working tree's, then swapped (A restarted on the new binary, B on the old one), with
# a budgeted key spending through both nodes all along and a webhook receiver counting the budget events.
# It holds when: every request is answered (200 while the budget has room, 429 `Budget exceeded` after, never a
# 5xx), the spend the store records never passes the budget, and `budget.exceeded` reaches the webhook once.
#
#   bash scripts/rolling-upgrade.sh --old 5945196  # the earlier binary: that commit's
#
# It builds twice (the old commit in a worktree under target/upgrade/, with its own target folder; this tree's
# debug build), so it is not part of CI; BENCHMARKS.md records its last run. Needs PostgreSQL on 127.0.0.1:5432
# (trust auth, user postgres) and python3. Everything it starts listens on 127.0.0.1 and is stopped at exit.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

OLD=""
while [ $# -gt 0 ]; do
  case "$1" in
    --old) OLD="${2:?--old needs a commit}"; shift 2 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "rolling-upgrade.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$OLD" ] || { echo "rolling-upgrade.sh: give the earlier commit: --old COMMIT" >&2; exit 2; }
OLD=$(git rev-parse --short "$OLD")
say() { printf '\n==> %s\n' "$*"; }
die() { printf 'rolling-upgrade.sh: %s\n' "$*" >&2; exit 1; }

WORK="$ROOT/target/upgrade"
mkdir -p "$WORK"
say "building the old binary ($OLD) and this tree's"
if [ ! -x "$WORK/old-$OLD/target/debug/svc" ]; then
  rm -rf "$WORK/old-$OLD"
  git worktree add -f --detach "$WORK/old-$OLD" "$OLD" >/dev/null
  (cd "$WORK/old-$OLD" && CARGO_TARGET_DIR="$WORK/old-$OLD/target" cargo build --quiet -p svc-cli --bin svc)
fi
cargo build --quiet -p svc-cli --bin svc -p svc-testkit --bin svc-fake-upstream
OLD_SVC="$WORK/old-$OLD/target/debug/svc"
NEW_SVC="$ROOT/target/debug/svc"
NEW_REV="$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo +changes)"

RUN=$(mktemp -d)
DB="svc_upgrade_$$"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  psql -h 127.0.0.1 -U postgres -d postgres -qc "DROP DATABASE IF EXISTS $DB" >/dev/null 2>&1 || true
  rm -rf "$RUN"
}
trap cleanup EXIT
psql -h 127.0.0.1 -U postgres -d postgres -qc "CREATE DATABASE $DB" >/dev/null || die "cannot create a database on 127.0.0.1:5432"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# The upstream, and a webhook receiver that counts events by kind.
UP_PORT=$(free_port)
"$ROOT/target/debug/svc-fake-upstream" --port "$UP_PORT" 2>"$RUN/upstream.log" &
PIDS+=($!)
HOOK_PORT=$(free_port)
cat >"$RUN/hook.py" <<'EOF'
import http.server, json, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        with open(sys.argv[2], "a") as f:
            f.write(json.loads(body)["event"] + "\n")
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
python3 "$RUN/hook.py" "$HOOK_PORT" "$RUN/events.txt" &
PIDS+=($!)
touch "$RUN/events.txt"

MASTER=sk-svc-rolling-upgrade
config() { # node port
  cat <<EOF
server:
  host: 127.0.0.1
  port: $2
  master_key: $MASTER
  database_url: postgres://postgres@127.0.0.1:5432/$DB
fleet:
  name: upgrade
  node: $1
  journal_dir: $RUN/journal-$1
  heartbeat_seconds: 1
model_list:
  - model_name: m
    params: { model: openai/m, api_base: http://127.0.0.1:$UP_PORT/v1, api_key: x, input_cost_per_token: 0.001, output_cost_per_token: 0.001 }
notifications:
  webhooks:
    - url: http://127.0.0.1:$HOOK_PORT/hook
      events: [budget.*]
      secret: rolling-upgrade-secret
gateway_settings:
  teams:
    - team_id: t
      budget_limit: 1
      models: [m]
EOF
}
A_PORT=$(free_port)
B_PORT=$(free_port)
config a "$A_PORT" >"$RUN/a.yaml"
config b "$B_PORT" >"$RUN/b.yaml"
declare -A NODE_PID
start() { # node binary
  local port; port=$([ "$1" = a ] && echo "$A_PORT" || echo "$B_PORT")
  "$2" --config "$RUN/$1.yaml" serve >>"$RUN/$1.log" 2>&1 &
  NODE_PID[$1]=$!
  PIDS+=($!)
  for _ in $(seq 1 200); do
    curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1 && return 0
    kill -0 "${NODE_PID[$1]}" 2>/dev/null || break
    sleep 0.1
  done
  tail -20 "$RUN/$1.log" >&2
  die "node $1 did not start on $2"
}
stop() { kill -TERM "${NODE_PID[$1]}"; wait "${NODE_PID[$1]}" 2>/dev/null || true; }

STATUSES="$RUN/statuses.txt"
: >"$STATUSES"
traffic() { # rounds: a request to each node per round
  for _ in $(seq 1 "$1"); do
    for port in "$A_PORT" "$B_PORT"; do
      curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$port/v1/chat/completions" \
        -H "Authorization: Bearer $KEY" -H 'Content-Type: application/json' \
        -d '{"model":"m","max_tokens":50,"messages":[{"role":"user","content":"hello"}]}' >>"$STATUSES"
    done
  done
}

say "A on $OLD (old), B on $NEW_REV (new), one PostgreSQL"
start a "$OLD_SVC"
start b "$NEW_SVC"
KEY=$(curl -fsS "http://127.0.0.1:$A_PORT/key/generate" -H "Authorization: Bearer $MASTER" \
  -H 'Content-Type: application/json' -d '{"team_id":"t","key_alias":"upgrade"}' | python3 -c 'import json,sys; print(json.load(sys.stdin)["key"])')
traffic 20
say "swapped: A restarted on the new binary, B on the old one"
stop a
start a "$NEW_SVC"
traffic 10
stop b
start b "$OLD_SVC"
traffic 40

say "what held"
# The last records are written (a stopped node writes its own; the live ones within their linger) and the
# webhook delivered: wait for budget.exceeded, 15 s at most.
for _ in $(seq 1 150); do
  grep -q '^budget.exceeded$' "$RUN/events.txt" && break
  sleep 0.1
done
sleep 1
spent=$(psql -h 127.0.0.1 -U postgres -d "$DB" -tAc "SELECT COALESCE(SUM(cost), 0) FROM spend_log WHERE team_id = 't'")
ok=$(grep -c '^200$' "$STATUSES" || true)
refused=$(grep -c '^429$' "$STATUSES" || true)
other=$(grep -vc '^\(200\|429\)$' "$STATUSES" || true)
exceeded=$(grep -c '^budget.exceeded$' "$RUN/events.txt" || true)
echo "requests: $(wc -l <"$STATUSES") ($ok answered, $refused refused 429, $other other)"
echo "team t spent $(python3 -c "print($spent / 1e9)") of its 1.00 budget in the store"
echo "webhook: $(sort "$RUN/events.txt" | uniq -c | tr '\n' ';')"
fail=0
[ "$other" -eq 0 ] || { echo "FAILED: $other answers were neither 200 nor 429"; fail=1; }
[ "$refused" -gt 0 ] || { echo "FAILED: the budget was never reached"; fail=1; }
[ "$spent" -le 1000000000 ] || { echo "FAILED: spend passed the budget"; fail=1; }
[ "$exceeded" -eq 1 ] || { echo "FAILED: budget.exceeded reached the webhook $exceeded times"; fail=1; }
grep -h -i "unclean\|panick" "$RUN"/a.log "$RUN"/b.log | head -5 || true
[ "$fail" -eq 0 ] && echo "rolling upgrade $OLD <-> $NEW_REV: budgets and events held"
exit "$fail"
