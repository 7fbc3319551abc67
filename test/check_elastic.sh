#!/bin/sh
# Elastic training across emulated hosts: network namespaces that this test makes itself (and
# removes), each with its own hostname, one rank each, driven by chorusrun --elastic with a
# host-discovery script that reads a file. The job is test/python/elastic_train.py, which checks
# that every sample of every epoch is processed once and that the model ends identical on every
# rank. Cases:
#   a. all ranks of one of 3 hosts killed (SIGKILL) mid-epoch, the host of rank 0 (the
#      coordinator): the job goes on on the other 2 hosts, in their processes (the final
#      ranks are processes of the first generation)
#   b. the network of one of 3 hosts cut instead: the same (the driver ends mpirun at the end,
#      which would wait for the cut host's ranks)
#   c. a third host added to the discovery file: it joins at a commit, taking the state from
#      the others (it never saw a commit)
#   d. one of 2 hosts lost with --min-np 2: the job waits --elastic-timeout, then ends saying so
#   e. a rank killed in the middle of a commit (saved on its own, the others in the commit's
#      collectives): the others go on in their processes, from that commit or the one before
#   f. a rank killed at step 25, and another as chorus is formed again over the survivors (the
#      one left blocks in the rebuild and falls silent): the driver ends the generation and
#      restarts the job on the host left, saying why it did not go on in place
#   h. all ranks of one of 3 hosts killed, the job going on in place; the host back after its
#      cooldown (5 s) joins in place (chorus_grow): the survivors' processes unchanged, the
#      grown world resumes from the commit it grew at, every sample once, the model identical
#      on 3 ranks; prints the time from the host's return to the first step on 3 hosts
#   i. as a, with --worlds ucx (the driver starts the ranks and forms their worlds over UCX, no
#      MPI launcher): every process of host 1 killed at once
#   j. as b, with --worlds ucx
#   k. as h, with --worlds ucx: the driver starts the host's rank again, and the running ranks
#      open the next world with it at their next commit
#   l. --worlds ucx: host 3 removed from the discovery script's list: the driver ends its rank,
#      and the others go on in their processes
#   m. as f, with --worlds ucx: the rank that dies as the survivors form the next world is met
#      as a failure like the first (the world it does not join cannot form; the one left
#      reports that), and the rank left goes on alone in its process
#   g. (by hand: CASES=g, FAULTS=20 by default) faults in a row in one job: a host's ranks
#      killed and a host's network cut, in turn, each going on in place; the host is left out
#      for 1 s, then added back. Every resume from the loss committed, every epoch's samples
#      once, the final model identical
# In a to c the resumed job's loss on a fixed batch must equal the loss at the commit it resumed
# from, and the time from the fault (or the new host) to the first step after it is printed.
# Needs root, iproute2 and Open MPI (the emulated hosts are reached through mpirun's rsh agent);
# skips (77) otherwise.
# CASES (e.g. CASES=ef) runs some cases only.
# Usage: check_elastic.sh CHORUSRUN PYTHON TRAIN_SCRIPT
set -u
chorusrun=$1
python=$2
script=$3
[ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && command -v nsenter >/dev/null &&
  command -v unshare >/dev/null || { echo "elastic: needs root, ip, nsenter, unshare"; exit 77; }
launcher=$(sed -n 's/^BUILT_LAUNCHER = "\(.*\)"$/\1/p' "$chorusrun")
case "$("${launcher:-mpirun}" --version 2>&1)" in
  *"Open MPI"*|*OpenRTE*) ;;
  *) echo "elastic: the emulated hosts are reached through Open MPI's rsh agent; skipped"
     exit 77 ;;
esac

. "$(dirname "$0")/common/emulated_hosts.sh"
net=10.78.11 bridge=chelbr0 prefix=chel
emulated_hosts_remove $prefix $bridge 3 # what an interrupted run left
work=$(mktemp -d)
trap '[ -n "${KEEP:-}" ] || emulated_hosts_remove $prefix $bridge 3; rm -rf "$work"' EXIT
emulated_hosts_make $prefix $bridge $net 3 ||
  { echo "elastic: cannot make network namespaces here"; exit 77; }
