"""The MPI launcher's command for a job: which launcher (Open MPI's mpirun or a Hydra mpiexec),
the hosts, oversubscription, binding, the network interfaces and the variables every rank gets,
in the launcher's own options. Fixed jobs run it once; the elastic driver once per generation.
Standard library only."""
import os
import shutil
import socket
import subprocess
import sys

from . import hosts as hostlib
from .options import UsageError, environment_forwards


class Launcher:
    """An MPI launcher and its kind: 'hydra' (MPICH, Intel MPI, MVAPICH) or 'openmpi' (also what
    an unrecognised one is spoken to as)."""

    def __init__(self, path, kind, recognised=True):
        self.path = path
        self.kind = kind
        self.recognised = recognised

    def describe(self):
        if self.kind == "hydra":
            return f"launcher {self.path} (Hydra: MPICH, Intel MPI or MVAPICH)"
        if self.recognised:
            return f"launcher {self.path} (Open MPI)"
        return f"launcher {self.path} (not recognised: spoken to as Open MPI's mpirun)"

    @staticmethod
    def find(explicit, built):
        """--mpirun, else $CHORUS_MPIRUN, else the launcher of the MPI chorus was built with
        (`built`), else mpirun, else mpiexec; asked which it is (--version)."""
        path = explicit or os.environ.get("CHORUS_MPIRUN")
        if not path:
            for candidate in ([built] if built else []) + ["mpirun", "mpiexec"]:
                if shutil.which(candidate):
                    path = candidate
                    break
            else:
                raise UsageError("no MPI launcher found (mpirun or mpiexec): install "
                                 "openmpi-bin or mpich, or name one with --mpirun")
        if shutil.which(path) is None:
            raise UsageError(f"the MPI launcher '{path}' was not found")
        try:
            version = subprocess.run([path, "--version"], capture_output=True, text=True,
                                     stdin=subprocess.DEVNULL, timeout=30)
            text = version.stdout + version.stderr
        except (OSError, subprocess.TimeoutExpired):
            text = ""
        if "HYDRA" in text or "Hydra" in text:
            return Launcher(path, "hydra")
        if "Open MPI" in text or "OpenRTE" in text or "Open RTE" in text:
            return Launcher(path, "openmpi")
        return Launcher(path, "openmpi", recognised=False)


def _resolvable(host):
    if host in ("localhost", socket.gethostname()) or host.replace(".", "").isdigit():
        return True
    try:
        socket.getaddrinfo(host, None)
        return True
    except OSError:
        return False


class Job:
    """What a launch needs besides the launcher: ranks, hosts (host -> slots, or None), a host
    file for Open MPI, binding, interfaces, the variables to forward and set, the program."""

    def __init__(self, options, np, hosts, hostfile=None, inside=None):
        self.options = options
        self.np = np
        self.hosts = hosts
        self.hostfile = hostfile
        self.inside = inside  # "SGE job 12", "Slurm job 7": the allocation it runs in, or None

    def command(self, launcher, extra_settings=()):
        """The launcher's command, a list of words."""
        options = self.options
        words = [launcher.path, "-np", str(self.np)]
        bind = options.bind
        hydra = launcher.kind == "hydra"
        if self.hosts:
            slots = sum(self.hosts.values())
            listed = ",".join(f"{h}:{s}" for h, s in self.hosts.items())
            if self.np > slots:
                raise UsageError(f"asked for {self.np} ranks but the hosts offer {slots} slots "
                                 f"({listed})")
            for host in self.hosts:
                if not _resolvable(host):
                    raise UsageError(f"cannot resolve host '{host}'")
            words += ["-hosts" if hydra else "-H", listed]
        if self.hostfile:
            words += ["--hostfile", self.hostfile]
        if not self.hosts and not self.hostfile and not self.inside:
            cores = os.cpu_count() or 1
            if self.np > cores:
                if not hydra:  # Hydra places any number of ranks on this host; Open MPI must be told
                    words.append("--oversubscribe")
                if options.verbose:
                    _say(f"{self.np} ranks on {cores} cores: oversubscribing")
                bind = "none"
        settings = list(options.settings) + list(extra_settings)
        if hydra:
            interfaces = options.interfaces
            if interfaces:
                # Hydra's own connections on the first interface, MPICH's UCX on all of them.
                words += ["-iface", interfaces.split(",")[0], "-genv", "UCX_NET_DEVICES",
                          interfaces]
            words += ["-bind-to", bind] + (["-map-by", bind] if bind != "none" else [])
            # Hydra passes the whole environment to every rank: only values set here are named.
            for forward in options.forwards:
                if "=" in forward:
                    name, value = forward.split("=", 1)
                    words += ["-genv", name, value]
            for name, value in settings:
                words += ["-genv", name, value]
        else:
            if options.interfaces:
                words += ["--mca", "btl_tcp_if_include", options.interfaces,
                          "--mca", "oob_tcp_if_include", options.interfaces]
            words += ["--bind-to", bind] + (["--map-by", bind] if bind != "none" else [])
            for name in environment_forwards():
                words += ["-x", name]
            for forward in options.forwards:
                words += ["-x", forward]
            for name, value in settings:
                words += ["-x", f"{name}={value}"]
        return words + options.program


def fixed_job(options, launcher):
    """The job of a fixed (not elastic) run: its hosts from -H, a host file, or the
    allocation."""
    hosts = hostlib.parse_list(options.hosts) if options.hosts else {}
    hostfile = None
    if options.hostfile:
        if launcher.kind == "hydra":
            hostlib.merge(hostlib.read_file(options.hostfile).items(), hosts)
        else:
            hostlib.check_open_mpi_file(options.hostfile)
            hostfile = options.hostfile
    np = options.np
    inside = None
    if not hosts and not hostfile:
        allocation = hostlib.Allocation.of_environment()
        if allocation is not None:
            inside = allocation.description
            if allocation.hosts is not None:  # SGE: the granted hosts and slots
                hosts = allocation.hosts
            elif np is not None and allocation.slots is not None and np > allocation.slots:
                raise UsageError(f"asked for {np} ranks but the Slurm allocation has "
                                 f"{allocation.slots} tasks (SLURM_NTASKS)")
            # Slurm: the launcher reads the allocation itself (Open MPI's ras slurm)
            np = np or allocation.slots
    return Job(options, np or 1, hosts or None, hostfile, inside)


def check_program(program):
    if shutil.which(program[0]) is None:
        raise UsageError(f"program '{program[0]}' not found or not executable")


def quoted(words):
    """The command as a shell would take it back, every word in single quotes."""
    return " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)


def _say(message):
    sys.stderr.write(f"chorusrun: {message}\n")
