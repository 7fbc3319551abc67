"""chorusrun, the one launcher of chorus jobs, fixed and elastic: options.py (the option table and
its parser), hosts.py (host lists, host files, SGE and Slurm allocations), command.py (the MPI
launcher's command), elastic.py (the elastic driver) and protocol.py (the driver's line protocol,
which the ranks' chorus.elastic speaks too). Standard library only, and no module of the rest of
the chorus package: tools/mpirun-wrappers/chorusrun imports this package by itself, so that a
job of C programs needs no Python binding."""
import os
import sys

from . import command, elastic
from .options import UsageError, help_text, parse


def main(argv, built_launcher=None):
    """chorusrun with arguments `argv`; `built_launcher` is the launcher of the MPI chorus was
    built with (an installed chorusrun knows it). Returns the exit status, or execs the
    launcher of a fixed job."""
    try:
        options = parse(argv)
        if options.help:
            sys.stdout.write(help_text())
            return 0
        launcher = command.Launcher.find(options.mpirun, built_launcher)
        if options.elastic:
            return elastic.run(options, launcher)
        job = command.fixed_job(options, launcher)
        words = job.command(launcher)
        command.check_program(options.program)
    except UsageError as e:
        sys.stderr.write(f"chorusrun: {e}\n")
        return 2
    if options.verbose or options.dry_run:
        sys.stderr.write(f"chorusrun: {launcher.describe()}\n")
        if job.inside:
            sys.stderr.write(f"chorusrun: inside {job.inside}\n")
        sys.stderr.write(f"chorusrun: {command.quoted(words)}\n")
    if options.dry_run:
        return 0
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvp(words[0], words)
    except OSError as e:
        sys.stderr.write(f"chorusrun: cannot run {words[0]}: {e.strerror}\n")
        return 2
