#!/bin/sh
# chorus formed again over the survivors of a crashed rank, in their own processes
# (test/mpi/mpi_survivors.c), with the last rank and with rank 0 as the victim, at np=3 and 4,
# the survivors finding the failure themselves or told of it (chorus_peer_lost).
# Under Open MPI's mpirun --enable-recovery, which keeps the survivors running but exits 0
# whatever they report: this reads their verdict line instead. Not under Hydra: MPICH 4.0's
# mpiexec ends the survivors when a process dies (../shared/notes/elastic-in-process), so there
# is no launcher to run it under (skipped, 77).
# With PYTHON and TORCH_SURVIVORS (test/python/torch_survivors.py), also torch.distributed's
# process group made again over the survivors, rank 0 or the last rank gone, at np=3.
# Usage: check_survivors.sh MPIRUN MPI_SURVIVORS [PYTHON TORCH_SURVIVORS]
set -u
mpirun=$1
program=$2
python=${3:-}
torch_program=${4:-}
shift 2
case "$("$mpirun" --version 2>&1)" in *HYDRA*) echo "survivors: skipped under Hydra"; exit 77 ;; esac
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
failures=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cases=0
# np, the victim, and whether the survivors are told (chorus_peer_lost) or find out themselves
runs="3 last|3 first|4 last|4 first|3 last told|4 first told"
[ -n "$torch_program" ] && runs="$runs|3 last torch|3 first torch"
IFS='|'
for run in $runs; do
    unset IFS
    set -- $run
    np=$1 victim=$2 how=${3:-}
    cases=$((cases + 1))
    if [ "$how" = torch ]; then
        set -- "$python" "$torch_program" "$victim"
    else
        set -- "$program" "$victim" $how
    fi
    timeout 120 "$mpirun" --enable-recovery --oversubscribe --bind-to none -np "$np" "$@" \
        >"$log" 2>&1
    status=$?
    verdict=$(grep '^survivors np=' "$log")
    case "$verdict" in
        *" 0 failed;"*) echo "ok: np=$np, victim $victim${how:+, $how}: $verdict" ;;
        *)
            echo "FAILED: np=$np, victim $victim${how:+, $how} (mpirun exit $status):" \
                "${verdict:-no verdict}"
            sed 's/^/    /' "$log" | grep -v 'PMIX ERROR' | tail -20
            failures=$((failures + 1)) ;;
    esac
done
echo "survivors: $((cases - failures)) passed, $failures failed"
[ "$failures" -eq 0 ]
