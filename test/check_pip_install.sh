#!/bin/sh
# pip install of all of chorus from the repository root (pyproject.toml: meson-python runs meson
# and ninja), as a user with a virtual environment and no package index does: pip wheel
# --no-build-isolation (meson-python, meson and ninja from the system; the environment sees the
# system's numpy and torch), then the wheel installed into the environment. With no CHORUS_*,
# PYTHONPATH or LD_LIBRARY_PATH set, and only the environment's bin/ added to the system PATH:
#   - chorus-info and chorus-bench run from it, and chorus-info names the MPI of the build;
#   - the package imports from the environment, with libchorus and the torch backend beside it;
#   - chorusrun -np 2 runs examples/pytorch_train.py, and the ranks end with identical weights;
#   - chorusrun --elastic runs an elastic job (its driver, chorus.launcher, in the package);
#   - the wheel holds every module of python/chorus;
#   - pip install . into a second environment (the same build directory, so no rebuild) works;
#   - pip uninstall chorus leaves nothing of it behind.
# Skips (77) without meson-python or venv.
# Usage: check_pip_install.sh PYTHON SOURCE_ROOT MPI (openmpi or mpich: the build's -Dmpi)
set -u
python=$1 source=$2 mpi=$3
"$python" -c 'import mesonpy, venv' 2>/dev/null || { echo "no meson-python or venv"; exit 77; }
work=$(mktemp -d /tmp/chorus-pip.XXXX)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAILED: $*"; }
# What a user's shell has: the system PATH and the environment's bin/, nothing of ours.
clean() { # clean VENV COMMAND...
    venv=$1; shift
    env -i HOME="$HOME" PATH="$venv/bin:/usr/local/bin:/usr/bin:/bin" \
        OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "$@"
}

"$python" -m venv --system-site-packages "$work/venv" || { echo "venv failed"; exit 1; }
pip="$work/venv/bin/python -m pip"
started=$(date +%s)
# shellcheck disable=SC2086
if ! $pip wheel --no-build-isolation --no-deps -q -w "$work/wheel" \
    --config-settings=builddir="$work/build" --config-settings=setup-args=-Dmpi="$mpi" "$source" > "$work/wheel.log" 2>&1; then
    tail -40 "$work/wheel.log"; echo "FAILED: pip wheel"; exit 1
fi
wheel=$(ls "$work"/wheel/chorus-*.whl)
ok "pip wheel built $(basename "$wheel") in $(( $(date +%s) - started )) s"
# shellcheck disable=SC2086
$pip install -q --no-deps "$wheel" 2>&1 | grep -v "Running pip as the 'root' user"

listing=$("$python" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$wheel")
missing=""
for module in $(cd "$source/python" && find chorus -name '*.py' | sort); do
    printf '%s\n' "$listing" | grep -qx "$module" || missing="$missing $module"
done
for part in chorus/libchorus.so scripts/chorusrun chorus/launcher/elastic.py scripts/chorus-info \
    scripts/chorus-bench scripts/chorus-tune; do
    printf '%s\n' "$listing" | grep -q "$part\$" || missing="$missing $part"
done
if [ -z "$missing" ]; then ok "the wheel holds every module, libchorus and the programs"
else bad "the wheel lacks:$missing"; fi

out=$(clean "$work/venv" chorus-info 2>&1)
case $mpi in mpich) want=MPICH ;; *) want="Open MPI" ;; esac
if printf '%s' "$out" | grep -q "^MPI: $want"; then ok "chorus-info on PATH: $(printf '%s\n' "$out" | grep '^MPI:')"
else bad "chorus-info: $out"; fi
out=$(clean "$work/venv" chorusrun -np 1 chorus-bench -b 1K -e 4K -n 2 -w 1 2>&1)
if [ $? -eq 0 ] && printf '%s' "$out" | grep -q "summary: allreduce"; then ok "chorus-bench through chorusrun"
else bad "chorus-bench: $(printf '%s\n' "$out" | tail -5)"; fi
out=$(cd "$work" && clean "$work/venv" python3 -c '
import chorus, chorus.torch as hvd, chorus.torch.distributed as backend
print(chorus.__file__); print(chorus._library.lib._name); print(backend._extension().__file__)' 2>&1)
if [ $? -eq 0 ] && [ "$(printf '%s\n' "$out" | grep -c "^$work/venv/")" -eq 3 ]; then
    ok "the package, libchorus and the torch backend load from the environment"
else bad "import from the environment: $out"; fi
out=$(cd "$work" && clean "$work/venv" chorusrun -np 2 python3 "$source/examples/pytorch_train.py" \
    --epochs 2 --samples 256 2>&1)
if [ $? -eq 0 ] && printf '%s' "$out" | grep -q "final weights identical on all 2 ranks"; then
    ok "chorusrun -np 2 python3 examples/pytorch_train.py"
else bad "training through chorusrun: $(printf '%s\n' "$out" | grep -v '^--' | head -20)"; fi
out=$(cd "$work" && clean "$work/venv" chorusrun --elastic -np 2 -H localhost:2 python3 \
    "$source/test/python/elastic_train.py" --epochs 1 --step-delay 0 2>&1)
if [ $? -eq 0 ] && printf '%s' "$out" | grep -q "final size 2 .* identical on every rank"; then
    ok "chorusrun --elastic -np 2 python3 test/python/elastic_train.py"
else bad "elastic training through chorusrun: $(printf '%s\n' "$out" | grep -v '^--' | tail -20)"; fi

"$python" -m venv --system-site-packages "$work/venv2"
started=$(date +%s)
if "$work/venv2/bin/python" -m pip install -q --no-build-isolation --no-deps \
    --config-settings=builddir="$work/build" --config-settings=setup-args=-Dmpi="$mpi" "$source" > "$work/install.log" 2>&1 &&
    (cd "$work" && clean "$work/venv2" python3 -c 'import chorus.torch as hvd; hvd.init(); hvd.shutdown()'); then
    ok "pip install . in $(( $(date +%s) - started )) s, then import chorus.torch"
else tail -20 "$work/install.log"; bad "pip install ."; fi

before=$(cd "$work/venv" && find . | sort)
# shellcheck disable=SC2086
$pip uninstall -y -q chorus 2>&1 | grep -v "Running pip as the 'root' user"
left=$(cd "$work/venv" && find . | grep -i chorus | head -20)
if [ -z "$left" ] && [ "$(printf '%s\n' "$before" | grep -ci chorus)" -gt 5 ]; then
    ok "pip uninstall chorus removed all $(printf '%s\n' "$before" | grep -ci chorus) of its files"
else bad "left after pip uninstall: $left"; fi
echo "pip install: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