# mpirun starts its daemon on each "host" through this agent, as it would through ssh.
emulated_hosts_agent $prefix "$work/agent"
printf '#!/bin/sh\ncat %s/hosts\n' "$work" > "$work/discover"
chmod +x "$work/discover"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm_rsh_agent="$work/agent" OMPI_MCA_btl=vader,tcp,self
export OMPI_MCA_btl_tcp_if_include="$net.0/24" OMPI_MCA_oob_tcp_if_include="$net.0/24"
export CHORUS_TIMEOUT_SECONDS="${CHORUS_TIMEOUT_SECONDS:-3}"
bound=$CHORUS_TIMEOUT_SECONDS
passed=0 failed=0
now() { date +%s.%N; }
wanted() { case ${CASES:-abcdefhijklm} in *$1*) return 0 ;; esac; return 1; }
extra="" # the training script's options of the case at hand
cooldown=600 # how long a failed host is left out

hosts_file() { # hosts_file INDEX... : the discovery script's answer
  : > "$work/hosts"
  for i in "$@"; do echo "$net.$i:1" >> "$work/hosts"; done
}

start_job() { # start_job LOG ELASTIC_OPTIONS...
  log=$1; shift
  timeout 300 "$chorusrun" --elastic --host-discovery-script "$work/discover" \
    --blacklist-cooldown-range $cooldown $cooldown "$@" "$python" "$script" --epochs 3 \
    --step-delay 0.05 $extra > "$log" 2>&1 &
  job=$!
}

