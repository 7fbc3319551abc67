#!/bin/sh
# chorusrun --elastic on this machine alone (no root, no emulated hosts): the driver's own rules.
#   1. hosts added: the discovery script goes from localhost:2 to localhost:3; the ranks leave at a
#      commit and the job goes on with 3, from that commit
#   2. a rank killed: localhost is left out for its cooldown (1 s here), then the job starts again
#      on it from the last commit and finishes
#   3. an error of the training script (an exception on rank 1): the job ends at once, naming the
#      rank and the error, without restarting
#   4. --reset-limit 0 and a rank killed: the job ends, naming the limit
#   5. a connection to the driver without the job's token: ignored (the job ends well)
# Usage: check_elastic_local.sh CHORUSRUN PYTHON TRAIN_SCRIPT
set -u
chorusrun=$1
python=$2
script=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '#!/bin/sh\ncat %s/hosts\n' "$work" > "$work/discover"
chmod +x "$work/discover"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CHORUS_TIMEOUT_SECONDS=5
passed=0 failed=0

verdict() { # verdict NAME LOG PROBLEMS
  if [ -z "$3" ]; then
    passed=$((passed + 1)); echo "ok: $1"
    grep '^chorusrun:' "$2" | sed 's/^/    /'
  else
    failed=$((failed + 1)); echo "FAILED: $1$3"
    grep -v '^step\|^commit' "$2" | tail -n 30
  fi
}

resumed_as_committed() { # LOG: the loss after the last resume equals the loss at that commit
  resumed=$(grep -o 'resumed [0-9]* eval=[0-9.e-]*' "$1" | tail -n 1)
  number=$(echo "$resumed" | cut -d' ' -f2)
  [ -n "$resumed" ] && [ "$(echo "$resumed" | sed 's/.*eval=//')" = \
    "$(grep -o "commit $number eval=[0-9.e-]*" "$1" | head -n 1 | sed 's/.*eval=//')" ]
}

trained() { # LOG SIZE [EPOCHS]: the job ended well, every epoch checked, models identical
  grep -q "final size $2 .* identical on every rank" "$1" && ! grep -q WRONG "$1" &&
    [ "$(grep -o 'epoch [0-9]* ok' "$1" | sort -u | wc -l)" -ge "${3:-3}" ]
}

# 1. hosts added
echo localhost:2 > "$work/hosts"
(sleep 3; echo localhost:3 > "$work/hosts") &
timeout 300 "$chorusrun" --elastic --min-np 2 --max-np 3 --host-discovery-script \
  "$work/discover" "$python" "$script" --step-delay 0.05 > "$work/1.log" 2>&1
status=$?
problems=""
[ $status -eq 0 ] || problems="$problems; exit $status"
trained "$work/1.log" 3 || problems="$problems; did not finish well on 3 ranks"
grep -q "hosts added" "$work/1.log" || problems="$problems; the driver saw no new host"
resumed_as_committed "$work/1.log" || problems="$problems; did not resume from the commit"
verdict "1. localhost:2 became localhost:3" "$work/1.log" "$problems"

# 2. a rank killed, its host back after the cooldown
timeout 300 "$chorusrun" --elastic -np 2 -H localhost:2 --blacklist-cooldown-range 1 1 \
  "$python" "$script" --crash-at-step 20 --step-delay 0.02 > "$work/2.log" 2>&1
status=$?
problems=""
[ $status -eq 0 ] || problems="$problems; exit $status"
trained "$work/2.log" 2 || problems="$problems; did not finish well on 2 ranks"
# (under Hydra every rank disconnects at once: mpiexec ends them all when one dies)
grep -q "host localhost failed (.*rank 1 disconnected.*): left out for 1 s" "$work/2.log" ||
  problems="$problems; the killed rank's host was not left out for 1 s"
resumed_as_committed "$work/2.log" || problems="$problems; did not resume from the commit"
verdict "2. a rank killed; its host back after a 1 s cooldown" "$work/2.log" "$problems"

# 3. an error of the script
timeout 300 "$chorusrun" --elastic -np 2 -H localhost:2 "$python" "$script" --fail-at-step 7 \
  > "$work/3.log" 2>&1
status=$?
problems=""
[ $status -ne 0 ] || problems="$problems; exit 0"
grep -q "rank 1 on localhost failed: RuntimeError: a bug in the training script at step 7" \
  "$work/3.log" || problems="$problems; the driver did not name the rank and the error"
[ "$(grep -c 'generation [0-9]*: 2 ranks on' "$work/3.log")" -eq 1 ] ||
  problems="$problems; it restarted"
verdict "3. an exception in the script ends the job" "$work/3.log" "$problems"

# 4. --reset-limit 0
timeout 300 "$chorusrun" --elastic -np 2 -H localhost:2 --reset-limit 0 \
  --blacklist-cooldown-range 1 1 "$python" "$script" --crash-at-step 5 > "$work/4.log" 2>&1
status=$?
problems=""
[ $status -ne 0 ] || problems="$problems; exit 0"
grep -q "reset 0 times (--reset-limit 0): ending it" "$work/4.log" ||
  problems="$problems; no message naming the reset limit"
verdict "4. --reset-limit 0 ends the job at the first failure" "$work/4.log" "$problems"

# 5. a connection that does not present the job's token is dropped: a stranger cannot end it
timeout 300 "$chorusrun" --elastic -np 2 -H localhost:2 --verbose "$python" "$script" \
  --epochs 2 --step-delay 0.05 > "$work/5.log" 2>&1 &
job=$!
for _ in $(seq 1 100); do
  address=$(sed -n 's/.*ranks reach this driver at \([0-9.]*:[0-9]*\).*/\1/p' "$work/5.log")
  [ -n "$address" ] && break
  sleep 0.1
done
"$python" -c 'import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)))
s.sendall(b"hello not-the-token 0 2 stranger 1\nbye failed RuntimeError: stranger\n")
s.close()' "$address"
wait $job
status=$?
problems=""
[ $status -eq 0 ] || problems="$problems; exit $status"
trained "$work/5.log" 2 2 || problems="$problems; did not finish well"
grep -q stranger "$work/5.log" && problems="$problems; the stranger was heard"
verdict "5. a connection without the job's token is dropped" "$work/5.log" "$problems"

echo "elastic-local: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
