#!/bin/sh
# chorus-tune --quick at 2 and 4 ranks (or the rank counts given) under the build's launcher: it
# measures every collective (results checked: a wrong result fails it), prints the comparison
# with the built-in choice for each, measures the settings (staging areas and their size, the
# fusion threshold on bursts), and writes a tuning file that chorus-info reads and with which
# mpi_collectives (every collective against its reference) passes. Bad options are refused,
# naming them. Timings are not judged here (benchmarks measure speed, not tests).
# Usage: check_chorus_tune.sh "LAUNCHER [OPTIONS]" CHORUS_TUNE CHORUS_INFO MPI_COLLECTIVES ["NP..."]
set -u
launch=$1 tune=$2 info=$3 collectives=$4 rank_counts=${5:-2 4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }

for np in $rank_counts; do
  file=$work/np$np.tuning
  # shellcheck disable=SC2086
  out=$(timeout 600 $launch -np $np "$tune" --quick -o "$file" 2>&1)
  status=$?
  tables=$(printf '%s\n' "$out" | grep -c "^# [a-z]*, $np ranks, .*: the built-in choice against")
  settings=$(printf '%s\n' "$out" | grep -c "^# CHORUS_[A-Z_]*: each value against the default")
  if [ $status -eq 0 ] && [ "$tables" -eq 5 ] && [ "$settings" -eq 3 ] &&
     head -n 1 "$file" | grep -qx 'chorus-tuning 1'
  then
    ok "np=$np: 5 collectives and 3 settings measured," \
      "$(grep -v '^#' "$file" | grep -vc '^chorus-tuning') row(s) in the file:"
    grep -v '^#' "$file" | grep -v '^chorus-tuning' | sed 's/^/    /'
  else
    bad "np=$np (exit $status, $tables tables, $settings settings):" \
      "$(printf '%s\n' "$out" | tail -20)"
    continue
  fi
  if CHORUS_TUNING_FILE=$file "$info" --np $np > "$work/info" 2>&1; then
    ok "np=$np: chorus-info reads the file"
  else
    bad "np=$np: chorus-info: $(tail -3 "$work/info")"
  fi
  # shellcheck disable=SC2086
  out=$(CHORUS_TUNING_FILE=$file timeout 300 $launch -np $np "$collectives" 2>&1)
  if [ $? -eq 0 ] && printf '%s\n' "$out" | grep -q "np=$np: [0-9]* passed, 0 failed"; then
    ok "np=$np: mpi_collectives passes with the file"
  else
    bad "np=$np: mpi_collectives with the file: $(printf '%s\n' "$out" | tail -5)"
  fi
done

# shellcheck disable=SC2086
out=$($launch -np 1 "$tune" -c reduce 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q "invalid value for -c: 'reduce'"; then
  ok "an unknown collective refused, named"
else
  bad "-c reduce: $out"
fi
echo "chorus-tune: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
