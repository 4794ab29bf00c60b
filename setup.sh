#!/usr/bin/env bash
# Sets ForgeVM up on a Debian or Ubuntu machine: system packages, npm dependencies, the
# TypeScript build, the static guest agent, then `forgevm setup` (guest kernel, initramfs,
# default image). Idempotent: a second run checks each step and does nothing already done.
#   ./setup.sh [--quiet] [--test]   FORGEVM_DATA_DIR=… picks the data directory
#   --test also installs what only the test suite uses (a registry, skopeo, busybox, chromium).
set -euo pipefail
cd "$(dirname "$0")"
QUIET=0
TEST=0
for a in "$@"; do
  case "$a" in
    --quiet) QUIET=1 ;;
    --test) TEST=1 ;;
    *) echo "setup: unknown option $a (use --quiet, --test)" >&2; exit 2 ;;
  esac
done
say() { [ "$QUIET" = 1 ] || echo "setup: $*"; }

SUDO=""
if [ "$(id -u)" != 0 ]; then
  command -v sudo >/dev/null || { echo "setup: run as root or install sudo" >&2; exit 1; }
  SUDO=sudo
fi

# 1. System packages (QEMU, image and agent build tools, bubblewrap for the local provider).
PKGS="qemu-system-x86 qemu-utils debootstrap debian-archive-keyring musl-tools gcc make cpio e2fsprogs kmod lz4 zstd xz-utils attr ca-certificates iptables util-linux bubblewrap"
[ "$TEST" = 1 ] && PKGS="$PKGS docker-registry skopeo busybox-static python3 python3-venv python3-pip-whl iproute2 chromium postgresql"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  echo "setup: installing Debian packages:$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
  # The registry package starts a system service on :5000; the tests run their own instance.
  case "$missing" in *docker-registry*) $SUDO systemctl disable --now docker-registry >/dev/null 2>&1 || true ;; esac
  # PostgreSQL's package starts a cluster of its own; the cluster tests start theirs in a temporary directory.
  case "$missing" in *postgresql*) $SUDO systemctl disable --now postgresql >/dev/null 2>&1 || true ;; esac
else
  say "Debian packages: already installed"
fi

# 2. Node.js 20+ and npm dependencies.
node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)' || { echo "setup: Node.js 20 or newer is required" >&2; exit 1; }
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "setup: installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error
else
  say "npm dependencies: already installed"
fi

# The agent frameworks' sandbox providers test/vm/frameworks.test.ts drives, in a package of their own
# (their peer ranges disagree with each other and with ours).
if [ "$TEST" = 1 ]; then
  FW=test/frameworks
  if [ ! -f $FW/node_modules/.package-lock.json ] || [ $FW/package-lock.json -nt $FW/node_modules/.package-lock.json ]; then
    echo "setup: installing the agent frameworks' providers the tests drive"
    (cd $FW && npm ci --no-audit --no-fund --loglevel=error)
  else
    say "agent frameworks' providers: already installed"
  fi
fi

# 3. Build: the TypeScript SDK, then the server (each when a source is newer than its last
#    build; the server's tests use the SDK's build), and the agent (make).
SDK=sdk/typescript
if [ ! -f $SDK/dist/.built ] || [ -n "$(find $SDK/src $SDK/tsconfig.json $SDK/build.mjs $SDK/package.json -newer $SDK/dist/.built -print -quit 2>/dev/null)" ]; then
  echo "setup: building the TypeScript SDK"
  node $SDK/build.mjs
  touch $SDK/dist/.built
  rm -f dist/.built
else
  say "TypeScript SDK: up to date"
fi
# (test/frameworks/node_modules is another package's install, not a source: its install must not rebuild.)
if [ ! -f dist/.built ] || [ -n "$(find src test bench scripts tsconfig.json package.json -path test/frameworks/node_modules -prune -o -newer dist/.built -print -quit 2>/dev/null)" ]; then
  echo "setup: building TypeScript"
  npx tsc -p tsconfig.json
  touch dist/.built
else
  say "TypeScript: up to date"
fi
# The web console (React, bundled by Vite into dist/web; `forgevm serve` serves it at /).
if [ ! -f dist/web/index.html ] || [ -n "$(find web package-lock.json -newer dist/web/index.html -print -quit 2>/dev/null)" ]; then
  echo "setup: building the web console"
  npx tsc -p web/tsconfig.json && npx vite build --config web/vite.config.ts
else
  say "web console: up to date"
fi
if make -s -q -C agent 2>/dev/null; then
  say "agent: up to date"
else
  echo "setup: building the guest agent"
  make -s -C agent
fi
if make -s -q -C jail 2>/dev/null; then
  say "VMM jail helper: up to date"
else
  echo "setup: building the VMM jail helper"
  make -s -C jail
fi

# 4. Guest kernel, initramfs and the default image, under the data directory.
if [ "$QUIET" = 1 ]; then node dist/src/cli/main.js setup --quiet; else node dist/src/cli/main.js setup; fi

# 5. Put `forgevm` on the PATH.
target="$(pwd)/bin/forgevm"
if [ "$(readlink /usr/local/bin/forgevm 2>/dev/null || true)" != "$target" ]; then
  if $SUDO ln -sf "$target" /usr/local/bin/forgevm 2>/dev/null; then
    echo "setup: linked /usr/local/bin/forgevm"
  else
    echo "setup: could not link /usr/local/bin/forgevm; use $target"
  fi
else
  say "forgevm command: on the PATH"
fi
say "done"