wait_for_step() { # wait_for_step LOG N: until rank 0 has done N steps (60 s at most)
  for _ in $(seq 1 600); do
    [ "$(grep -c '^step' "$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

rank_pids() { # the training processes in host INDEX's namespace
  for pid in $(ip netns pids "$prefix$1"); do
    # (the training process itself, not a shell of the agent's around it)
    tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -q "^$python .*$script" &&
      echo "$pid"
  done
}

# went_on_in_place LOG: the driver said so, and every final rank is a process of generation 0
went_on_in_place() {
  grep -q "goes on in the surviving processes" "$1" || return 1
  pids=$(grep -o 'pids [0-9,]*' "$1" | tail -n 1 | sed 's/pids //; s/,/ /g')
  [ -n "$pids" ] || return 1
  for pid in $pids; do grep -q "started pid $pid rank [0-9]* generation 0" "$1" || return 1; done
}

# job_verdicts LOG SIZE STATUS: what every case's job must show, added to $problems: it ended
# well, with SIZE ranks holding the same model, no epoch WRONG, and every resume (there must
# be one) from the loss of the commit it resumed; sets $resumes and, of the last resume,
# $number and $loss
job_verdicts() {
  [ "$3" -eq 0 ] || problems="$problems; chorusrun exited with $3"
  grep -q "final size $2 .* identical on every rank" "$1" ||
    problems="$problems; no final line with $2 ranks and identical models"
  grep -q "WRONG" "$1" && problems="$problems; $(grep -m1 WRONG "$1")"
  resumes=0
  # (a rank's line may run into another's output: take the number only)
  for resumed in $(grep -o 'resumed [0-9]* \(in place \)\?eval=[0-9.e-]*' "$1" |
                   sed 's/resumed //; s/in place //; s/ eval=/:/'); do
    resumes=$((resumes + 1))
    number=${resumed%%:*} loss=${resumed#*:}
    committed=$(grep -o "commit $number eval=[0-9.e-]*" "$1" | head -n 1 | sed 's/.*eval=//')
    [ "$committed" = "$loss" ] ||
      problems="$problems; resumed from commit $number with loss $loss, committed $committed"
  done
  [ "$resumes" -gt 0 ] || problems="$problems; the job never resumed from a commit"
}

# check LOG NAME EXPECTED_SIZE FAULT_TIME STATUS [in-place|restart]: the job's verdicts
check() {
  log=$1 name=$2 size=$3 fault=$4 status=$5 how=${6:-} problems=""
  case $how in
    in-place) went_on_in_place "$log" ||
      problems="$problems; did not go on in the surviving processes of generation 0" ;;
    restart) grep -q "goes on in the surviving processes" "$log" &&
      problems="$problems; went on in place where the job must restart" ;;
  esac
  job_verdicts "$log" "$size" "$status"
  for epoch in 0 1 2; do
    grep -q "epoch $epoch ok" "$log" || problems="$problems; epoch $epoch never checked ok"
  done
  # the first step after the resume, timed on the ranks' clock
  first=$(awk '/resumed [0-9]* (in place )?eval=/ { after = 1 } after && /^step/ { print $NF; exit }' "$log")
  if [ -n "$problems" ]; then
    failed=$((failed + 1))
    echo "FAILED: $name${problems}"
    grep -v '^step\|^commit' "$log" | tail -n 40
  else
    passed=$((passed + 1))
    took=$(echo "$first - $fault" | bc)
    echo "ok: $name: resumed from commit $number (loss $loss, as committed), first step" \
      "${took} s after it; every epoch's samples once; final model identical on $size ranks"
    grep '^chorusrun:' "$log" | sed 's/^/    /'
  fi
}

# host_fault CASE NAME KILL|CUT ELASTIC_OPTIONS...: a job on 3 hosts that goes on in place on
# 2 after, at step 25, KILL (a command that kills what runs on host 1) or the network of host 3
# cut
host_fault() {
  letter=$1 name=$2 fault_kind=$3
  shift 3
  hosts_file 1 2 3
  start_job "$work/$letter.log" --min-np 2 --max-np 3 "$@"
  wait_for_step "$work/$letter.log" 25 || echo "elastic: case $letter never reached step 25"
  fault=$(now)
  if [ "$fault_kind" = cut ]; then
    ip link set "veth-${prefix}3" down
  else
    $fault_kind | xargs -r kill -9
  fi
  wait $job
  status=$?
  ip link set "veth-${prefix}3" up
  check "$work/$letter.log" "$letter. $name" 2 "$fault" $status in-place
  ip netns pids "${prefix}3" | xargs -r kill -9 2>/dev/null
}

# a. SIGKILL every rank of host 1, rank 0's
if wanted a; then host_fault a "ranks of host 1 (rank 0) killed" "rank_pids 1"; fi

# b. the network of host 3 cut
if wanted b; then host_fault b "network of host 3 cut (bound ${bound} s)" cut; fi

# c. host 3 added while the job runs on hosts 1 and 2
if wanted c; then
  hosts_file 1 2
  start_job "$work/c.log" --min-np 2 --max-np 3
  wait_for_step "$work/c.log" 25 || echo "elastic: case c never reached step 25"
  fault=$(now)
  hosts_file 1 2 3
  wait $job
  check "$work/c.log" "c. host 3 added" 3 "$fault" $?
fi

# d. 2 hosts, --min-np 2, one lost: the job waits --elastic-timeout, then ends saying why
if wanted d; then
  hosts_file 1 2
  start_job "$work/d.log" --min-np 2 --max-np 2 --elastic-timeout 5
  wait_for_step "$work/d.log" 10 || echo "elastic: case d never reached step 10"
  fault=$(now)
  rank_pids 2 | xargs -r kill -9
  wait $job
  status=$?
  took=$(echo "$(now) - $fault" | bc)
  if [ $status -ne 0 ] && grep -q "fewer than --min-np 2, for 5 s" "$work/d.log" &&
     [ "$(echo "$took < 30" | bc)" = 1 ]; then
    passed=$((passed + 1))
    echo "ok: d. below --min-np: ended ${took} s after the fault, exit $status:"
    grep '^chorusrun:' "$work/d.log" | tail -n 3 | sed 's/^/    /'
  else
    failed=$((failed + 1))
    echo "FAILED: d. below --min-np (exit $status after ${took} s)"
    tail -n 30 "$work/d.log"
  fi
fi

# scripted_fault CASE MIN_NP SCRIPT_OPTIONS [ELASTIC_OPTIONS...]: a job on 3 hosts whose
# training script makes the fault itself (in a commit, in the rebuild), where no outside timing
# could; sets $status
scripted_fault() {
  hosts_file 1 2 3
  extra=$3
  letter=$1 min_np=$2
  shift 3
  start_job "$work/$letter.log" --min-np "$min_np" --max-np 3 "$@"
  wait $job
  status=$?
  extra=""
}

# e. a rank killed in the middle of its 5th commit
if wanted e; then
  scripted_fault e 2 "--crash-in-commit 5 --fail-rank 1"
  fault=$(grep -o 'dies in commit 5 at [0-9.]*' "$work/e.log" | sed 's/.* at //')
  check "$work/e.log" "e. a rank killed in a commit" 2 "${fault:-0}" $status in-place
fi

# f. a rank killed at step 25, and another as chorus is formed again
if wanted f; then
  scripted_fault f 1 "--crash-at-step 25 --fail-rank 1 --crash-in-rebuild 2"
  fault=$(grep -o 'dies at step 25 at [0-9.]*' "$work/f.log" | sed 's/.* at //')
  if grep -q "dies as chorus is formed again" "$work/f.log"; then
    check "$work/f.log" "f. a rank killed, another in the rebuild" 1 "${fault:-0}" $status
  else
    failed=$((failed + 1))
    echo "FAILED: f. nobody died in the rebuild"
    tail -n 40 "$work/f.log"
  fi
fi

# h. host 2's ranks killed; back after its cooldown, the host joins the running ranks in place
# grow_back CASE ELASTIC_OPTIONS...: the case, run with those options
grow_back() {
  letter=$1
  shift
  hosts_file 1 2 3
  cooldown=5 extra="--epochs 100000 --stop-file $work/stop-$letter"
  start_job "$work/$letter.log" --min-np 2 --max-np 3 "$@"
  cooldown=600 extra=""
  wait_for_step "$work/$letter.log" 25 || echo "elastic: case $letter never reached step 25"
  survivors="$(rank_pids 1) $(rank_pids 3)"
  rank_pids 2 | xargs -r kill -9
  back=""
  for _ in $(seq 1 600); do # the driver asks for ranks on host 2 once its cooldown ends
    if [ -z "$back" ] && grep -q "in place at their next commit" "$work/$letter.log"; then
      back=$(now)
    fi
    [ -n "$back" ] && [ "$(awk '/grown [0-9]+ size 3 /{g=1} g && /^step .* size 3 /' "$work/$letter.log" |
                           wc -l)" -ge 10 ] && break
    sleep 0.1
  done
  touch "$work/stop-$letter"
  wait $job
  status=$?
  problems=""
  job_verdicts "$work/$letter.log" 3 "$status"
  grep -q "grew in place to 3 ranks" "$work/$letter.log" || problems="$problems; did not grow in place"
  grep -q "generation 1" "$work/$letter.log" && problems="$problems; the job restarted"
  grown=$(grep -o 'grown [0-9]* size 3 eval=[0-9.e-]*' "$work/$letter.log" | head -n 1)
  number=$(echo "$grown" | awk '{print $2}') loss=${grown##*eval=}
  committed=$(grep -o "commit $number eval=[0-9.e-]*" "$work/$letter.log" | head -n 1 | sed 's/.*eval=//')
  [ -n "$grown" ] && [ "$committed" = "$loss" ] ||
    problems="$problems; grown from commit $number with loss $loss, committed $committed"
  final=$(grep -o 'pids [0-9,]*' "$work/$letter.log" | tail -n 1 | sed 's/pids //; s/,/ /g')
  for pid in $survivors; do
    case " $final " in *" $pid "*) ;; *) problems="$problems; survivor pid $pid not in the final ranks ($final)" ;; esac
  done
  # "grown" may run into another rank's line: found anywhere in a line, as above
  first=$(awk '/grown [0-9]+ size 3 /{g=1} g && /^step .* size 3 /{print $NF; exit}' "$work/$letter.log")
  [ -n "$back" ] || problems="$problems; the driver never asked for ranks on host 2 again"
  [ -n "$first" ] || problems="$problems; no step on 3 ranks after the grow"
  if [ -n "$problems" ]; then
    failed=$((failed + 1))
    echo "FAILED: $letter. host back from its cooldown${problems}"
    grep -v '^step\|^commit' "$work/$letter.log" | tail -n 40
  else
    passed=$((passed + 1))
    echo "ok: $letter. host 2 back from its cooldown joined in place: first step on 3 ranks" \
      "$(echo "$first - $back" | bc) s after the driver saw it back; the survivors'" \
      "processes unchanged; grown from commit $number (loss $loss, as committed); every" \
      "epoch's samples once; final model identical on 3 ranks"
    grep '^chorusrun:' "$work/$letter.log" | sed 's/^/    /'
  fi
}
if wanted h; then grow_back h; fi

