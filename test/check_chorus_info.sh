#!/bin/sh
# chorus-info's options: --version, the plan for a job size, versions, malformed options refused.
# Usage: check_chorus_info.sh CHORUS_INFO
set -u
info=$1
failed=0
expect() { # expect WHAT STATUS_WANTED COMMAND... (output in $out)
    what=$1 want=$2
    shift 2
    out=$("$@" 2>&1)
    status=$?
    if [ "$status" -ne "$want" ]; then echo "FAILED: $what: exit $status, not $want"; failed=1; fi
}
expect "--version" 0 "$info" --version
printf '%s\n' "$out" | grep -qx 'chorus [0-9]*\.[0-9]*\.[0-9]*' || { echo "FAILED: --version: $out"; failed=1; }
expect "a plan at np=8, 2 per host" 0 "$info" --np 8 --ranks-per-host 2
for line in '^MPI: ' '^hwloc: [0-9]' '^GPU: ' '^This host: [0-9]* cores' \
    'Algorithms by size at 8 rank(s), 2 per host' 'allreduce .* 1 B - .*hierarchical'; do
    printf '%s\n' "$out" | grep -q "$line" || { echo "FAILED: no line '$line'"; failed=1; }
done
expect "a plan with the ring forced" 0 "$info" --np 4 "CHORUS_ALLREDUCE_ALGO=ring"
rows=$(printf '%s\n' "$out" | grep -c '^  allreduce .* - ')
ring_first=$(printf '%s\n' "$out" | grep -c '^  allreduce .* - [0-9]* [KMG]*i*B *ring')
[ "$rows" -gt 0 ] && [ "$rows" = "$ring_first" ] ||
    { echo "FAILED: the forced ring is not first at every size ($ring_first of $rows rows)"; failed=1; }
expect "--np x refused" 2 "$info" --np x
expect "unknown option refused" 2 "$info" --bogus
expect "--help" 0 "$info" --help
[ $failed -eq 0 ] && echo "chorus-info: every check passed"
exit $failed
