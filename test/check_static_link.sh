#!/bin/sh
# Installs the build into a scratch directory, links test/static_link.c against the installed
# libchorus.a with `pkg-config --static` and the installed chorus.pc (GPU libraries included in
# a GPU build), and runs it on 2 ranks. Also checks that every global symbol the archive
# defines is a CHORUS_API function of chorus.h, or of the query interface of chorus's own
# programs (chorus_query.h).
# Usage: check_static_link.sh BUILD_DIR SOURCE_DIR CC "MPIRUN [OPTIONS]"
set -eu
build=$1
source=$2
cc=$3
mpirun=$4
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
meson install -C "$build" --no-rebuild --quiet --destdir "$scratch/root" >/dev/null
archive=$(find "$scratch/root" -name libchorus.a | head -n 1)
pcdir=$(dirname "$(find "$scratch/root" -name chorus.pc | head -n 1)")
[ -n "$archive" ] && [ -n "$pcdir" ] || { echo "libchorus.a or chorus.pc not installed"; exit 1; }

declared=$(cat "$source/include/chorus.h.in" "$source/include/chorus_query.h" |
    grep -E '^CHORUS_API ' | sed -E 's/\(.*//; s/.*[ *]//' | sort -u)
globals=$(nm --defined-only --extern-only "$archive" | awk 'NF == 3 {print $3}' | sort -u)
extra=$(printf '%s\n' "$globals" | grep -vxF "$declared" || true)
if [ -n "$extra" ]; then
    echo "libchorus.a defines globals that chorus.h and chorus_query.h do not declare:"; printf '  %s\n' $extra
    exit 1
fi

# The installed chorus.pc, with its prefix moved to where it was installed here.
mkdir "$scratch/pc"
sed "s|^prefix=|prefix=$scratch/root|" "$pcdir/chorus.pc" >"$scratch/pc/chorus.pc"
flags=$(PKG_CONFIG_PATH="$scratch/pc" pkg-config --static --cflags --libs chorus)
# -lchorus would take the shared library where both are installed: name the archive instead.
# shellcheck disable=SC2086
"$cc" -std=c17 -o "$scratch/static_link" "$source/test/static_link.c" \
    $(printf '%s\n' $flags | sed "s|^-lchorus\$|$archive|")
if nm -D "$scratch/static_link" 2>/dev/null | grep -q ' chorus_'; then
    echo "static_link resolved chorus from a shared library"; exit 1
fi
# shellcheck disable=SC2086
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $mpirun -np 2 "$scratch/static_link"
echo "static link: $(printf '%s\n' "$globals" | grep -c .) globals, all public; 1 passed, 0 failed"