# i, j. worlds without MPI (--worlds ucx: the driver starts the ranks through the agent and
# forms their worlds over UCX): a and b again, with every process of host 1 killed at once in i
# (no launcher's daemon there to take the job down)
if wanted i || wanted j || wanted k || wanted l || wanted m; then
  export UCX_NET_DEVICES=eth0 UCX_LOG_LEVEL=error
fi
if wanted i; then
  host_fault i "--worlds ucx: every process of host 1 (rank 0's) killed" \
    "ip netns pids ${prefix}1" --worlds ucx
fi
if wanted j; then
  host_fault j "--worlds ucx: network of host 3 cut (bound ${bound} s)" cut --worlds ucx
fi
# k. h with --worlds ucx: the driver starts host 2's rank again, the others add it at a commit
if wanted k; then grow_back k --worlds ucx; fi
# l. --worlds ucx: host 3 removed from the discovery script's list: the driver ends its rank,
# the others go on in their processes
remove_host_3() { hosts_file 1 2; }
if wanted l; then
  host_fault l "--worlds ucx: host 3 removed by the discovery script" remove_host_3 --worlds ucx
fi

# m. f with --worlds ucx: both deaths met in place, the rank left going on alone
if wanted m; then
  scripted_fault m 1 "--crash-at-step 25 --fail-rank 1 --crash-in-rebuild 2" --worlds ucx
  fault=$(grep -o 'dies at step 25 at [0-9.]*' "$work/m.log" | sed 's/.* at //')
  if grep -q "dies as chorus is formed again" "$work/m.log"; then
    check "$work/m.log" "m. --worlds ucx: a rank killed, another as the next world forms" 1 \
      "${fault:-0}" $status in-place
  else
    failed=$((failed + 1))
    echo "FAILED: m. nobody died as the next world formed"
    tail -n 40 "$work/m.log"
  fi
