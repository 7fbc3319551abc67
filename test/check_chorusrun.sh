#!/bin/sh
# chorusrun's options and host files, with the launcher MPIRUN (Open MPI's mpirun or a Hydra
# mpiexec). Open MPI: host files go to mpirun as they are; for each file of the table, the
# allocation Open MPI shows (mpirun --display-allocation) must be the same through chorusrun as
# from mpirun itself, and a file chorusrun rejects (naming the line) must be one mpirun rejects
# too. Hydra: chorusrun reads host files of either syntax into -hosts, and a job runs on them.
# Then: --help, unknown options, the variables forwarded, SLURM_NTASKS, and processes started
# without a launcher where torchrun-style variables say there are more.
# Usage: check_chorusrun.sh CHORUSRUN MPIRUN HELLO_ALLREDUCE
set -u
chorusrun=$1
mpirun=$2
hello=$3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 CHORUS_MPIRUN=$mpirun
case "$("$mpirun" --version 2>&1)" in *HYDRA*) kind=hydra ;; *) kind=openmpi ;; esac
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }

# mpirun showing the allocation, for chorusrun's --mpirun.
cat > "$work/mpirun-show" <<SHOW
#!/bin/sh
exec "$mpirun" --display-allocation "\$@"
SHOW
chmod +x "$work/mpirun-show"
allocation() { sed -n '/ALLOCATED NODES/,/=====/p' | grep -v '=====' | sed 's/^[[:space:]]*//'; }

# accept|reject, then the file's lines.
table() {
    cat <<'TABLE'
accept|localhost slots=2
accept|localhost slots=2 max_slots=4
accept|localhost slots = 3
accept|# a comment||localhost slots=2 max-slots=3
accept|localhost slots=2 # trailing comment
reject|localhost slots=two
reject|localhost colour=blue
reject|bad;host slots=1
TABLE
}
number=0
[ "$kind" = openmpi ] || table() { :; }
table | while IFS='|' read -r expect first rest; do
    number=$((number + 1))
    file="$work/hosts.$number"
    printf '%s\n' "$first" > "$file"
    [ -z "$rest" ] || printf '%s\n' "$rest" | tr '|' '\n' >> "$file"
    shown=$(printf '%s' "$first${rest:+ | $rest}")
    direct=$(timeout 60 "$mpirun" --display-allocation --hostfile "$file" -np 1 true 2>&1 </dev/null)
    direct_status=$?
    through=$(timeout 60 "$chorusrun" --mpirun "$work/mpirun-show" --hostfile "$file" -np 1 true 2>&1 </dev/null)
    through_status=$?
    if [ "$expect" = accept ]; then
        if [ $through_status -eq 0 ] && [ $direct_status -eq 0 ] &&
            [ "$(printf '%s\n' "$direct" | allocation)" = "$(printf '%s\n' "$through" | allocation)" ]; then
            echo "ok: '$shown': $(printf '%s\n' "$through" | allocation | tr '\n' ' ')" >> "$work/results"
        else
            echo "FAILED: '$shown': chorusrun $through_status, mpirun $direct_status:" \
                "$(printf '%s\n' "$through" | tail -n 3)" >> "$work/results"
        fi
    elif [ $through_status -eq 2 ] && printf '%s' "$through" | grep -q "line" &&
        [ $direct_status -ne 0 ]; then
        echo "ok: '$shown' rejected: $(printf '%s\n' "$through" | head -n 1)" >> "$work/results"
    else
        echo "FAILED: '$shown': chorusrun $through_status, mpirun $direct_status:" \
            "$(printf '%s\n' "$through" | head -n 2)" >> "$work/results"
    fi
