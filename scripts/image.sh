#!/usr/bin/env bash
# A container image of svc built from this repository with no base image to download: `FROM scratch` holding the
# `svc` binary (without its debug information), the shared libraries it links (as `ldd` lists them, the dynamic loader included) and nothing else.
# Built with Debian's buildah, storage driver vfs (works as root without overlay support).
#
#   bash scripts/image.sh                       # build target/release/svc, then the image svc:latest
#   bash scripts/image.sh --binary PATH         # the image of that binary instead (CI: the debug build)
#   bash scripts/image.sh --check [--binary P]  # build it, then run `svc serve` from the image's own root
#                                               # filesystem (buildah mount + chroot) and wait for /health
#   bash scripts/image.sh --tag NAME            # the image's name (default svc:latest)
#
# The image: entrypoint `/usr/local/bin/svc`, command `serve --host 0.0.0.0`, port 4000, user 65534 (nobody),
# `XDG_DATA_HOME=/var/lib` (the demo store goes to /var/lib/svc/svc.db), `SVC_CONFIG=/etc/svc/svc.yaml` when
# that file exists (mount your config there, and a volume on /var/lib/svc for the SQLite store and the journal).
# Push it to a registry with `buildah push`, or save it with `buildah push svc:latest oci-archive:svc.tar`.
#
# Why chroot for the check: these machines cannot start containers (crun refuses their cgroup setup), so the
# check proves what matters (the image's root filesystem alone runs the gateway) without a container runtime.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { printf 'image.sh: %s\n' "$*" >&2; exit 1; }

BINARY=""
CHECK=0
TAG="svc:latest"
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BINARY="${2:?--binary needs a path}"; shift 2 ;;
    --check) CHECK=1; shift ;;
    --tag) TAG="${2:?--tag needs a name}"; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument $1 (see --help)" ;;
  esac
done

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo -n"
if ! command -v buildah >/dev/null; then
  command -v apt-get >/dev/null || die "buildah missing and no apt-get: install Debian's buildah"
  $SUDO apt-get update -qq || die "apt-get update failed (needed for buildah)"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah >/dev/null \
    || die "apt-get could not install buildah"
fi
BUILDAH="$SUDO buildah --storage-driver vfs"

if [ -z "$BINARY" ]; then
  cargo build --release --locked -p svc-cli --bin svc
  BINARY=target/release/svc
fi
[ -x "$BINARY" ] || die "$BINARY is not an executable (build it first)"

# The root filesystem: the binary, what it links, a writable /tmp, the state folder and a passwd line for nobody.
ROOTFS=$(mktemp -d)
CONTAINERS=()
cleanup() {
  for c in "${CONTAINERS[@]}"; do $BUILDAH rm "$c" >/dev/null 2>&1 || true; done
  rm -rf "$ROOTFS"
}
trap cleanup EXIT
install -D -m 0755 "$BINARY" "$ROOTFS/usr/local/bin/svc"
# Debug information stays out of the image (the release profile keeps some for profiling).
if command -v strip >/dev/null; then strip --strip-debug "$ROOTFS/usr/local/bin/svc"; fi
libs=$(ldd "$BINARY" | awk '/=> \// { print $3 } /^\s*\/[^ ]+ \(/ { print $1 }')
[ -n "$libs" ] || die "ldd lists no library of $BINARY"
for lib in $libs; do
  real=$(readlink -f "$lib")
  install -D -m 0755 "$real" "$ROOTFS$lib"
done
mkdir -p "$ROOTFS/tmp" "$ROOTFS/var/lib/svc" "$ROOTFS/etc/svc"
chmod 1777 "$ROOTFS/tmp"
printf 'root:x:0:0:root:/:/nonexistent\nnobody:x:65534:65534:nobody:/var/lib/svc:/nonexistent\n' >"$ROOTFS/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$ROOTFS/etc/group"

ctr=$($BUILDAH from scratch)
CONTAINERS+=("$ctr")
$BUILDAH copy "$ctr" "$ROOTFS" / >/dev/null
# buildah copies as root: the state folder is made the image user's in place.
mnt=$($BUILDAH mount "$ctr")
$SUDO chown 65534:65534 "$mnt/var/lib/svc"
$BUILDAH umount "$ctr" >/dev/null
$BUILDAH config \
  --entrypoint '["/usr/local/bin/svc"]' --cmd '["serve","--host","0.0.0.0"]' \
  --port 4000 --user 65534:65534 --workingdir /var/lib/svc \
  --env XDG_DATA_HOME=/var/lib --env HOME=/var/lib/svc \
  --volume /var/lib/svc \
  --label org.opencontainers.image.title=svc \
  --label org.opencontainers.image.revision="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "$ctr"
$BUILDAH commit --quiet "$ctr" "$TAG" >/dev/null
# Earlier builds of the tag, now untagged, are removed.
$BUILDAH rmi --prune >/dev/null 2>&1 || true
echo "image.sh: built $TAG ($(du -sh "$ROOTFS" | cut -f1) in its root filesystem)"

[ "$CHECK" -eq 1 ] || exit 0

# The check: `svc serve` from the image's own root filesystem, as the image's user, on a free port.
check=$($BUILDAH from "$TAG")
CONTAINERS+=("$check")
root=$($BUILDAH mount "$check")
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
CHROOT=$(command -v chroot) || die "chroot missing (Debian's coreutils)"
$SUDO env -i XDG_DATA_HOME=/var/lib HOME=/var/lib/svc SVC_MASTER_KEY=sk-svc-image-check \
  "$CHROOT" --userspec=65534:65534 "$root" /usr/local/bin/svc serve --host 127.0.0.1 --port "$port" >"$log" 2>&1 &
pid=$!
ok=0
for _ in $(seq 1 100); do
  if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then ok=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
if [ "$ok" -eq 1 ]; then
  answer=$(curl -fsS "http://127.0.0.1:$port/v1/chat/completions" -H "Authorization: Bearer sk-svc-image-check" \
    -H 'Content-Type: application/json' -d '{"model":"openai/gpt-4.1-mini","messages":[{"role":"user","content":"hi"}]}') \
    || ok=0
fi
$SUDO kill -TERM "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
$BUILDAH umount "$check" >/dev/null
if [ "$ok" -ne 1 ]; then
  cat "$log" >&2
  die "svc serve from the image's root filesystem did not answer /health and a chat completion"
fi
case "$answer" in *'"choices"'*) ;; *) die "the image's gateway answered no completion: $answer" ;; esac
echo "image.sh: svc serve from the image's own root filesystem answered /health and a chat completion on port $port"
