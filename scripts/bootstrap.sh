#!/usr/bin/env bash
# Brings a fresh Debian machine to the point where zmesh builds, tests and demos:
# Debian packages (when root and missing), pnpm at the pinned version, dependencies
# from the lockfile. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

# gcc, libc6-dev: the seqpacket N-API addon (packages/shared/native). util-linux: nsenter, unshare, setpriv (harness pods). python3: optional capture side-door test.
# fonts-dejavu-core: text in the benchmark charts. openssl: the tests' independent check of
# the certificates zmesh encodes.
APT_PACKAGES=(gcc libc6-dev clang llvm libbpf-dev bpftool iproute2 iptables util-linux python3 curl fonts-dejavu-core openssl
  iperf3 socat stunnel4 haproxy redis-server redis-tools wrk nghttp2-client prometheus)
PNPM_VERSION=12.4.2

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

if [ "$(pnpm --version 2>/dev/null || true)" != "$PNPM_VERSION" ]; then
  echo "bootstrap: installing pnpm $PNPM_VERSION"
  npm install -g "pnpm@$PNPM_VERSION" >/dev/null 2>&1 || npm install --prefix "$HOME/.local" -g "pnpm@$PNPM_VERSION" >/dev/null
fi

# --frozen-lockfile: CI must build exactly what was committed.
pnpm install --frozen-lockfile --reporter=silent
