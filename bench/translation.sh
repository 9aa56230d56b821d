#!/usr/bin/env bash
# Added latency of each provider's translation (issues 5 and 31): the translation_overhead example
# (crates/svc-providers/examples) three times, every provider alternating in each run, against its own fake in the
# same process; the added figures are each p50 (p90) less the OpenAI passthrough's of the same run. What a
# translation costs the gateway in instructions per request: `CALLGRIND_PROVIDER=<provider> bash bench/callgrind.sh`.
#
# Environment: TRANSLATION_CALLS (default 2000), BENCH_NO_BUILD=1. Output under target/bench/translation-<time>/.
set -euo pipefail
cd "$(dirname "$0")/.."
CALLS=${TRANSLATION_CALLS:-2000}
if [[ "${BENCH_NO_BUILD:-0}" != 1 ]]; then
    cargo build --release --quiet -p svc-providers --example translation_overhead
fi
OUT=target/bench/translation-$(date +%Y%m%d-%H%M%S)
mkdir -p "$OUT"
for round in 1 2 3; do
    timeout 600 target/release/examples/translation_overhead "$CALLS" | tee "$OUT/latency.$round.txt"
done
echo "bench/translation.sh: results in $OUT" >&2
