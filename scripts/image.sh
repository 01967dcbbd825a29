#!/usr/bin/env bash
# `make image`: builds the zmesh OCI image (Containerfile) with podman, with no image
# registry: the root filesystem is laid out here from the local build (`make build` first).
#   scripts/image.sh [build]        build and tag $ZMESH_IMAGE (default localhost/zmesh:<version>)
#   scripts/image.sh run [OPTS... --] ARGS...
#                                   podman run --rm --network none [OPTS] the image with ARGS
#   scripts/image.sh podman ARGS... podman with the options this host needs (below)
# podman, runc and their helpers are Debian packages, installed here when root and missing.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(node -p 'require("./package.json").version')
IMAGE=${ZMESH_IMAGE:-localhost/zmesh:$VERSION}

# Options for a host that is itself a container or a VM without systemd: vfs storage (no
# overlay mounts or fuse needed), cgroupfs instead of systemd's cgroup manager, events in a
# file instead of the journal, and runc, which runs with the cgroup v1 hierarchy found here.
# Its own storage and run directories (ZMESH_PODMAN_ROOT), so that other podman users on the
# machine, with other drivers, neither meet nor disturb it.
STORE=${ZMESH_PODMAN_ROOT:-/var/lib/zmesh-podman}
PODMAN=(podman --root="$STORE/storage" --runroot="$STORE/run" --storage-driver=vfs
  --cgroup-manager=cgroupfs --events-backend=file --runtime=runc --tmpdir="$STORE/tmp")

# podman asks runc for higher nofile/nproc limits than a host without CAP_SYS_RESOURCE (a
# container itself) may set: "error setting rlimit type 7 (6): operation not permitted". The
# containers get our nofile limit, and an nproc limit runc could set here (ours, 96369, and
# 65536 were refused; 32768 was accepted).
nproc=$(ulimit -Hu)
[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
LIMITS=(--ulimit "nofile=$(ulimit -Hn):$(ulimit -Hn)" --ulimit "nproc=$nproc:$nproc")

need_podman() {
  if command -v podman >/dev/null && command -v runc >/dev/null; then return 0; fi
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "image: podman and runc are missing and this is not root on Debian: install them (apt-get install podman runc)" >&2
    exit 1
  fi
  echo "image: installing Debian packages podman runc"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends podman runc uidmap >/dev/null
}

# Copies a binary and every shared library it links (ldd) into the root, at the same paths.
copy_with_libs() {
  local root=$1 bin=$2
  install -D -m 0755 "$bin" "$root$bin"
  ldd "$bin" | awk '/=> \//{print $3} /^[ \t]*\/lib/{print $1}' | while read -r lib; do
    [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
  done
}

build() {
  for f in packages/ztunnel/dist/cli/main.js packages/harness/dist/cli/main.js bpf/build/capture.bpf.o; do
    [ -f "$f" ] || { echo "image: $f missing: run 'make build' first" >&2; exit 1; }
  done
  need_podman
  local root z
  stage=$(mktemp -d /tmp/zmesh-image.XXXXXX)
  trap 'rm -rf "$stage"' EXIT
  root=$stage/rootfs
  z=$root/opt/zmesh
  node scripts/bundle.mjs --image "$z"
  install -D -m 0755 bin/zmesh "$z/bin/zmesh"
  cp package.json pnpm-workspace.yaml "$z/"
  install -D -m 0644 bpf/build/capture.bpf.o "$z/bpf/build/capture.bpf.o"
  mkdir -p "$z/packages/shared/src/xds"
  cp -r packages/shared/src/xds/proto "$z/packages/shared/src/xds/"
  # koffi and the prebuilt addon it picks (its pnpm siblings), symlinks resolved.
  mkdir -p "$z/node_modules"
  cp -rL node_modules/.pnpm/koffi@*/node_modules/. "$z/node_modules/"
  # Native addons built in the packages, where present.
  for d in packages/*/native/build; do
    [ -d "$d" ] && mkdir -p "$z/$d" && cp -r "$d/." "$z/$d/"
  done
  # The Node that runs zmesh here, and bin/zmesh's tools; bpftool and mount for capture.
  local node_bin
  node_bin=$(node -p process.execPath)
  copy_with_libs "$root" "$node_bin"
  mkdir -p "$root/usr/bin" "$root/bin" "$root/sbin"
  [ "$node_bin" = /usr/bin/node ] || ln -s "$node_bin" "$root/usr/bin/node"
  for tool in bash env dirname readlink find bpftool mount; do
    copy_with_libs "$root" "$(readlink -f "$(command -v "$tool")")"
  done
  for tool in bash env dirname readlink find; do
    [ -e "$root/usr/bin/$tool" ] || ln -s "$(readlink -f "$(command -v "$tool")")" "$root/usr/bin/$tool"
  done
  [ -e "$root/usr/sbin/bpftool" ] || ln -s "$(readlink -f "$(command -v bpftool)")" "$root/usr/sbin/bpftool"
  install -d -m 1777 "$root/tmp"
  mkdir -p "$root/etc" "$root/proc" "$root/sys" "$root/dev" "$root/var/run" "$root/var/lib"
  printf 'root:x:0:0:root:/root:/bin/bash\nzmesh:x:65532:65532:zmesh:/nonexistent:/bin/false\n' >"$root/etc/passwd"
  printf 'root:x:0:\nzmesh:x:65532:\n' >"$root/etc/group"
  # One mtime for every file: reproducible layers, and bin/zmesh's "bundle older than dist/" check passes.
  local epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
  find "$root" -exec touch -h -d "@$epoch" {} +
  "${PODMAN[@]}" build --quiet --pull=never --network=none --timestamp "$epoch" \
    -f Containerfile -t "$IMAGE" "$stage" >/dev/null
  # The image this tag named before, now untagged, would keep its 100+ MB in the vfs store.
  "${PODMAN[@]}" image prune --force >/dev/null
  echo "image: built $IMAGE ($(du -sh "$root" | cut -f1) unpacked)"
}

case "${1:-build}" in
  build) build ;;
  run)
    shift
    need_podman
    opts=()
    if [[ " $* " == *" -- "* ]]; then
      while [ "$1" != -- ]; do
        opts+=("$1")
        shift
      done
      shift
    fi
    exec "${PODMAN[@]}" run --rm --network=none --pull=never "${LIMITS[@]}" "${opts[@]}" "$IMAGE" "$@"
    ;;
  podman)
    shift
    exec "${PODMAN[@]}" "$@"
    ;;
  *)
    echo "usage: scripts/image.sh [build | run ARGS... | podman ARGS...]" >&2
    exit 2
    ;;
esac
