#!/bin/sh
# CHORUS_AUTOTUNE under the build's launcher, with mpi_autotune (every allreduce of every step
# checked against a reference, so settings that differed between ranks would fail it):
#   - at each count of RANKS (by default 2, 3 and 4; from 3 a process set beside the job's
#     tensors): every rank logs that it settled, once, on the same settings after the same number
#     of trials; rank 0's CSV log has a row per trial, numbered from 1, and a settled row with
#     those settings;
#   - CHORUS_FUSION_THRESHOLD set by the user: never varied, and said so; set to 0 (fusion
#     off), the tensor limit is not tried either;
#   - tensor names that never repeat: no steps to tune on, a warning, the starting settings kept.
# Usage: check_autotune.sh "LAUNCHER [OPTIONS]" MPI_AUTOTUNE [RANKS]
set -u
launch=$1
program=$2
rank_counts=${3:-2 3 4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CHORUS_TIMEOUT_SECONDS=30
export CHORUS_AUTOTUNE=on CHORUS_AUTOTUNE_STEPS_PER_TRIAL=1 CHORUS_LOG_LEVEL=info
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }

# run NP [ARGUMENTS]: the output of mpi_autotune at NP ranks, the log in $work/log.csv
run() {
  np=$1
  shift
  rm -f "$work/log.csv"
  # shellcheck disable=SC2086
  CHORUS_AUTOTUNE_LOG="$work/log.csv" timeout 200 $launch -np "$np" "$program" "$@" 2>&1
}

for np in $rank_counts; do
  out=$(run "$np" 60)
  status=$?
  settled=$(printf '%s\n' "$out" | grep 'autotune: settled after' | sed 's/.*autotune: //')
  lines=$(printf '%s\n' "$settled" | grep -c 'settled')
  distinct=$(printf '%s\n' "$settled" | sort -u | grep -c 'settled')
  trials=$(printf '%s\n' "$settled" | sed -n '1s/settled after \([0-9]*\) trials.*/\1/p')
  limit=$(printf '%s\n' "$settled" | sed -n '1s/.*CHORUS_FUSION_TENSOR_LIMIT=\([0-9]*\).*/\1/p')
  threshold=$(printf '%s\n' "$settled" | sed -n '1s/.*CHORUS_FUSION_THRESHOLD=\([0-9]*\).*/\1/p')
  cycle=$(printf '%s\n' "$settled" | sed -n '1s/.*CHORUS_CYCLE_TIME_MS=\([0-9.]*\).*/\1/p')
  rows=$(grep -c '^[0-9]' "$work/log.csv" 2>/dev/null)
  numbered=$(cut -d, -f1 "$work/log.csv" 2>/dev/null | grep '^[0-9]' | tr '\n' ' ')
  expected_numbers=$(seq 1 "${trials:-0}" | tr '\n' ' ')
  last=$(tail -1 "$work/log.csv" 2>/dev/null)
  if [ $status -eq 0 ] && printf '%s\n' "$out" | grep -q "np=$np: [0-9]* passed, 0 failed" &&
     [ "$lines" -eq "$np" ] && [ "$distinct" -eq 1 ] && [ "${rows:-0}" -eq "${trials:-x}" ] &&
     [ "$numbered" = "$expected_numbers" ] &&
     [ "$last" = ",settled,$limit,$threshold,$cycle,,,,," ]; then
    ok "np=$np: all $np ranks settled after $trials trials on: $limit/$threshold/$cycle;" \
      "every step's allreduces right"
  else
    bad "np=$np (exit $status, $lines settled lines, $distinct distinct, $rows rows for" \
      "${trials:-?} trials, last row '$last'): $(printf '%s\n' "$out" | grep -v ' INFO ' | tail -5)"
  fi
done

# stays THRESHOLD COLUMN VALUE SETTING WHAT: with CHORUS_FUSION_THRESHOLD=THRESHOLD, every trial
# in rank 0's log has VALUE in COLUMN, and the log says that SETTING stays as the user set it.
stays() {
  out=$(CHORUS_FUSION_THRESHOLD=$1 run 2 40)
  status=$?
  tried=$(grep '^[0-9]' "$work/log.csv" 2>/dev/null | cut -d, -f"$2" | sort -u | tr '\n' ' ')
  if [ $status -eq 0 ] && [ "$tried" = "$3 " ] &&
     printf '%s\n' "$out" | grep -q "$4 stays as the user set it" &&
     printf '%s\n' "$out" | grep -q 'np=2: [0-9]* passed, 0 failed'; then
    ok "$5"
  else
    bad "$5 (exit $status, values tried: $tried)"
  fi
}
stays 32M 4 33554432 CHORUS_FUSION_THRESHOLD "a threshold the user set stays at 32M in every trial"
stays 0 3 65536 CHORUS_FUSION_TENSOR_LIMIT \
  "fusion turned off by the user: the tensor limit is not tried either"

out=$(run 2 --fresh-names)
status=$?
if [ $status -eq 0 ] && printf '%s\n' "$out" | grep -q 'no training steps to measure' &&
   ! printf '%s\n' "$out" | grep -q 'settled after' &&
   printf '%s\n' "$out" | grep -q 'np=2: [0-9]* passed, 0 failed'; then
  ok "names that never repeat: a warning, the starting settings kept, every allreduce right"
else
  bad "names that never repeat (exit $status): $(printf '%s\n' "$out" | grep -v ' INFO ' | tail -5)"
fi

echo "autotune: $passed passed, $failed failed"
[ $failed -eq 0 ]
