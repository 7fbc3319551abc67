"""Every option chorusrun --help lists, run with --elastic and without (--dry-run, on this
machine): each is taken (exit 0) or refused naming itself (exit 2), never anything else; and
an option taken by both a fixed and an elastic job has the same effect on the launcher's command
in both (its variables set alike, its launcher words present in both), so that a job does not
change meaning when it becomes elastic.

    check_chorusrun_options.py CHORUSRUN MPIRUN
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

chorusrun, mpirun = sys.argv[1], sys.argv[2]
environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   CHORUS_MPIRUN=mpirun)
work = tempfile.mkdtemp()
hostfile = os.path.join(work, "hosts")
with open(hostfile, "w") as f:
    f.write("localhost slots=2\n")
discover = os.path.join(work, "discover")
with open(discover, "w") as f:
    f.write("#!/bin/sh\necho localhost:2\n")
os.chmod(discover, 0o755)

# A value for each kind of placeholder --help uses.
VALUES = {"N": "2", "MS": "2.5", "S": "30", "HOSTS": "localhost:2", "WHAT": "core",
          "NAME[=VALUE]": "CHORUS_OPTION_TEST=1", "PATH": mpirun, "IF[,IF...]": "lo",
          "LEVEL": "INFO", "SCRIPT": discover, "MIN": "1", "MAX": "2",
          "DIR": os.path.join(work, "store"), "ADDRESS": "127.0.0.1"}
FILES = {"--hostfile": hostfile}


def run(words):
    result = subprocess.run([chorusrun, "--dry-run"] + words + ["true"], capture_output=True,
                            text=True, env=environment, timeout=60)
    command = []
    for line in result.stderr.splitlines():
        if line.startswith("chorusrun: '"):
            command = settings_joined(shlex.split(line[len("chorusrun: "):]))
    return result.returncode, result.stderr, command


def options_of_help():
    """(first name, placeholders) of every option line of --help."""
    text = subprocess.run([chorusrun, "--help"], capture_output=True, text=True,
                          env=environment, timeout=60).stdout
    found = []
    for line in text.splitlines():
        match = re.match(r"^  (-[-\w]+(?:, -[-\w]+)*)((?: [A-Z][A-Z\[\]=,.]*)*)(?:\s|$)", line)
        if match:
            found.append((match.group(1).split(", ")[0], match.group(2).split()))
    return found


def settings_joined(words):
    """`words` with MPICH's `-genv NAME VALUE` written as Open MPI's NAME=VALUE is."""
    joined = []
    i = 0
    while i < len(words):
        if words[i] in ("-genv", "-env") and i + 2 < len(words):
            joined += [words[i], f"{words[i + 1]}={words[i + 2]}"]
            i += 3
        else:
            joined.append(words[i])
            i += 1
    return joined


def difference(words, baseline):
    """The words of `words` that `baseline` lacks, but the elastic driver's own variables (a new
    token and store each run)."""
    added = [w for w in words if not w.startswith("CHORUS_ELASTIC_")]
    for word in baseline:
        if word in added:
            added.remove(word)
    return added


passed = failed = 0


def verdict(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print(f"FAILED: {what}")


listed = options_of_help()
verdict(len(listed) >= 30, f"--help lists {len(listed)} options")
base = {mode: run((["--elastic"] if mode == "elastic" else []) + ["-np", "2"])
        for mode in ("fixed", "elastic")}
for mode, (status, out, command) in base.items():
    verdict(status == 0 and command, f"the {mode} baseline: {status} {out}")

for name, placeholders in listed:
    if name in ("-h", "--dry-run"):
        continue  # --help prints this list; --dry-run is how every run here runs
    values = [FILES.get(name, VALUES.get(p, "1")) for p in placeholders]
    effects = {}
    for mode in ("fixed", "elastic"):
        words = (["--elastic"] if mode == "elastic" else []) + [name] + values
        if name not in ("-np", "--min-np", "--max-np"):
            words += ["-np", "2"]
        status, out, command = run(words)
        if status == 0 and command:
            effects[mode] = (difference(command, base[mode][2]), command)
            print(f"ok: {mode}: {name} {' '.join(values)}: taken")
        elif status == 2 and name in out:
            print(f"ok: {mode}: {name}: refused by name ({out.strip().splitlines()[-1]})")
        else:
            verdict(False, f"{mode}: {name} {' '.join(values)}: exit {status}: {out.strip()}")
            continue
        verdict(True, "")
    if len(effects) == 2:
        fixed_added, _ = effects["fixed"]
        elastic_added, elastic_command = effects["elastic"]
        settings = sorted(w for w in fixed_added if "=" in w)
        elastic_settings = sorted(w for w in elastic_added if "=" in w)
        verdict(settings == elastic_settings,
                f"{name}: sets {settings} in a fixed job, {elastic_settings} in an elastic one")
        # An elastic job reads a host file itself (its hosts become -H): the file is not passed.
        missing = [w for w in fixed_added
                   if w not in elastic_command and not (name == "--hostfile" and
                                                        w in ("--hostfile", hostfile))]
        verdict(not missing, f"{name}: the elastic job's command lacks {missing}")
print(f"chorusrun options: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
