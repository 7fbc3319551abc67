#!/bin/sh
# The Python binding as a package: `pip wheel ./python` builds it (no network: the system's
# setuptools), it installs (into a directory of its own, as a virtual environment would hold it),
# and, imported from elsewhere, it finds libchorus through the loader's search (LD_LIBRARY_PATH
# stands in for the installed library's directory), reports the library's version, and runs an
# allreduce at np=2. Skips (77) without pip, setuptools and wheel.
# Usage: check_python_package.sh PYTHON SOURCE_ROOT LIBRARY_DIR "MPIRUN [OPTIONS]"
set -u
python=$1 source=$2 library_dir=$3 mpirun=$4
"$python" -m pip --version >/dev/null 2>&1 && "$python" -c 'import setuptools, wheel' 2>/dev/null ||
    { echo "no pip/setuptools/wheel"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"; rm -rf "$source/python/build" "$source/python/chorus.egg-info"' EXIT
"$python" -m pip wheel --no-deps --no-build-isolation -q -w "$work/wheel" "$source/python" ||
    { echo "FAILED: pip wheel"; exit 1; }
"$python" -m pip install -q --no-deps --target "$work/site" "$work"/wheel/chorus-*.whl 2>&1 |
    grep -v "Running pip as the 'root' user"
cat > "$work/check.py" <<'PY'
import chorus
import chorus.torch as hvd
import torch
assert chorus.__file__.startswith(__import__("sys").argv[1]), chorus.__file__
assert chorus.__version__ == chorus.library_version, (chorus.__version__, chorus.library_version)
hvd.init()
total = hvd.allreduce(torch.ones(3) * (hvd.rank() + 1), op=hvd.Sum, name="package")
assert torch.equal(total, torch.full((3,), float(sum(range(1, hvd.size() + 1))))), total
if hvd.rank() == 0:
    print(f"python package: chorus {chorus.__version__} from {chorus.__file__}: ok")
PY
# shellcheck disable=SC2086
cd "$work" && env -u CHORUS_LIBRARY OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    LD_LIBRARY_PATH="$library_dir" PYTHONPATH="$work/site" $mpirun -np 2 \
    "$python" "$work/check.py" "$work/site"
