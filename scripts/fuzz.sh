#!/usr/bin/env bash
# Runs the fuzz targets of fuzz/ for a bounded time (the fuzz step of scripts/test.sh):
#   1. installs cargo-fuzz into target/tools (once; reused while it is the pinned version),
#   2. builds every target in one cargo invocation into target/fuzz (libFuzzer with coverage instrumentation,
#      debug assertions and overflow checks; no sanitizer, which stable Rust does not have: Rust code is
#      memory-safe here, so what is looked for is panics, overflows, hangs and broken properties),
#   3. runs each target on its committed seed corpus fuzz/corpus/<target> plus a scratch corpus kept under
#      target/fuzz-corpus/<target> (what earlier runs found on this machine, so runs build on each other);
#      FUZZ_SECONDS seconds in all (default 60), shared evenly, at least 5 per target.
# A crash, a hang (an input running over 10 s), a stale fuzz/Cargo.lock or a target without seeds fails the
# run, naming the input that failed (libFuzzer writes it to fuzz/artifacts/<target>/, which git ignores).
#
#   bash scripts/fuzz.sh                                  # every target, about a minute
#   FUZZ_SECONDS=600 bash scripts/fuzz.sh config_load     # one target for ten minutes
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'fuzz.sh: %s\n' "$*" >&2; exit 1; }

CARGO_FUZZ_VERSION=0.13.2
TOOLS="$PWD/target/tools"
BUILD=(--sanitizer none --debug-assertions --target-dir target/fuzz)
TOTAL="${FUZZ_SECONDS:-60}"
[[ "$TOTAL" =~ ^[0-9]+$ ]] || die "FUZZ_SECONDS must be a whole number of seconds, not \`$TOTAL\`"

if ! "$TOOLS/bin/cargo-fuzz" --version 2>/dev/null | grep -qx "cargo-fuzz $CARGO_FUZZ_VERSION"; then
  echo "installing cargo-fuzz $CARGO_FUZZ_VERSION into $TOOLS"
  # A debug build installs in half the time, and cargo-fuzz only drives cargo and the targets.
  cargo install cargo-fuzz --version "=$CARGO_FUZZ_VERSION" --locked --debug --root "$TOOLS" \
    || die "could not install cargo-fuzz $CARGO_FUZZ_VERSION from crates.io"
fi
export PATH="$TOOLS/bin:$PATH"
command -v c++ >/dev/null || die "a C++ compiler (c++) is needed to build libFuzzer: install g++"

# cargo fuzz has no --locked: check the lock file first, so the build never changes it silently.
cargo metadata --locked --format-version 1 --manifest-path fuzz/Cargo.toml >/dev/null \
  || die "fuzz/Cargo.lock is out of date: run \`cargo update --workspace --manifest-path fuzz/Cargo.toml\` and commit it"

cargo fuzz build "${BUILD[@]}" || die "the fuzz targets do not build"

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi
[ "${#targets[@]}" -gt 0 ] || die "no fuzz targets (cargo fuzz list printed none)"
per=$(( TOTAL / ${#targets[@]} ))
(( per >= 5 )) || per=5

mkdir -p target/fuzz-logs
for t in "${targets[@]}"; do
  seeds="fuzz/corpus/$t"
  [ -n "$(ls -A "$seeds" 2>/dev/null)" ] || die "target \`$t\` has no seed corpus: add a few inputs to $seeds/"
  scratch="target/fuzz-corpus/$t"
  log="target/fuzz-logs/$t.log"
  mkdir -p "$scratch"
  if cargo fuzz run "${BUILD[@]}" "$t" "$scratch" "$seeds" -- \
      -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    summary=$(grep -E '^#[0-9]+.*(DONE|cov:)' "$log" | tail -n 1 | sed -E 's/^#[0-9]+[[:space:]]+[A-Z]+[[:space:]]+//')
    printf '%-20s ok: %s runs in %ss, %s\n' "$t" "${runs:-?}" "$per" "$summary"
  else
    # The panic or the hang, then where libFuzzer put the input (the whole log has the backtrace).
    grep -E -A4 'panicked at|ERROR: libFuzzer|ALARM: working' "$log" | head -n 30 >&2 || tail -n 30 "$log" >&2
    grep -E 'Test unit written|^Base64' "$log" >&2 || true
    die "target \`$t\` failed (log: $log); the failing input is in fuzz/artifacts/$t/: fix the bug, and keep the input in $seeds/"
  fi
done
