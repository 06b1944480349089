#!/usr/bin/env bash
# Install a real Mermaid renderer into .mermaid/ (git-ignored), so that the test suite renders
# the kernel-chain charts of the Markdown report instead of trusting that they parse.
#
#   bash tools/setup-mermaid.sh        # idempotent; run again to check or repair
#
# What it needs and does, each step skipped when already satisfied:
#   1. Node.js >= 18.19 and npm         (else: apt-get install nodejs npm)
#   2. a Chromium to drive headless     (else: apt-get install chromium, Debian's package)
#   3. @mermaid-js/mermaid-cli + puppeteer into .mermaid/node_modules, with puppeteer told
#      not to download a browser of its own (PUPPETEER_SKIP_DOWNLOAD=1)
#   4. .mermaid/puppeteer-config.json (that Chromium, --no-sandbox: CI runs as root) and
#      .mermaid/mmdc, a wrapper that passes it
#   5. renders a one-node chart to prove the whole chain works
# apt-get steps need root (or sudo). MERMAID_DIR overrides the install folder.
set -euo pipefail

MMDC_VERSION=11.17.0      # last mermaid-cli line that runs on Node 18/20 (12.x needs Node 22)
PUPPETEER_VERSION=24.43.1 # mermaid-cli 11.17 accepts puppeteer 23-25; 25 needs Node 22

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="${MERMAID_DIR:-$ROOT/.mermaid}"
START=$SECONDS
APT_UPDATED=""

say() { echo "setup-mermaid: $*"; }
die() { echo "setup-mermaid: error: $*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root (or sudo) to run: $*"
    fi
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "no apt-get here: install $* yourself, then re-run"
    if [ -z "$APT_UPDATED" ]; then
        say "apt-get update"
        as_root apt-get update -q >/dev/null
        APT_UPDATED=1
    fi
    say "apt-get install $*"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "$@" >/dev/null
}

node_ok() {
    command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || return 1
    node -e 'const [a, b] = process.versions.node.split(".").map(Number);
             process.exit(a > 18 || (a === 18 && b >= 19) ? 0 : 1)'
}

find_chromium() {
    local c
    for c in "${PUPPETEER_EXECUTABLE_PATH:-}" chromium chromium-browser google-chrome-stable \
             google-chrome; do
        [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
    done
    return 1
}

# 1. Node.js and npm
if node_ok; then
    say "node $(node --version) and npm $(npm --version 2>/dev/null) found"
else
    apt_install nodejs npm
    node_ok || die "Node.js >= 18.19 with npm is needed; found $(node --version 2>&1 || true)"
    say "installed node $(node --version)"
fi

# 2. Chromium
if CHROMIUM="$(find_chromium)"; then
    say "chromium found: $CHROMIUM"
else
    apt_install chromium
    CHROMIUM="$(find_chromium)" || die "apt-get installed chromium but it is not on PATH"
    say "installed chromium: $CHROMIUM"
fi

# 3. mermaid-cli and puppeteer (no browser download: we drive the Chromium above)
mkdir -p "$DEST"
installed=""
if [ -x "$DEST/node_modules/.bin/mmdc" ]; then
    installed="$(node -p "require('$DEST/node_modules/@mermaid-js/mermaid-cli/package.json')
                 .version" 2>/dev/null || true)"
fi
if [ "$installed" = "$MMDC_VERSION" ]; then
    say "mermaid-cli $MMDC_VERSION already in $DEST"
else
    cat > "$DEST/package.json" <<EOF
{
  "name": "cl-validate-mermaid-renderer",
  "private": true,
  "description": "written by tools/setup-mermaid.sh; safe to delete",
  "dependencies": {
    "@mermaid-js/mermaid-cli": "$MMDC_VERSION",
    "puppeteer": "$PUPPETEER_VERSION"
  }
}
EOF
    say "npm install @mermaid-js/mermaid-cli@$MMDC_VERSION puppeteer@$PUPPETEER_VERSION" \
        "into $DEST"
    (cd "$DEST" && PUPPETEER_SKIP_DOWNLOAD=1 PUPPETEER_SKIP_CHROME_DOWNLOAD=1 \
        PUPPETEER_SKIP_CHROME_HEADLESS_SHELL_DOWNLOAD=1 \
        npm install --no-audit --no-fund --loglevel=error >/dev/null)
fi

# 4. How to start that Chromium (as root it refuses to run sandboxed; no background
#    networking: this machine's closed network refuses it)
cat > "$DEST/puppeteer-config.json.tmp" <<EOF
{
  "executablePath": "$CHROMIUM",
  "args": ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-quic",
           "--disable-background-networking", "--disable-component-update", "--disable-sync"]
}
EOF
mv "$DEST/puppeteer-config.json.tmp" "$DEST/puppeteer-config.json"
cat > "$DEST/mmdc.tmp" <<'EOF'
#!/bin/sh
# mermaid-cli with the Chromium that tools/setup-mermaid.sh found (written by that script).
here="$(cd "$(dirname "$0")" && pwd)"
exec "$here/node_modules/.bin/mmdc" -p "$here/puppeteer-config.json" "$@"
EOF
chmod +x "$DEST/mmdc.tmp"
mv "$DEST/mmdc.tmp" "$DEST/mmdc"
say "wrote $DEST/puppeteer-config.json and $DEST/mmdc"

# 5. Prove it renders
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
printf 'flowchart LR\n  a["setup #34;ok#34;"] --> b(["done"])\n' > "$work/smoke.mmd"
if ! "$DEST/mmdc" -q -i "$work/smoke.mmd" -o "$work/smoke.svg" >"$work/log" 2>&1 \
        || ! grep -q 'setup' "$work/smoke.svg"; then
    cat "$work/log" >&2
    die "mermaid-cli is installed but could not render a chart (log above)"
fi
say "ok: mermaid-cli $MMDC_VERSION renders with $("$CHROMIUM" --version 2>/dev/null | head -1)" \
    "($((SECONDS - START)) s)"
