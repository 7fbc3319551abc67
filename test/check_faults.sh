#!/bin/sh
# Faults injected from outside, in every phase of work: how each job ends and how long chorus took
# to notice. Runs mpi_fault (see test/mpi/mpi_fault.c) at np=3 (one case at np=4) with
# CHORUS_TIMEOUT_SECONDS=2 (each case whose victim is frozen, or gone while mpirun runs on, waits
# out this bound once, so it sets the test's time):
#   - SIGSTOP in each phase (and on rank 0, the coordinator): every other rank fails with
#     CHORUS_ERR_TIMEOUT naming the frozen rank, the woken rank stops too, the test passes.
#   - SIGKILL and SIGSEGV in each phase and during init, under mpirun as it is: the job ends
#     (mpirun notices) with a non-zero status, and no rank saw a wrong result.
#   - SIGKILL and SIGSEGV under mpirun that lets the others run on (Open MPI's
#     orte_enable_recovery): chorus alone notices; every survivor reports the failed rank. Not
#     under Hydra: MPICH 4.0's mpiexec ends the job when a process dies even with
#     -disable-auto-cleanup, so there is no such launcher to test against.
#   - CHORUS_ABORT_ON_FAILURE=on with a frozen rank: the survivors end the job with MPI_Abort.
# Every job must end within the bound plus BOUND_SLACK seconds.
# Usage: check_faults.sh MPIRUN MPI_FAULT [PHASES]; MPIRUN: Open MPI's mpirun or a Hydra mpiexec
# (the cases are written with Open MPI's options; Hydra gets their counterparts).
set -u
mpirun=$1
case "$("$mpirun" --version 2>&1)" in *HYDRA*) hydra=1 ;; *) hydra=0 ;; esac
program=$2
phases=${3:-allreduce_small allreduce_large broadcast allgather fused negotiation}
np=3
bound=2
slack=12
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CHORUS_TIMEOUT_SECONDS=$bound
failures=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

now() { date +%s.%N; }

# run NAME EXPECT MPIRUN_OPTIONS -- PROGRAM_ARGUMENTS; EXPECT: pass, ended, noticed or aborted
run() {
    name=$1 expect=$2
    shift 2
    options=
    while [ "$1" != -- ]; do
        if [ $hydra = 1 ]; then
            case "$1" in
                -x) options="$options -genv ${2%%=*} ${2#*=}"; shift 2 ;;
                *) options="$options $1"; shift ;;
            esac
        else
            options="$options $1"; shift
        fi
    done
    shift
    if [ $hydra = 1 ]; then launch="-bind-to none"; else launch="--oversubscribe --bind-to none"; fi
    started=$(now)
    # shellcheck disable=SC2086
    timeout $((bound + slack + 30)) "$mpirun" $launch $options -np $np \
        "$program" "$@" >"$log" 2>&1
    status=$?
    took=$(echo "$(now) - $started" | bc)
    noticed=$(grep -c '^fault-noticed' "$log")
    detection=$(sed -n 's/^fault-noticed rank [0-9]*: [A-Z_]* after \([0-9.]*\) s.*/\1/p' "$log" |
                sort -n | tail -1)
    verdict=ok
    why=
    if [ "$(echo "$took > $bound + $slack" | bc)" = 1 ]; then
        verdict=FAILED why="the job took ${took} s"
    elif grep -q 'FAILED\|TIMEOUT in step' "$log"; then
        verdict=FAILED why="a rank failed a check"
    else
        case $expect in
        pass) [ "$status" = 0 ] || { verdict=FAILED why="exit status $status"; } ;;
        ended) [ "$status" != 0 ] || { verdict=FAILED why="the job ended with status 0"; } ;;
        noticed) [ "$noticed" = $((np - 1)) ] ||
            { verdict=FAILED why="$noticed of $((np - 1)) survivors noticed"; } ;;
        aborted) { [ "$status" != 0 ] && grep -q 'MPI_Abort (CHORUS_ABORT_ON_FAILURE)' "$log"; } ||
            { verdict=FAILED why="no MPI_Abort (status $status)"; } ;;
        esac
    fi
    printf '%-48s %-8s job %5.1f s  noticed by %d  within %s s  %s\n' "$name" "$verdict" "$took" \
        "$noticed" "${detection:--}" "$why"
    if [ "$verdict" != ok ]; then
        failures=$((failures + 1))
        sed 's/^/    /' "$log" | tail -30
    fi
}

for phase in $phases; do
    run "STOP rank 1, $phase" pass -- "$phase" STOP 1
done
run "STOP rank 0, negotiation" pass -- negotiation STOP 0
run "STOP rank 1, allreduce_large over MPI" pass -x CHORUS_ALLREDUCE_ALGO=ring -- \
    allreduce_large STOP 1
run "STOP rank 1, allreduce_small, by rounds" pass -x CHORUS_NEGOTIATION=rounds -- \
    allreduce_small STOP 1
np=4
run "STOP rank 1, allreduce_large, np=4" pass -- allreduce_large STOP 1
np=3
for signal in KILL SEGV; do
    for phase in init $phases; do
        run "$signal rank 1, $phase" ended -- "$phase" "$signal" 1
    done
done
[ $hydra = 1 ] && phases_no_abort= || phases_no_abort=$phases
for phase in $phases_no_abort; do
    run "KILL rank 1, $phase, no launcher abort" noticed --mca orte_enable_recovery 1 -- \
        "$phase" KILL 1
done
if [ $hydra = 0 ]; then
    run "SEGV rank 0, negotiation, no launcher abort" noticed --mca orte_enable_recovery 1 -- \
        negotiation SEGV 0
    run "KILL rank 2, fused, by rounds, no launcher abort" noticed --mca orte_enable_recovery 1 \
        -x CHORUS_NEGOTIATION=rounds -- fused KILL 2
fi
run "STOP rank 1, CHORUS_ABORT_ON_FAILURE=on" aborted -x CHORUS_ABORT_ON_FAILURE=on -- \
    negotiation STOP 1

if [ "$failures" != 0 ]; then
    echo "check_faults: $failures case(s) failed"
    exit 1
fi
echo "check_faults: every case passed"
