#!/bin/sh
# CHORUS_TUNING_FILE at init, across ranks, under the build's launcher (Open MPI's mpirun or a
# Hydra mpiexec), with mpi_alltoall (every alltoall checked against a reference):
#   - rank 0's file is used on every rank even where another rank names a malformed one: the
#     alltoalls pass, and rank 0's timeline shows the file's algorithm (pairwise, where the
#     built-in table picks the shared segment on one host);
#   - rank 0's file malformed: init fails on every rank, naming the file and the line;
#   - rank 0's file missing: init fails on every rank, naming it;
#   - rank 0's file's settings: every rank's segment takes the file's staging areas, their size
#     and their stores, and a
#     setting rank 0's user set (CHORUS_FUSION_THRESHOLD in its environment) stays;
#   - without a file, CHORUS_FUSION_THRESHOLD set on rank 2 alone: every rank runs with rank 0's
#     value, and rank 2 says so in one line naming the setting and both values.
# (Open MPI's mpirun is told to let the other ranks finish when one exits with an error, so that
# every rank's message arrives. Hydra's mpiexec ends them all and their last output may be lost:
# there only the failure is required, and no rank may report success.)
# Usage: check_tuning_file.sh "LAUNCHER [OPTIONS]" MPI_ALLTOALL
set -u
launch=$1
program=$2
launcher=${launch%% *}
case "$("$launcher" --version 2>&1)" in *HYDRA*) hydra=1 want=0 ;; *) hydra=0 want=3 ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CHORUS_TIMEOUT_SECONDS=20
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }

printf 'chorus-tuning 1\n# every size: every alltoall takes it\nalltoall pairwise # test\n' \
  > "$work/good"
printf 'chorus-tuning 1\nalltoall pairwise bytes=1M\nalltoall nonsense\n' > "$work/bad"

# mpmd FILE_OF_RANK_0 FILE_OF_THE_OTHERS [ENV_OF_RANK_0]: 3 ranks, rank 0 with its own file
mpmd() {
  if [ $hydra = 1 ]; then
    # shellcheck disable=SC2086
    timeout 120 $launch -n 1 -env CHORUS_TUNING_FILE "$1" ${3:+-env $3} "$program" : \
      -n 2 -env CHORUS_TUNING_FILE "$2" "$program" 2>&1
  else
    # shellcheck disable=SC2086
    timeout 120 $launch --mca orte_abort_on_non_zero_status 0 \
      -np 1 -x CHORUS_TUNING_FILE="$1" ${3:+-x $3} "$program" : \
      -np 2 -x CHORUS_TUNING_FILE="$2" "$program" 2>&1
  fi
}

out=$(mpmd "$work/good" "$work/bad" "CHORUS_TIMELINE=$work/timeline.json")
status=$?
algorithms=$(grep -o '"algorithm": "[a-z_]*"' "$work/timeline.json" 2>/dev/null | sort | uniq -c |
  tr -s ' ' | tr '\n' ';')
if [ $status -eq 0 ] && printf '%s\n' "$out" | grep -q 'np=3: [0-9]* passed, 0 failed' &&
   printf '%s' "$algorithms" | grep -q '"pairwise"' &&
   ! printf '%s' "$algorithms" | grep -q '"shared_memory"'; then
  ok "rank 0's file on every rank (the others named a malformed one): alltoalls by$algorithms"
else
  bad "rank 0's file (exit $status; algorithms: $algorithms): $(printf '%s\n' "$out" | tail -5)"
fi

out=$(mpmd "$work/bad" "$work/good")
status=$?
named=$(printf '%s\n' "$out" |
  grep -c "CHORUS_TUNING_FILE $work/bad, line 3: alltoall has no algorithm 'nonsense'")
if [ $status -ne 0 ] && [ "$named" -ge $want ] && ! printf '%s' "$out" | grep -q ' passed,'; then
  ok "rank 0's malformed file fails init on all 3 ranks, naming line 3 ($named said so)"
else
  bad "malformed file (exit $status, named by $named of 3): $(printf '%s\n' "$out" | head -5)"
fi

out=$(mpmd "$work/missing" "$work/good")
status=$?
named=$(printf '%s\n' "$out" | grep -c "CHORUS_TUNING_FILE $work/missing: No such file")
if [ $status -ne 0 ] && [ "$named" -ge $want ] && ! printf '%s' "$out" | grep -q ' passed,'; then
  ok "rank 0's missing file fails init on all 3 ranks, naming it ($named said so)"
else
  bad "missing file (exit $status, named by $named of 3): $(printf '%s\n' "$out" | head -5)"
fi
printf 'chorus-tuning 1\nsetting CHORUS_STAGING_AREAS=8 # test\nsetting CHORUS_FUSION_THRESHOLD=4M\nsetting CHORUS_STAGING_STORES=streaming\nsetting CHORUS_SEGMENT_CHUNK=256K\n' \
  > "$work/settings"
out=$(CHORUS_LOG_LEVEL=info mpmd "$work/settings" "$work/good" "CHORUS_FUSION_THRESHOLD=32M")
status=$?
segments=$(printf '%s\n' "$out" |
  grep -c "shared segment ready (8 staging areas of 262144 bytes, streaming stores")
kept=$(printf '%s\n' "$out" | grep -c "CHORUS_FUSION_THRESHOLD stays as set (environment), not 4M")
fusion=$(printf '%s\n' "$out" | grep -c "fusion up to 33554432 bytes")
if [ $status -eq 0 ] && [ "$segments" -eq 3 ] && [ "$kept" -eq 1 ] && [ "$fusion" -eq 1 ] &&
   printf '%s\n' "$out" | grep -q 'np=3: [0-9]* passed, 0 failed'; then
  ok "rank 0's settings on every rank (8 staging areas of 256 KiB, streaming, on $segments)," \
    "its user's fusion threshold kept"
else
  bad "settings (exit $status, segments $segments, kept $kept, fusion $fusion): $(printf '%s\n' "$out" | grep -v INFO | tail -5)"
fi

if [ $hydra = 1 ]; then
  # shellcheck disable=SC2086
  out=$(CHORUS_LOG_LEVEL=info timeout 120 $launch -n 2 "$program" : \
    -n 1 -env CHORUS_FUSION_THRESHOLD 32M "$program" 2>&1)
else
  # shellcheck disable=SC2086
  out=$(CHORUS_LOG_LEVEL=info timeout 120 $launch -np 2 "$program" : \
    -np 1 -x CHORUS_FUSION_THRESHOLD=32M "$program" 2>&1)
fi
status=$?
said=$(printf '%s\n' "$out" | grep -c "params: CHORUS_FUSION_THRESHOLD is")
by_rank_2=$(printf '%s\n' "$out" | grep -c "chorus\[rank 2 .*params: CHORUS_FUSION_THRESHOLD is 33554432 here but 134217728 on rank 0; using rank 0's value")
fusion=$(printf '%s\n' "$out" | grep -c "fusion up to 134217728 bytes")
if [ $status -eq 0 ] && [ "$said" -eq 1 ] && [ "$by_rank_2" -eq 1 ] && [ "$fusion" -eq 1 ] &&
   printf '%s\n' "$out" | grep -q 'np=3: [0-9]* passed, 0 failed'; then
  ok "rank 2's own CHORUS_FUSION_THRESHOLD gives way to rank 0's, said once by rank 2"
else
  bad "a threshold on rank 2 alone (exit $status, said $said, by rank 2 $by_rank_2, fusion $fusion): $(printf '%s\n' "$out" | grep -v INFO | tail -5)"
fi
echo "tuning file: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
