"""The chorus torch.distributed backend started without an MPI launcher, and by torchrun:
init_process_group fails at once with a message saying how to start the job, instead of
training alone or waiting for peers that never come.

    python3 check_torch_launch.py"""
import os
import subprocess
import sys

SCRIPT = ("import chorus.torch, torch.distributed as dist\n"
          "dist.init_process_group(backend='chorus')\n")
LAUNCHER_VARIABLES = ("OMPI_", "PMI_", "PMIX_", "SLURM_", "TORCHELASTIC_")


def run(extra):
    environment = {k: v for k, v in os.environ.items()
                   if not k.startswith(LAUNCHER_VARIABLES)}
    environment.update(extra)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=environment, capture_output=True,
                          text=True, timeout=120)


failures = 0
for label, extra, words in (
        ("no launcher", {}, ["without a launcher", "chorusrun -np"]),
        ("torchrun", {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "WORLD_SIZE": "2",
                      "LOCAL_RANK": "0"}, ["does not run under torchrun", "chorusrun -np"])):
    result = run(extra)
    ok = result.returncode != 0 and all(w in result.stderr for w in words)
    print(f"{'PASS' if ok else 'FAIL'} {label}"
          + ("" if ok else f": exit {result.returncode}, stderr:\n{result.stderr[-1500:]}"))
    failures += not ok
print(f"torch_launch: {2 - failures} passed, {failures} failed")
sys.exit(1 if failures else 0)
