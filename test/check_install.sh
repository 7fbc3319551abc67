#!/bin/sh
# What `meson install` puts in place, installed into a scratch directory: no installed file names
# this machine's source or build tree (programs find their data and packages relative to
# themselves; debug information names sources relative to the tree), one header (chorus.h: the
# query interface of chorus's own programs is not installed), and the installed chorusrun finds
# its launcher package beside it; the installed binding, imported from elsewhere, finds the
# installed libchorus through the loader's search (LD_LIBRARY_PATH standing in for the install's
# library directory), reports the one version there is, and runs an allreduce at np=2.
# Usage: check_install.sh BUILD_DIR SOURCE_ROOT PYTHON "MPIRUN [OPTIONS]"
set -u
build=$1 source=$2 python=$3 mpirun=$4
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
site=$(find "$work/root" -path '*/chorus/__init__.py' | sed 's|/chorus/__init__.py$||')
library=$(find "$work/root" -name 'libchorus.so' | sed 's|/libchorus.so$||')
if [ -n "$site" ] && "$python" -c 'import torch' 2>/dev/null; then
    cat > "$work/check.py" <<'PY'
import sys
import chorus
import chorus.torch as hvd
import torch
assert chorus.__file__.startswith(sys.argv[1]), chorus.__file__
assert chorus.__version__ == sys.argv[2], (chorus.__version__, sys.argv[2])
hvd.init()
total = hvd.allreduce(torch.ones(3) * (hvd.rank() + 1), op=hvd.Sum, name="installed")
assert torch.equal(total, torch.full((3,), float(sum(range(1, hvd.size() + 1))))), total
PY
    version=$(sed -n 's/^project(.chorus., .c.,$//; s/^ *version: .\([0-9.]*\).,$/\1/p' \
              "$source/meson.build" | head -n 1)
    # shellcheck disable=SC2086
    out=$(cd "$work" && env -u CHORUS_LIBRARY OMPI_ALLOW_RUN_AS_ROOT=1 \
          OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 LD_LIBRARY_PATH="$library" PYTHONPATH="$site" \
          $mpirun -np 2 "$python" "$work/check.py" "$site" "$version" 2>&1)
    if [ $? -eq 0 ]; then ok "the installed binding (chorus $version) runs an allreduce at np=2"
    else bad "the installed binding: $out"; fi
else
    bad "no installed binding under $work/root (or no torch for $python)"
fi
echo "install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
