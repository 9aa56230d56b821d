#!/usr/bin/env bash
# The dashboard's page weight and first render (issue 13), in one command: `bench/ui.sh`.
# Builds the release `svc` (BENCH_NO_BUILD=1 skips it), installs the pinned playwright-core of tests/ui, then
# runs tests/ui/bench/measure.js: a gateway on a temporary SQLite store, 10,000 spend records (SPEND_RECORDS)
# made by real mock-provider requests, and every page opened cold RUNS times (default 5) in headless Chromium
# (/usr/bin/chromium). Prints a Markdown table (bytes on the wire until the page's data is drawn; ms from
# navigation start to that moment) and writes target/ui-bench.json. Targets: < 150 KB, < 300 ms per page.
set -euo pipefail
cd "$(dirname "$0")/.."
die() { printf 'bench/ui.sh: %s\n' "$*" >&2; exit 1; }
[ -x /usr/bin/chromium ] || [ -n "${CHROMIUM:-}" ] || die "/usr/bin/chromium not found: apt-get install chromium"
command -v npm >/dev/null || die "npm not found: install Node.js 20 or newer"
if [ -z "${BENCH_NO_BUILD:-}" ]; then
  cargo build --release --locked --bin svc
fi
npm ci --prefix tests/ui --no-audit --no-fund --loglevel=error >/dev/null || die "npm ci failed in tests/ui"
SVC_BIN="${SVC_BIN:-$PWD/target/release/svc}" node tests/ui/bench/measure.js
