#!/bin/sh
# chorus across emulated hosts: network namespaces that this test makes itself (and removes),
# on a bridge of their own, each with its own hostname, so that chorus sees 2, 3 and 4 hosts of 2
# ranks. Runs mpi_collectives with the hierarchical allreduce (whose cross-host step picks
# recursive doubling, Rabenseifner or the ring by size through the selection table) and with
# every algorithm chosen automatically. Then cuts the network of one host in the middle of large
# allreduces (mpi_fault CUT): every rank, on both sides, must fail with CHORUS_ERR_TIMEOUT within
# the bound, and the job must end once the network is back. mpi_shared_heap runs on 2 and 3 hosts
# too: tensors in the shared heap reduced in place on each host, with the cross-host step between.
# Needs root and iproute2; skips (77) without them.
# mpi_ordered runs on 2 and 3 hosts too (ordered operations across hosts: the check's allgather
# carries a small allreduce's data, and mismatches fail on every rank).
# Usage: check_multihost.sh MPIRUN MPI_COLLECTIVES [MPI_FAULT] [MPI_SHARED_HEAP] [MPI_ORDERED]
set -u
mpirun=$1
program=$2
fault_program=${3:-}
shared_heap_program=${4:-}
ordered_program=${5:-}
[ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && command -v nsenter >/dev/null &&
  command -v unshare >/dev/null || { echo "multihost: needs root, ip, nsenter, unshare"; exit 77; }

. "$(dirname "$0")/common/emulated_hosts.sh"
net=10.78.9 bridge=chtestbr0 prefix=chtest
emulated_hosts_remove $prefix $bridge 4 # what an interrupted run left
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || emulated_hosts_remove $prefix $bridge 4; rm -rf "$work"' EXIT
emulated_hosts_make $prefix $bridge $net 4 ||
  { echo "multihost: cannot make network namespaces here"; exit 77; }
# mpirun starts its daemon on each "host" through this agent, as it would through ssh: inside
# the host's namespace, under a hostname of its own (shared-memory segments are named by host).
emulated_hosts_agent $prefix "$work/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
passed=0 failed=0
run() { # run HOSTS ALGORITHM NEGOTIATION [PROGRAM [ARGUMENTS...]]
  hosts=$1 algorithm=$2 negotiation=$3 test_program=${4:-$program} list=""
  shift $(( $# < 4 ? $# : 4 ))
  for i in $(seq 1 "$hosts"); do list="$list${list:+,}$net.$i:2"; done
  output=$(timeout 600 "$mpirun" --mca plm_rsh_agent "$work/agent" --bind-to none \
    --mca btl vader,tcp,self --mca btl_tcp_if_include "$net.0/24" \
    --mca oob_tcp_if_include "$net.0/24" -np $((hosts * 2)) -H "$list" \
    -x CHORUS_ALLREDUCE_ALGO="$algorithm" -x CHORUS_NEGOTIATION="$negotiation" \
    "$test_program" "$@" 2>&1)
  status=$?
  if [ $status -eq 0 ] && printf '%s\n' "$output" | grep -q " 0 failed"; then
    passed=$((passed + 1))
    echo "ok: $hosts hosts x 2 ranks, allreduce $algorithm, negotiation $negotiation," \
      "$(basename "$test_program"):" \
      "$(printf '%s\n' "$output" | tail -n 1)"
  else
    failed=$((failed + 1))
    echo "FAILED: $hosts hosts x 2 ranks, allreduce $algorithm, negotiation $negotiation" \
      "(exit $status):"
    printf '%s\n' "$output" | tail -n 30
  fi
}
run 2 hierarchical auto
run 3 hierarchical auto
run 4 hierarchical auto
run 3 auto rounds
if [ -n "$shared_heap_program" ]; then
  run 2 auto auto "$shared_heap_program"
  run 3 auto auto "$shared_heap_program"
fi
if [ -n "$ordered_program" ]; then
  run 2 auto auto "$ordered_program" across-hosts
  run 3 auto auto "$ordered_program" across-hosts
fi

# The network of host 2 is cut (its link to the bridge down) for the bound plus 5 s, once rank 0
# says the allreduces run.
cut_network() {
  bound=3 output="$work/cut.log"
  started=$(date +%s)
  timeout 120 "$mpirun" --mca plm_rsh_agent "$work/agent" --bind-to none \
    --mca btl vader,tcp,self --mca btl_tcp_if_include "$net.0/24" \
    --mca oob_tcp_if_include "$net.0/24" -np 4 -H "$net.1:2,$net.2:2" \
    -x CHORUS_TIMEOUT_SECONDS=$bound "$fault_program" allreduce_large CUT 2 >"$output" 2>&1 &
  job=$!
  for _ in $(seq 1 300); do
    grep -q '^fault-ready' "$output" && break
    sleep 0.1
  done
  ip link set "veth-${prefix}2" down
  cut_at=$(date +%s)
  sleep $((bound + 5))
  ip link set "veth-${prefix}2" up
  wait $job
  status=$?
  noticed=$(grep -c '^fault-noticed rank [0-9]: CHORUS_ERR_TIMEOUT' "$output")
  slowest=$(sed -n 's/^fault-noticed rank [0-9]*: [A-Z_]* after \([0-9.]*\) s.*/\1/p' "$output" |
    sort -n | tail -1)
  if [ $status -eq 0 ] && [ "$noticed" -eq 4 ] && grep -q " 0 failed" "$output"; then
    passed=$((passed + 1))
    echo "ok: network of host 2 cut at $((cut_at - started)) s: all 4 ranks failed with" \
      "CHORUS_ERR_TIMEOUT, the slowest ${slowest} s into its allreduce (bound $bound s)"
    grep '^fault-noticed' "$output" | cut -c1-220
  else
    failed=$((failed + 1))
    echo "FAILED: network cut (exit $status, $noticed of 4 ranks noticed):"
    tail -n 30 "$output"
  fi
}
[ -n "$fault_program" ] && cut_network
echo "multihost: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