fi

# g. faults in a row
full_steps() { grep -c '^step .* size 3 ' "$1"; }
if wanted g && [ "${CASES:-}" != "" ]; then
  faults=${FAULTS:-20} done_faults=0 in_place=0 problems=""
  hosts_file 1 2 3
  cooldown=1 extra="--epochs 100000 --stop-file $work/stop"
  start_job "$work/g.log" --min-np 2 --max-np 3
  cooldown=600 extra=""
  seen=0
  # 10 steps on all 3 hosts since the last fault (2 minutes at most)
  ten_full_steps() {
    for _ in $(seq 1 1200); do
      [ "$(full_steps "$work/g.log")" -ge $((seen + 10)) ] && return 0
      sleep 0.1
    done
    problems="$problems; no 10 steps on 3 hosts after fault $done_faults"
    return 1
  }
  while [ $done_faults -lt "$faults" ]; do
    ten_full_steps || break
    done_faults=$((done_faults + 1))
    host=$(( done_faults % 3 + 1 ))
    before=$(grep -c "goes on in the surviving processes" "$work/g.log")
    if [ $((done_faults % 2)) -eq 1 ]; then
      rank_pids $host | xargs -r kill -9
    else
      ip link set "veth-${prefix}$host" down
      sleep $((bound + 3))
      ip link set "veth-${prefix}$host" up
      rank_pids $host | xargs -r kill -9
    fi
    for _ in $(seq 1 300); do
      [ "$(grep -c "goes on in the surviving processes" "$work/g.log")" -gt "$before" ] && break
      sleep 0.1
    done
    [ "$(grep -c "goes on in the surviving processes" "$work/g.log")" -gt "$before" ] &&
      in_place=$((in_place + 1))
    seen=$(full_steps "$work/g.log")
  done
  # the last fault's host back too before the job ends
  [ -n "$problems" ] || ten_full_steps
  touch "$work/stop"
  wait $job
  status=$?
  job_verdicts "$work/g.log" 3 "$status"
  [ "$in_place" -eq "$done_faults" ] ||
    problems="$problems; $in_place of $done_faults faults went on in place"
  epochs=$(grep -c "^epoch [0-9]* ok" "$work/g.log")
  if [ -n "$problems" ]; then
    failed=$((failed + 1))
    echo "FAILED: g. $done_faults faults in a row${problems}"
    grep -v '^step\|^commit' "$work/g.log" | tail -n 60
  else
    passed=$((passed + 1))
    echo "ok: g. $done_faults faults in a row (kill and cut in turn, each host back after 1 s):" \
      "$in_place went on in place, $resumes resumes each from the loss committed, $epochs" \
      "epochs with every sample once, the final model identical on 3 ranks"
    grep '^chorusrun:' "$work/g.log" | grep -c "generation .*: 3 ranks on" |
      sed 's/^/    generations started on 3 hosts: /'
  fi
fi

echo "elastic: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
