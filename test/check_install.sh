#!/bin/sh
# What `meson install` puts in place, installed into a scratch directory: no installed file names
# this machine's source or build tree (programs find their data and packages relative to
# themselves; debug information names sources relative to the tree), one header (chorus.h: the
# query interface of chorus's own programs is not installed), and the installed chorusrun finds
# its launcher package beside it.
# Usage: check_install.sh BUILD_DIR SOURCE_ROOT
set -u
build=$1 source=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }

if ! meson install -C "$build" --destdir "$work/root" --no-rebuild >"$work/log" 2>&1; then
    cat "$work/log"
    echo "install: 0 passed, 1 failed"
    exit 1
fi
real_source=$(cd "$source" && pwd -P)
real_build=$(cd "$build" && pwd -P)
named=$(grep -rlF -e "$real_source" -e "$real_build" "$work/root" 2>/dev/null)
if [ -z "$named" ]; then ok "no installed file names $real_source or $real_build"
else bad "installed files naming this machine's tree: $named"; fi
headers=$(find "$work/root" -name '*.h' | sed 's|.*/||' | sort | tr '\n' ' ')
if [ "$headers" = "chorus.h " ]; then ok "one installed header: chorus.h"
else bad "installed headers: $headers"; fi
chorusrun=$(find "$work/root" -path '*/bin/chorusrun')
out=$(cd "$work" && OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
      "$chorusrun" --dry-run -np 2 true 2>&1)
if [ $? -eq 0 ] && printf '%s' "$out" | grep -q "'-np' '2'"; then
    ok "the installed chorusrun finds its launcher package"
else bad "installed chorusrun: $out"; fi
echo "install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
