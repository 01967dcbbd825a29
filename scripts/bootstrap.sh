#!/usr/bin/env bash
# Brings a fresh Debian machine to the point where zmesh builds, tests and demos:
# Debian packages (when root and missing), Node at the pinned LTS in .tools/node, pnpm at the
# pinned version, dependencies from the lockfile. Idempotent: a second run only checks.
# `scripts/bootstrap.sh node` installs only Node (the Makefile's rule for .tools/node/bin/node).
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc, libc6-dev: the seqpacket N-API addon (packages/shared/native). util-linux: nsenter, unshare, setpriv (harness pods). python3: optional capture side-door test.
# fonts-dejavu-core: text in the benchmark charts. openssl: the tests' independent check of
# the certificates zmesh encodes. etcd-server: the control plane's HA store (--store etcd://), started by the tests themselves.
APT_PACKAGES=(gcc libc6-dev clang llvm libbpf-dev bpftool iproute2 iptables util-linux python3 curl fonts-dejavu-core openssl
  iperf3 socat stunnel4 haproxy redis-server redis-tools wrk nghttp2-client prometheus etcd-server)
PNPM_VERSION=12.4.2
# Node 24 LTS, from npm's node-linux-<arch> package (only npm and Debian are reachable here;
# Debian's nodejs is 20, past end of life). The integrity is npm's, checked after download.
NODE_VERSION=24.22.3
declare -A NODE_INTEGRITY=(
  [x64]=sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA==
  [arm64]=sha512-IZx0J52/1NDwAsY2iyWR9nlPIYuYviTWetjj8+ElvYQh2+XRhLfCfkbFEF/2O5vGI2hcUbyPNHV+nz342FbJXw==
)
NODE_DIR=.tools/node

install_node() {
  if [ "$("$NODE_DIR/bin/node" --version 2>/dev/null || true)" = "v$NODE_VERSION" ]; then return; fi
  local arch
  case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) echo "bootstrap: no Node $NODE_VERSION package for $(uname -m)" >&2; exit 1 ;;
  esac
  if ! command -v npm >/dev/null; then
    echo "bootstrap: npm is needed once to fetch Node $NODE_VERSION (apt-get install npm)" >&2
    exit 1
  fi
  echo "bootstrap: installing Node $NODE_VERSION (npm package node-linux-$arch) into $NODE_DIR"
  local tmp integrity
  tmp=$(mktemp -d)
  integrity=$(cd "$tmp" && npm pack --json "node-linux-$arch@$NODE_VERSION" 2>/dev/null |
    sed -n 's/.*"integrity": *"\([^"]*\)".*/\1/p')
  if [ "$integrity" != "${NODE_INTEGRITY[$arch]}" ]; then
    rm -rf "$tmp"
    echo "bootstrap: node-linux-$arch@$NODE_VERSION: integrity ${integrity:-unknown}, expected ${NODE_INTEGRITY[$arch]}" >&2
    exit 1
  fi
  rm -rf "$NODE_DIR"
  mkdir -p "$NODE_DIR"
  tar xzf "$tmp"/node-linux-"$arch"-*.tgz -C "$NODE_DIR" --strip-components=1
  rm -rf "$tmp"
}

if [ "${1:-}" = node ]; then
  install_node
  exit 0
fi

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "bootstrap: installing Debian packages: ${missing[*]}"
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "bootstrap: not root: skipping Debian packages ${missing[*]} (capture, BPF and C peers need them)"
  fi
fi

install_node
# Everything below (pnpm's scripts, tsc, ava) runs on this Node; the Makefile does the same.
export PATH="$PWD/$NODE_DIR/bin:$PATH"

if [ "$(pnpm --version 2>/dev/null || true)" != "$PNPM_VERSION" ]; then
  echo "bootstrap: installing pnpm $PNPM_VERSION"
  npm install -g "pnpm@$PNPM_VERSION" >/dev/null 2>&1 || npm install --prefix "$HOME/.local" -g "pnpm@$PNPM_VERSION" >/dev/null
fi

# --frozen-lockfile: CI must build exactly what was committed.
pnpm install --frozen-lockfile --reporter=silent
