#!/usr/bin/env bash
# The whole test suite, with all set-up, on a fresh machine (this is what .ci/run runs):
#   1. installs what it needs (rustfmt/clippy components; Debian's prometheus, whose server and promtool the
#      metrics tests run, and chromium, with apt-get when missing; the Python packages of tests/python into a virtual
#      environment of its own, target/venv, never into the system's Python),
#   2. checks that PostgreSQL answers on 127.0.0.1:5432 (the fleet-store tests use it; starts it if it can),
#   3. cargo fmt --check, cargo clippy -D warnings,
#   4. every Rust test (unit, integration against the real binaries, both store backends),
#   5. every fuzz target of fuzz/ for about a minute in all (scripts/fuzz.sh: installs cargo-fuzz under
#      target/tools, builds the targets once into target/fuzz, fails on any crash or hang),
#   6. the official `openai` and `anthropic` Python SDKs, and the real Claude Code, Codex and Gemini CLIs (from npm, into
#      target/agents), against the real gateway.
#   7. the systemd unit of examples/ (systemd-analyze verify and its exposure) and the container image
#      (scripts/image.sh --check: Debian's buildah, installed when missing; svc serve from the image's root
#      filesystem by chroot),
#   8. the dashboard end to end (tests/ui): Debian's chromium (installed with apt-get when /usr/bin/chromium is
#      missing), playwright-core from npm (`npm ci`, pinned by tests/ui/package-lock.json), screenshots of every
#      page in target/ui-artifacts/.
# Anything missing is an error, never a silent skip.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '\n==> %s\n' "$*"; }
die() { printf 'test.sh: %s\n' "$*" >&2; exit 1; }

command -v cargo >/dev/null || die "cargo not found: install Rust with rustup"
command -v python3 >/dev/null || die "python3 not found: install Python 3.9 or newer"
# Nothing here reads stdin, which a CI machine may not have (or have closed): give every step an empty one.
exec </dev/null
# A one-shot build gains nothing from incremental compilation, which only costs time and gigabytes of disk.
export CARGO_INCREMENTAL=0

say "toolchain components"
if command -v rustup >/dev/null; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
cargo fmt --version >/dev/null || die "rustfmt missing (rustup component add rustfmt)"
cargo clippy --version >/dev/null || die "clippy missing (rustup component add clippy)"

say "Debian packages (prometheus and promtool for the metrics tests, chromium for the dashboard tests, nginx for the reverse-proxy example's test)"
# Installs a Debian package when the file it provides is missing (with sudo when not root); fails loudly.
need_deb() {
  local package="$1" file="$2"
  [ -x "$file" ] && return 0
  command -v apt-get >/dev/null || die "$file missing and no apt-get: install the Debian package $package"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo -n"
  $sudo apt-get update -qq || die "apt-get update failed (needed for $package)"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null \
    || die "apt-get could not install $package"
  [ -x "$file" ] || die "$package is installed but $file is missing"
}
need_deb prometheus /usr/bin/promtool
need_deb chromium /usr/bin/chromium
need_deb nginx-light /usr/sbin/nginx
# tests/python/test_tls.py makes its CA and certificate with the openssl command.
need_deb openssl /usr/bin/openssl
# scripts/image.sh asks the image's gateway with curl.
need_deb curl /usr/bin/curl

say "python packages (tests/python/requirements.txt, in target/venv)"
VENV="$PWD/target/venv"
# A virtual environment left half-made (no pip) by an earlier failed run is made again.
if ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
  rm -rf "$VENV"
  python3 -m venv "$VENV" \
    || die "python3 cannot create a virtual environment (on Debian or Ubuntu: apt-get install python3-venv)"
fi
PYTHON="$VENV/bin/python"
"$PYTHON" -m pip install --quiet --disable-pip-version-check --no-input -r tests/python/requirements.txt \
  || die "pip could not install tests/python/requirements.txt into $VENV"

say "agent CLIs from npm (Claude Code, Codex, Gemini CLI), in target/agents"
AGENT_CLIS=(@anthropic-ai/claude-code@2.1.330 @openai/codex@0.169.0 @google/gemini-cli@0.61.0)
command -v npm >/dev/null || die "npm not found: install Node.js 20.19 or newer (the agent CLI and dashboard tests need it)"
if [ ! -x target/agents/node_modules/.bin/claude ] || [ ! -x target/agents/node_modules/.bin/codex ] \
  || [ ! -x target/agents/node_modules/.bin/gemini ]; then
  mkdir -p target/agents
  timeout 600 npm install --prefix target/agents --no-audit --no-fund --loglevel=error "${AGENT_CLIS[@]}" \
    || die "npm could not install ${AGENT_CLIS[*]} into target/agents"
fi

say "PostgreSQL on 127.0.0.1:5432"
pg_up() { python3 -c 'import socket; socket.create_connection(("127.0.0.1", 5432), 2).close()' 2>/dev/null; }
if ! pg_up; then
  if command -v pg_ctlcluster >/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
    sleep 2
  fi
fi
pg_up || die "PostgreSQL is not reachable on 127.0.0.1:5432 (the fleet-store tests need it; set SVC_TEST_POSTGRES_URL to use another)"

say "format"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

say "lint"
cargo clippy --workspace --all-targets --locked -- -D warnings

say "build"
cargo build --workspace --all-targets --locked

say "rust tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi

say "systemd unit (examples/systemd/svc.service: systemd-analyze verify, exposure at most 2.0)"
need_deb systemd /usr/bin/systemd-analyze
UNIT_DIR=$(mktemp -d)
# The unit names the installed binary; verify checks that its command exists, so it is pointed at this build.
sed "s|/usr/local/bin/svc|$PWD/target/debug/svc|" examples/systemd/svc.service >"$UNIT_DIR/svc.service"
# Unknown or misspelt directives are only warnings to systemd-analyze: any output fails the check.
verified=$(systemd-analyze verify "$UNIT_DIR/svc.service" 2>&1) || die "systemd-analyze verify: $verified"
[ -z "$verified" ] || die "systemd-analyze verify: $verified"
systemd-analyze security --offline=true --threshold=20 "$UNIT_DIR/svc.service" >/dev/null \
  || die "the unit's exposure rose above 2.0 (systemd-analyze security --offline=true examples/systemd/svc.service)"
rm -rf "$UNIT_DIR"

say "container image (scripts/image.sh --check: buildah, FROM scratch; svc serve from its root filesystem)"
bash scripts/image.sh --check --binary target/debug/svc --tag svc:ci

say "fuzz targets (scripts/fuzz.sh)"
bash scripts/fuzz.sh

say "python tests against the gateway: openai and anthropic SDKs, Claude Code, Codex and Gemini CLI, botocore SigV4"
SVC_BIN="$PWD/target/debug/svc" "$PYTHON" -m pytest -q tests/python

say "dashboard end to end (tests/ui: headless Chromium driven by playwright-core)"
timeout 600 npm ci --prefix tests/ui --no-audit --no-fund --loglevel=error \
  || die "npm ci could not install tests/ui (playwright-core)"
SVC_BIN="$PWD/target/debug/svc" timeout 600 node --test --test-concurrency=1 tests/ui/