done
# Hydra: each file of either syntax becomes -hosts, a bad line is named, and a job runs.
hydra_table() {
    cat <<'TABLE'
localhost:2,vm:1|localhost:2|vm
localhost:5|localhost slots=2|localhost slots = 3 # comment
localhost:2|# only a comment||localhost:2
reject|localhost:two
reject|localhost slots=two
reject|bad;host:1
TABLE
}
[ "$kind" = hydra ] || hydra_table() { :; }
hydra_table | sed "s/\bvm\b/$(hostname)/g" | while IFS='|' read -r expect first rest; do
    number=$((number + 1))
    file="$work/hosts.$number"
    printf '%s\n' "$first" > "$file"
    [ -z "$rest" ] || printf '%s\n' "$rest" | tr '|' '\n' >> "$file"
    through=$("$chorusrun" --dry-run --hostfile "$file" -np 1 true 2>&1 </dev/null)
    status=$?
    if [ "$expect" = reject ]; then
        if [ $status -eq 2 ] && printf '%s' "$through" | grep -q "line"; then
            echo "ok: '$first' rejected: $(printf '%s\n' "$through" | head -n 1)" >> "$work/results"
        else
            echo "FAILED: '$first' accepted ($status): $through" >> "$work/results"
        fi
    elif printf '%s' "$through" | grep -qF "'-hosts' '$expect'"; then
        echo "ok: '$first${rest:+ | $rest}' -> -hosts $expect" >> "$work/results"
    else
        echo "FAILED: '$first${rest:+ | $rest}': expected -hosts $expect: $through" >> "$work/results"
    fi
done
if [ "$kind" = hydra ]; then
    printf 'localhost:1\n%s slots=2\n' "$(hostname)" > "$work/hosts.run"
    out=$(timeout 60 "$chorusrun" --hostfile "$work/hosts.run" -np 3 "$hello" 2>&1 </dev/null)
    if [ $? -eq 0 ] && printf '%s' "$out" | grep -q "rank 2 of 3"; then
        echo "ok: a job on a host file through Hydra" >> "$work/results"
    else
        echo "FAILED: a job on a host file through Hydra: $out" >> "$work/results"
    fi
fi
cat "$work/results"
passed=$((passed + $(grep -c '^ok' "$work/results")))
failed=$((failed + $(grep -c '^FAILED' "$work/results")))

help=$("$chorusrun" --help 2>&1)
status=$?
if [ $status -eq 0 ] && printf '%s' "$help" | grep -q -- '--hostfile' &&
    ! printf '%s' "$help" | grep -q 'set -eu'; then ok "--help"; else bad "--help (exit $status)"; fi
