#!/bin/sh
# Compares the functions libchorus.so exports with the CHORUS_API declarations in chorus.h and
# in the internal query interface of chorus's own programs (chorus_query.h): every declared
# function must be exported, and nothing else may be.
#   check_symbols.sh LIBRARY HEADER...
set -eu
library=$1
shift
exported=$(nm -D --defined-only "$library" | awk '$2 ~ /^[TWi]$/ {print $3}' | sort -u)
declared=$(cat "$@" | grep -E '^CHORUS_API ' | sed -E 's/\(.*//; s/.*[ *]//' | sort -u)
missing=$(printf '%s\n' "$declared" | grep -vxF "$exported" || true)
extra=$(printf '%s\n' "$exported" | grep -vxF "$declared" || true)
count=$(printf '%s\n' "$declared" | grep -c . || true)
status=0
if [ -n "$missing" ]; then
    echo "declared but not exported:"; printf '  %s\n' $missing; status=1
fi
if [ -n "$extra" ]; then
    echo "exported but not declared:"; printf '  %s\n' $extra; status=1
fi
if [ $status -eq 0 ]; then
    echo "symbols: $count declared, $count exported, 1 passed, 0 failed"
fi
exit $status
