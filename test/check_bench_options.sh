#!/bin/sh
# chorus-bench's command line: --help lists every option and exits 0; a mistyped collective or
# dtype, an unknown option, a missing value and a stray argument each exit 2 with a message
# naming the mistake, instead of silently running something else. Then a short --overlap run
# on a small gradient list at 2 ranks: its results are right, and its step timeline holds the
# compute spans beside chorus's; and reducescatter and alltoall sweeps at 3 ranks.
# Usage: check_bench_options.sh "MPIRUN [OPTIONS]" CHORUS_BENCH (the launcher and its options)
set -u
mpirun=$1
bench=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ranks=1
# shellcheck disable=SC2086
run() { $mpirun -np $ranks "$bench" "$@" 2>&1; }
passed=0 failed=0
expect() { # expect DESCRIPTION STATUS TEXT -- ARGS...
  description=$1 status=$2 text=$3
  shift 4
  output=$(run "$@")
  got=$?
  if [ "$got" -eq "$status" ] && printf '%s' "$output" | grep -qF -- "$text"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $description: exit $got (expected $status), output: $output"
  fi
}
expect "--help" 0 "--workload" -- --help
expect "--help lists --cycle" 0 "--cycle" -- --help
expect "a mistyped collective" 2 '"allreduc" is not a valid --collective' -- -c allreduc
expect "an unsupported dtype" 2 '"float16" is not a valid --dtype' -- -d float16
expect "an unknown option" 2 "unknown option --bogus" -- --bogus
expect "a missing value" 2 "-e needs a value" -- -e
expect "a stray argument" 2 "unexpected argument stray" -- stray
expect "--help lists --overlap" 0 "--overlap" -- --help
expect "a ratio that is not positive" 2 '"1,0" is not a valid --compute-ratio' -- \
  --workload resnet50 --overlap --compute-ratio 1,0
expect "--overlap without a workload" 2 "--overlap needs --workload" -- --overlap
directory=$(mktemp -d)
trap 'rm -rf "$directory"' EXIT
printf '# elements name\n%s\n' "1000 a.weight" "7 a.bias" "300000 b.weight" "0 empty" \
  "65537 c.weight" > "$directory/grads.txt"
ranks=3
# The sweeps of the newer collectives, checked against MPI's in the same run (exit 1 on #wrong).
expect "a reducescatter sweep" 0 "summary: reducescatter np=3" -- -c reducescatter -b 4 -e 1M \
  -f 16 -n 3
expect "an alltoall sweep" 0 "summary: alltoall np=3" -- -c alltoall -b 4 -e 1M -f 16 -n 3
ranks=2
expect "an overlap run" 0 "wrong=0" -- --workload "$directory/grads.txt" --overlap --steps 3 \
  --compute-ratio 1 --compare CHORUS_CYCLE_TIME_MS=2 --step-timeline "$directory/step.json"
if grep -q '"source": "chorus_timeline_mark"' "$directory/step.json" &&
   grep -q '"name": "allreduce"' "$directory/step.json"; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  echo "FAILED: the step timeline lacks the compute marks or the allreduces"
fi
echo "bench options: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
