#!/usr/bin/env bash
# Instructions per call of each provider's translation (issue 31), counted without noise: the translation_overhead
# example (crates/svc-providers/examples) run under `valgrind --tool=callgrind` for one provider at a time, N and
# 5N calls (each a non-streaming call and a streamed one), so that start-up cancels out:
# (I(5N) − I(N)) / 4N per call pair. The fake upstream runs in the same process, so each figure holds its server's
# work too; the difference from `openai` (the passthrough, against the OpenAI-compatible fake) is an upper bound
# on what the translation adds. Then the latencies: three runs of the example, every provider alternating.
#
# Environment: TRANSLATION_N (default 200), BENCH_NO_BUILD=1. Output under target/bench/translation-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${TRANSLATION_N:-200}
command -v valgrind >/dev/null || { echo "bench/translation.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
    cargo build --release --quiet -p svc-providers --example translation_overhead
fi
BIN=target/release/examples/translation_overhead
OUT=target/bench/translation-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
count() { # provider calls → instructions
    valgrind --tool=callgrind --callgrind-out-file="$OUT/cg.$1.$2" "$BIN" "$2" "$1" >/dev/null 2>"$OUT/valgrind.$1.$2.log"
    grep -m1 '^summary:' "$OUT/cg.$1.$2" | awk '{print $2}'
}
echo "provider instructions/call(plain+streamed) added-vs-openai" | tee "$OUT/instructions.txt"
base=""
for p in openai anthropic gemini bedrock bedrock-sigv4; do
    a=$(count "$p" "$N"); b=$(count "$p" $((5 * N)))
    per=$(( (b - a) / (4 * N) ))
    [[ -z $base ]] && base=$per
    echo "$p $per $(( per - base ))" | tee -a "$OUT/instructions.txt"
done
for round in 1 2 3; do
    timeout 600 "$BIN" 2000 | tee "$OUT/latency.$round.txt"
done
echo "bench/translation.sh: results in $OUT" >&2
