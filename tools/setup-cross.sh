#!/usr/bin/env bash
# Install the aarch64 cross toolchain that links cl_validate's arm64 modules for upload to a
# board (Debian's gcc-aarch64-linux-gnu and the arm64 C library it links against), so the
# test suite links a real AArch64 shared library instead of skipping that test.
#
#   bash tools/setup-cross.sh          # idempotent: does nothing when the compiler links
#
# apt-get needs root (or sudo). The static checks of an arm64 target need none of this: TVM
# compiles for aarch64 with its own LLVM; only the upload to a board needs the linker.
set -euo pipefail

CC=aarch64-linux-gnu-gcc
say() { echo "setup-cross: $*"; }
die() { echo "setup-cross: error: $*" >&2; exit 1; }

links() {  # the compiler is there and links a shared library (crti.o etc. come with libc6-dev)
    local dir
    command -v "$CC" >/dev/null 2>&1 || return 1
    dir="$(mktemp -d)"
    echo 'int f(void) { return 1; }' > "$dir/f.c"
    "$CC" -shared -fPIC -o "$dir/f.so" "$dir/f.c" >/dev/null 2>&1
    local ok=$?
    rm -rf "$dir"
    return $ok
}

if links; then
    say "$CC links: nothing to do"
    exit 0
fi
command -v apt-get >/dev/null 2>&1 || die "no apt-get here: install an aarch64 cross gcc yourself"
as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo "$@"
    else die "need root (or sudo) to run: $*"
    fi
}
START=$SECONDS
say "apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
as_root apt-get update -q >/dev/null
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -q --no-install-recommends \
    gcc-aarch64-linux-gnu libc6-dev-arm64-cross >/dev/null
links || die "$CC still does not link a shared library"
say "ok: $($CC --version | head -n 1) ($((SECONDS - START)) s)"
