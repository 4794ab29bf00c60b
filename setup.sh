#!/usr/bin/env bash
# Sets ForgeVM up on a Debian or Ubuntu machine: system packages, npm dependencies, the
# TypeScript build, the static guest agent, then `forgevm setup` (guest kernel, initramfs,
# default image). Idempotent: a second run checks each step and does nothing already done.
#   ./setup.sh [--quiet] [--test]   FORGEVM_DATA_DIR=… picks the data directory
#   --test also installs the Debian packages only the test suite uses (a registry, skopeo,
#   busybox, chromium, PostgreSQL); the test runner installs the agent frameworks' providers.
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
#    The lists are in deploy/debian-packages.txt (`forgevm setup` reads the same file).
packages() { sed -n "s/^$1: //p" deploy/debian-packages.txt; }
PKGS="$(packages run) $(packages build)"
[ "$TEST" = 1 ] && PKGS="$PKGS $(packages test)"
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
# The packages' install scripts (better-sqlite3's compile of SQLite: a minute on one core) run
# beside the builds of step 3 and the data directory's set-up of step 4, which need only the
# packages' files; the step after 4 waits for them. The marker is written once they succeed, so
# an interrupted install is done again.
DEPS=node_modules/.forgevm-installed
SCRIPTS_PID=""
if [ ! -f $DEPS ] || [ package-lock.json -nt $DEPS ]; then
  echo "setup: installing npm dependencies"
  rm -f $DEPS
  npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
  # SQLite at -O2, as its own makefile and Debian's package build it: the -O3 of better-sqlite3's
  # build took a quarter longer (60 s against 45 on one core, the end of set-up waiting on it) for
  # no difference in its queries (bench/sqlite-build.ts). The last -O given to the compiler counts.
  (CFLAGS="${CFLAGS:-} -O2" npm rebuild --loglevel=error > node_modules/.forgevm-scripts.log 2>&1 && touch $DEPS) &
  SCRIPTS_PID=$!
  # A step below that fails still waits for them, leaving no install running after setup.
  trap '[ -z "$SCRIPTS_PID" ] || wait $SCRIPTS_PID 2>/dev/null' EXIT
else
  say "npm dependencies: already installed"
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
# (test/frameworks is another package, which tsc does not compile: its install, which changes the
# folder's time, must not rebuild.)
if [ ! -f dist/.built ] || [ -n "$(find src test bench scripts tsconfig.json package.json -path test/frameworks -prune -o -newer dist/.built -print -quit 2>/dev/null)" ]; then
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

# 4. Guest kernel, initramfs, the built-in images and the ssh server for guests, under the data
#    directory (`forgevm setup` asks about the optional ones; -y takes the defaults). It opens no
#    store, so it runs while the npm packages' install scripts (SQLite's compile) finish.
if [ "$QUIET" = 1 ]; then node dist/src/cli/main.js setup -y --no-test-sandbox --quiet; else node dist/src/cli/main.js setup -y --no-test-sandbox; fi

if [ -n "$SCRIPTS_PID" ]; then
  status=0
  wait $SCRIPTS_PID || status=$?
  SCRIPTS_PID=""
  [ $status = 0 ] || { cat node_modules/.forgevm-scripts.log >&2; echo "setup: the npm packages' install scripts failed (above)" >&2; exit 1; }
fi

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
