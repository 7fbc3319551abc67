"""Where a job's ranks run: host lists (-H), host files (Open MPI's syntax and Hydra's), an SGE
parallel environment's $PE_HOSTFILE and a Slurm allocation, read once for fixed and elastic jobs.
Host names are checked against [A-Za-z0-9._-], so that a hostile name cannot reach a shell."""
import os
import re
import subprocess

from .options import UsageError

HOST_NAME = re.compile(r"^[A-Za-z0-9._][A-Za-z0-9._-]*$")

# The keywords Open MPI's host-file reader takes (orte/util/hostfile), and whether each needs a
# whole number.
OPEN_MPI_KEYWORDS = {"slots": True, "count": True, "cpu": True, "max_slots": True,
                     "max-slots": True, "slots_max": True, "slots-max": True, "port": True,
                     "boards": True, "sockets": True, "sockets_per_board": True, "cores": True,
                     "cores_per_socket": True, "username": False, "user": False}


class HostError(UsageError):
    """A host list, host file or allocation that cannot be used, with where and why."""


def check_name(name, where):
    if not HOST_NAME.match(name):
        raise HostError(f"{where}: invalid host name '{name}'")
    return name


def merge(pairs, hosts=None):
    """host -> slots, in first-seen order, a host named twice getting both counts."""
    hosts = {} if hosts is None else hosts
    for name, slots in pairs:
        hosts[name] = hosts.get(name, 0) + slots
    return hosts


def parse_entry(text, default_slots, where):
    """(host, slots) of `host`, `host:slots` or Open MPI's `host slots=N ...`; None for a blank
    or comment line."""
    text = text.split("#", 1)[0].strip()
    text = re.sub(r"\s*=\s*", "=", text)
    if not text:
        return None
    name, slots = text, default_slots
    if ":" in text.split()[0]:
        name, count = text.split()[0].split(":", 1)
        if not count.isdigit():
            raise HostError(f"{where}: '{count}' is not a whole number of slots")
        slots = int(count)
    elif " " in text:
        name, *settings = text.split()
        for setting in settings:
            key, _, count = setting.partition("=")
            if key in ("slots", "count", "cpu"):
                if not count.isdigit():
                    raise HostError(f"{where}: '{count}' is not a whole number of slots")
                slots = int(count)
    return check_name(name, where), slots


def parse_list(text, default_slots=1, where="-H"):
    """-H host:slots,host,...: host -> slots."""
    return merge(filter(None, (parse_entry(item, default_slots, where)
                               for item in text.split(",") if item.strip())))


def read_file(path, default_slots=1):
    """A host file of either syntax (host, host:count, or Open MPI's host slots=count ...):
    host -> slots. Keywords other than the slot counts are ignored (Hydra has no use for them)."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise HostError(f"cannot read host file {path}: {e.strerror}") from None
    return merge(filter(None, (parse_entry(line, default_slots, f"host file {path}, line {n}")
                               for n, line in enumerate(lines, 1))))


def check_open_mpi_file(path):
    """Rejects what Open MPI's host-file reader would not take, naming the line: each line is a
    host name and then keyword=value settings (spaces around '=' allowed); '#' starts a comment.
    Open MPI then reads the file itself, by its own rules."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        raise HostError(f"cannot read host file {path}: {e.strerror}") from None
    for number, line in enumerate(lines, 1):
        where = f"host file {path}, line {number}"
        text = re.sub(r"\s*=\s*", "=", line.split("#", 1)[0]).split()
        if not text:
            continue
        check_name(text[0], where)
        for setting in text[1:]:
            key, equals, value = setting.partition("=")
            if not equals:
                raise HostError(f"{where}: '{setting}' is not keyword=value")
            if key not in OPEN_MPI_KEYWORDS:
                raise HostError(f"{where}: unknown keyword '{key}' (Open MPI takes slots, "
                                "max_slots, count, cpu, port, username, ...)")
            if OPEN_MPI_KEYWORDS[key] and not value.isdigit():
                raise HostError(f"{where}: {key}={value} is not a whole number")
            if not OPEN_MPI_KEYWORDS[key] and not value:
                raise HostError(f"{where}: empty {key}")


class Allocation:
    """The hosts a batch system granted the job: SGE's parallel environment or Slurm's
    allocation, or none. `hosts` (host -> slots) is None where the launcher reads the
    allocation itself (Slurm under Open MPI's mpirun)."""

    def __init__(self, description, hosts, slots):
        self.description = description
        self.hosts = hosts
        self.slots = slots  # NSLOTS or SLURM_NTASKS: the default number of ranks

    @staticmethod
    def of_environment(environment=None):
        environment = os.environ if environment is None else environment
        if environment.get("PE_HOSTFILE") and environment.get("JOB_ID"):
            path = environment["PE_HOSTFILE"]
            hosts = {}
            try:
                with open(path) as f:
                    for line in f:  # host slots queue processors; a host may appear twice
                        words = line.split()
                        if len(words) >= 2 and words[1].isdigit():
                            merge([(check_name(words[0], f"SGE's PE_HOSTFILE {path}"),
                                    int(words[1]))], hosts)
            except OSError:
                raise HostError(f"SGE's PE_HOSTFILE {path} cannot be read") from None
            return Allocation(f"SGE job {environment['JOB_ID']}", hosts,
                              _whole(environment.get("NSLOTS")))
        if environment.get("SLURM_JOB_NODELIST"):
            return Allocation(f"Slurm job {environment.get('SLURM_JOB_ID', '?')}", None,
                              _whole(environment.get("SLURM_NTASKS")))
        return None

    def slurm_hosts(self, environment=None):
        """Slurm's nodes and tasks per node (scontrol expands the node list): host -> slots."""
        environment = os.environ if environment is None else environment
        try:
            names = subprocess.run(["scontrol", "show", "hostnames",
                                    environment["SLURM_JOB_NODELIST"]], capture_output=True,
                                   text=True, check=True).stdout.split()
        except (OSError, subprocess.CalledProcessError) as e:
            raise HostError(f"cannot expand Slurm's node list: {e}") from None
        counts = []
        for part in environment.get("SLURM_TASKS_PER_NODE", "").split(","):
            match = re.match(r"^(\d+)(?:\(x(\d+)\))?$", part)
            if match:
                counts += [int(match.group(1))] * int(match.group(2) or 1)
        counts += [1] * (len(names) - len(counts))
        return merge((check_name(n, "Slurm's node list"), c) for n, c in zip(names, counts))


def _whole(text):
    return int(text) if text is not None and text.isdigit() else None