out=$("$chorusrun" --frobnicate true 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q -- '--frobnicate'; then ok "unknown option named"
else bad "unknown option: $out"; fi
out=$(NCCL_DEBUG=INFO UCX_TLS=tcp OMPI_MCA_btl=self,vader CHORUS_LOG_LEVEL=info \
    "$chorusrun" --dry-run -np 2 -x CHORUS_CYCLE_TIME_MS=3 true 2>&1)
if [ "$kind" = hydra ]; then
    # Hydra passes the whole environment: only a value set on the command line is named.
    if printf '%s' "$out" | grep -q "'-genv' 'CHORUS_CYCLE_TIME_MS' '3'" &&
        ! printf '%s' "$out" | grep -q "'-x'" &&
        printf '%s' "$out" | grep -q "launcher .*(Hydra"; then ok "Hydra named, a set value forwarded"
    else bad "forwarding: $out"; fi
elif printf '%s' "$out" | grep -q "'-x' 'NCCL_DEBUG'" && printf '%s' "$out" | grep -q "'-x' 'UCX_TLS'" &&
    printf '%s' "$out" | grep -q "'-x' 'OMPI_MCA_btl'" &&
    printf '%s' "$out" | grep -q "'-x' 'CHORUS_CYCLE_TIME_MS=3'" &&
    printf '%s' "$out" | grep -q "launcher .*(Open MPI)" &&
    printf '%s' "$out" | grep -q "'-x' 'CHORUS_LOG_LEVEL'"; then ok "NCCL_*, UCX_*, OMPI_MCA_*, CHORUS_* forwarded"
else bad "forwarding: $out"; fi
# The source tree's chorusrun finds a launcher by itself; an installed one prefers its build's.
out=$(env -u CHORUS_MPIRUN "$chorusrun" --dry-run -np 1 true 2>&1)
if [ $? -eq 0 ] && printf '%s' "$out" | grep -q "launcher "; then ok "a launcher found without --mpirun"
else bad "no launcher found: $out"; fi
out=$("$chorusrun" --mpirun /nonexistent/mpirun -np 1 true 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q "/nonexistent/mpirun"; then ok "a missing launcher named"
else bad "missing launcher: $out"; fi
out=$(SLURM_JOB_NODELIST=node1 SLURM_JOB_ID=7 SLURM_NTASKS=2 "$chorusrun" --dry-run -np 4 true 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q SLURM_NTASKS; then ok "-np above SLURM_NTASKS refused"
else bad "SLURM_NTASKS: $out"; fi
out=$("$chorusrun" --dry-run --fusion-threshold-mb 32 --cycle-time-ms 2.5 --disable-cache \
    --timeline-filename /tmp/t.json --log-level FATAL --start-timeout 30 --network-interface eth0 \
    --autotune --autotune-log-file /tmp/a.csv --autotune-steps-per-sample 4 -np 2 true 2>&1)
missing=""
for word in "'CHORUS_FUSION_THRESHOLD=32M'" "'CHORUS_CYCLE_TIME_MS=2.5'" \
    "'CHORUS_CACHE_CAPACITY=0'" "'CHORUS_TIMELINE=/tmp/t.json'" "'CHORUS_LOG_LEVEL=fatal'" "'CHORUS_TIMEOUT_SECONDS=30'" \
    "'CHORUS_AUTOTUNE=on'" "'CHORUS_AUTOTUNE_LOG=/tmp/a.csv'" \
    "'CHORUS_AUTOTUNE_STEPS_PER_TRIAL=4'" "'NCCL_SOCKET_IFNAME=eth0'" "$([ "$kind" = hydra ] && echo "'-iface' 'eth0'" || echo "'btl_tcp_if_include' 'eth0'")"; do
    # Hydra is given each setting as -genv NAME VALUE.
    [ "$kind" = openmpi ] || word=$(printf '%s' "$word" | sed "s/=/' '/")
    printf '%s' "$out" | grep -qF -- "$word" || missing="$missing $word"
done
if [ -z "$missing" ]; then ok "horovodrun's options mapped"
else bad "horovodrun options:$missing"; fi
out=$("$chorusrun" --autotune-bayes-opt-max-samples 20 -np 2 true 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q -- "--autotune-bayes-opt-max-samples"; then
    ok "horovodrun's Bayesian-optimisation option named as unsupported"
else bad "--autotune-bayes-opt-max-samples: $out"; fi
out=$("$chorusrun" --gloo -np 2 true 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q -- "horovodrun's option --gloo"; then
    ok "an unsupported horovodrun option named"; else bad "--gloo: $out"; fi
out=$("$chorusrun" --slots-per-host 2 -np 2 true 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q -- "--slots-per-host is an option of elastic jobs"
then ok "an elastic option without --elastic named"; else bad "--slots-per-host: $out"; fi
out=$("$chorusrun" --elastic --help 2>&1)
if [ $? -eq 0 ] && printf '%s' "$out" | grep -q -- "--host-discovery-script SCRIPT"; then
    ok "chorusrun --elastic --help describes the elastic driver"
else bad "--elastic --help: $out"; fi
out=$("$chorusrun" --elastic --min-np 3 --max-np 2 true 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q -- "--max-np 2 is below --min-np 3"; then
    ok "inconsistent elastic sizes refused"; else bad "--min-np 3 --max-np 2: $out"; fi
out=$("$chorusrun" --cycle-time-ms soon -np 2 true 2>&1)
if [ $? -eq 2 ] && printf '%s' "$out" | grep -q -- "soon"; then ok "a malformed number named"
else bad "--cycle-time-ms soon: $out"; fi
out=$(WORLD_SIZE=2 RANK=0 MASTER_ADDR=localhost "$hello" 2>&1 </dev/null)
if [ $? -ne 0 ] && printf '%s' "$out" | grep -q 'WORLD_SIZE=2' &&
    printf '%s' "$out" | grep -q 'chorusrun -np 2'; then ok "started without a launcher: init fails"
else bad "started without a launcher: $out"; fi
out=$("$hello" 2>&1 </dev/null)
if [ $? -eq 0 ]; then ok "one process alone still runs"; else bad "one process alone: $out"; fi
echo "chorusrun: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
