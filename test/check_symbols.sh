#!/bin/sh
# Compares the functions libchorus.so exports with the CHORUS_API declarations in chorus.h:
# every declared function must be exported, and nothing else may be.
set -eu
library=$1
header=$2
exported=$(nm -D --defined-only "$library" | awk '$2 ~ /^[TWi]$/ {print $3}' | sort -u)
declared=$(grep -E '^CHORUS_API ' "$header" | sed -E 's/\(.*//; s/.*[ *]//' | sort -u)
missing=$(printf '%s\n' "$declared" | grep -vxF "$exported" || true)
extra=$(printf '%s\n' "$exported" | grep -vxF "$declared" || true)
count=$(printf '%s\n' "$declared" | grep -c . || true)
status=0
if [ -n "$missing" ]; then
    echo "declared in chorus.h but not exported:"; printf '  %s\n' $missing; status=1
fi
if [ -n "$extra" ]; then
    echo "exported but not declared in chorus.h:"; printf '  %s\n' $extra; status=1
fi
if [ $status -eq 0 ]; then
    echo "symbols: $count declared, $count exported, 1 passed, 0 failed"
fi
exit $status
