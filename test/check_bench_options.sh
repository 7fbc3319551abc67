#!/bin/sh
# chorus-bench's command line: --help lists every option and exits 0; a mistyped collective or
# dtype, an unknown option, a missing value and a stray argument each exit 2 with a message
# naming the mistake, instead of silently running something else.
# Usage: check_bench_options.sh MPIRUN CHORUS_BENCH
set -u
mpirun=$1
bench=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() { "$mpirun" --oversubscribe --bind-to none -np 1 "$bench" "$@" 2>&1; }
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
echo "bench options: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
