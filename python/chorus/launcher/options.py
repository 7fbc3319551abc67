"""chorusrun's options: one table, from which the parser, --help and the test of every option
(test/check_chorusrun_options.py) are made, for fixed and elastic jobs alike. Standard library
only."""
import os
import re
import textwrap

FIXED, ELASTIC = "fixed", "elastic"


class UsageError(Exception):
    """A command line chorusrun cannot run, with the reason (exit status 2)."""


def _number(kind, minimum):
    def check(option, text):
        try:
            value = kind(text)
        except ValueError:
            raise UsageError(f"{option} needs a number, not '{text}'") from None
        if value < minimum:
            raise UsageError(f"{option} must be at least {minimum}, not {text}")
        return value
    return check


def _text(pattern=None, why=""):
    def check(option, text):
        if pattern is not None and not re.match(pattern, text):
            raise UsageError(f"{option}: {why}, not '{text}'")
        return text
    return check


def _log_level(option, text):
    level = text.lower()  # FATAL, Horovod's most severe level, the library reads as error
    if level not in ("trace", "debug", "info", "warning", "error", "fatal"):
        raise UsageError(f"{option} must be TRACE, DEBUG, INFO, WARNING, ERROR or FATAL, not "
                         f"'{text}'")
    return level


def _choice(*choices):
    def check(option, text):
        if text not in choices:
            raise UsageError(f"{option} must be {', '.join(choices[:-1])} or {choices[-1]}, "
                             f"not '{text}'")
        return text
    return check


class Option:
    """One option: its names, the values it takes (each checked), the jobs it is for (FIXED,
    ELASTIC or both; an elastic one without --elastic is refused by name unless it
    `implies_elastic`), and what it does: `store` sets that attribute of the parsed Options
    (appending where `repeat`), `setting` forwards a CHORUS_* (or other) variable to every rank
    with the value made from the checked values."""

    def __init__(self, names, help, metavar="", checks=(), store=None, setting=None,
                 jobs=(FIXED, ELASTIC), implies_elastic=False, repeat=False, constant=True):
        self.names = names
        self.help = help
        self.metavar = metavar
        self.checks = checks
        self.store = store
        self.setting = setting
        self.jobs = jobs
        self.implies_elastic = implies_elastic
        self.repeat = repeat
        self.constant = constant  # what a flag (no values) stores

    @property
    def name(self):
        return self.names[0]


_positive = _number(int, 1)
_whole = _number(int, 0)
_seconds = _number(float, 0)
_file = _text(r"^\S+$", "a file name without spaces, please")

# The table. Sections are printed in this order by --help.
SECTIONS = [
    ("Where and how many", [
        Option(("-np", "-n", "--np", "--num-proc"), "ranks (default: the allocation's slots, "
               "else 1; elastic: at most, and at least unless --min-np)", "N", (_positive,),
               store="np"),
        Option(("-H", "--hosts", "--host"), "hosts and their slots, host:slots,... (a host "
               "alone has 1 slot)", "HOSTS", (_text(r"^\S+$", "host:slots,..."),),
               store="hosts"),
        Option(("--hostfile", "-hostfile"), "a host file: Open MPI's syntax (host slots=N), or "
               "host:N for Hydra", "FILE", (_text(r".+", "a file"),), store="hostfile"),
        Option(("--bind",), "bind each rank to a core, socket or NUMA node, or none (default)",
               "WHAT", (_choice("core", "socket", "numa", "none"),), store="bind"),
        Option(("-x",), "forward NAME (or set NAME=VALUE) to every rank; again for more",
               "NAME[=VALUE]", (_text(r"^[A-Za-z_][A-Za-z0-9_]*(=.*)?$", "NAME or NAME=VALUE"),),
               store="forwards", repeat=True),
        Option(("--mpirun",), "the MPI launcher (default: $CHORUS_MPIRUN, the one chorus was "
               "built with, mpirun, mpiexec)", "PATH", (_text(r".+", "a path"),),
               store="mpirun"),
        Option(("--network-interface",), "MPI's TCP traffic and NCCL's sockets on these "
               "interfaces", "IF[,IF...]", (_text(r"^[A-Za-z0-9.,_:/-]+$", "an interface"),),
               store="interfaces", setting=lambda v: ("NCCL_SOCKET_IFNAME", v[0])),
        Option(("--dry-run",), "print the launcher's command (elastic: the first generation's) "
               "and exit", store="dry_run"),
        Option(("-v", "--verbose"), "say which launcher was found and what runs",
               store="verbose"),
        Option(("-h", "--help"), "this text", store="help"),
    ]),
    ("horovodrun's everyday options, as chorus's parameters", [
        Option(("--fusion-threshold-mb",), "CHORUS_FUSION_THRESHOLD in MiB", "N", (_seconds,),
               setting=lambda v: ("CHORUS_FUSION_THRESHOLD", f"{v[0]:g}M")),
        Option(("--cycle-time-ms",), "CHORUS_CYCLE_TIME_MS", "MS", (_seconds,),
               setting=lambda v: ("CHORUS_CYCLE_TIME_MS", f"{v[0]:g}")),
        Option(("--cache-capacity",), "CHORUS_CACHE_CAPACITY", "N", (_whole,),
               setting=lambda v: ("CHORUS_CACHE_CAPACITY", str(v[0]))),
        Option(("--disable-cache",), "CHORUS_CACHE_CAPACITY=0",
               setting=lambda v: ("CHORUS_CACHE_CAPACITY", "0")),
        Option(("--timeline-filename",), "CHORUS_TIMELINE: rank 0 writes a Chrome trace",
               "FILE", (_file,), setting=lambda v: ("CHORUS_TIMELINE", v[0])),
        Option(("--autotune",), "CHORUS_AUTOTUNE=on: fusion and cycle settings tuned during "
               "the first steps (docs/tuning.md)", setting=lambda v: ("CHORUS_AUTOTUNE", "on")),
        Option(("--autotune-log-file",), "CHORUS_AUTOTUNE_LOG", "FILE", (_file,),
               setting=lambda v: ("CHORUS_AUTOTUNE_LOG", v[0])),
        Option(("--autotune-steps-per-sample",), "CHORUS_AUTOTUNE_STEPS_PER_TRIAL", "N",
               (_whole,), setting=lambda v: ("CHORUS_AUTOTUNE_STEPS_PER_TRIAL", str(v[0]))),
        Option(("--log-level",), "CHORUS_LOG_LEVEL (FATAL: error)", "LEVEL",
               (_log_level,), setting=lambda v: ("CHORUS_LOG_LEVEL", v[0])),
        Option(("--start-timeout",), "CHORUS_TIMEOUT_SECONDS (chorus's bound on every wait, "
               "start-up too)", "S", (_seconds,),
               setting=lambda v: ("CHORUS_TIMEOUT_SECONDS", f"{v[0]:g}")),
    ]),
    ("Elastic jobs (docs/elastic.md)", [
        Option(("--elastic",), "run an elastic job (hvd.elastic): the job goes on when hosts "
               "fail, come or go", store="elastic", jobs=(ELASTIC,), implies_elastic=True),
        Option(("--min-np",), "fewest ranks to run with (default: -np, else 1)", "N",
               (_positive,), store="min_np", jobs=(ELASTIC,), implies_elastic=True),
        Option(("--max-np",), "most ranks to run with (default: -np; neither: as many as "
               "there are slots)", "N", (_positive,), store="max_np", jobs=(ELASTIC,),
               implies_elastic=True),
        Option(("--host-discovery-script",), "prints the usable hosts, a line each: host or "
               "host:slots; run every --discovery-interval", "SCRIPT",
               (_text(r".+", "a program"),), store="discovery", jobs=(ELASTIC,),
               implies_elastic=True),
        Option(("--slots-per-host", "--slots"), "slots of a discovered host without :slots "
               "(default 1)", "N", (_positive,), store="slots_per_host", jobs=(ELASTIC,)),
        Option(("--reset-limit",), "end the job after this many resets", "N", (_whole,),
               store="reset_limit", jobs=(ELASTIC,)),
        Option(("--restart-on-failure",), "after a failure, restart every rank from the "
               "commit store (default under Open MPI: the surviving processes go on)",
               store="restart_on_failure", jobs=(ELASTIC,)),
        Option(("--worlds",), "ucx: the driver starts every rank itself (through "
               "OMPI_MCA_plm_rsh_agent or ssh on other hosts) and forms worlds without MPI, so "
               "that the surviving processes go on after a lost or cut-off host (default mpi: "
               "each generation under the MPI launcher)", "KIND", (_choice("mpi", "ucx"),),
               store="worlds", jobs=(ELASTIC,)),
        Option(("--elastic-timeout",), "end the job after this long with fewer than --min-np "
               "slots (default 600)", "S", (_seconds,), store="elastic_timeout",
               jobs=(ELASTIC,)),
        Option(("--blacklist-cooldown-range",), "a failed host is left out this long, doubling "
               "with each failure (default 30 300)", "MIN MAX", (_seconds, _seconds),
               store="cooldown", jobs=(ELASTIC,)),
        Option(("--elastic-store",), "where commits survive the ranks (default "
               "/dev/shm/chorus-elastic-<id>)", "DIR", (_text(r".+", "a directory"),),
               store="store", jobs=(ELASTIC,)),
        Option(("--driver-address",), "the address the ranks reach the driver at (default: "
               "the route to the first host)", "ADDRESS", (_text(r"^\S+$", "an address"),),
               store="driver_address", jobs=(ELASTIC,)),
        Option(("--discovery-interval",), "seconds between runs of the discovery script "
               "(default 1)", "S", (_seconds,), store="discovery_interval", jobs=(ELASTIC,)),
    ]),
]
OPTIONS = [option for _, options in SECTIONS for option in options]
_BY_NAME = {name: option for option in OPTIONS for name in option.names}

# horovodrun's options chorus does not take (chorus runs over MPI), refused by name; a name
# ending in '*' stands for every option that starts so.
REFUSED = ("--gloo", "--mpi", "--autotune-*", "--mpi-args", "--tcp", "--binding-args",
           "--num-nccl-streams", "--hierarchical-*", "--config-file", "--ssh-port",
           "--ssh-identity-file", "--output-filename", "--prefix-output-with-timestamp",
           "--gloo-timeout-seconds", "--check-build", "--disable-ssh-check", "--no-stall-check",
           "--stall-check-*", "--mpi-threads-disable", "--nics", "--timeline-mark-cycles",
           "--no-hierarchical-*", "--cpu-operations", "--gpu-operations")


def _refused(word):
    return any(word == name or (name.endswith("*") and word.startswith(name[:-1]))
               for name in REFUSED)


class Options:
    """A parsed command line."""

    def __init__(self):
        self.np = self.hosts = self.hostfile = self.mpirun = self.interfaces = None
        self.bind = "none"
        self.forwards = []     # NAME or NAME=VALUE, for every rank
        self.settings = []     # (NAME, VALUE) the options set, for every rank
        self.dry_run = self.verbose = self.help = self.elastic = False
        self.restart_on_failure = False
        self.worlds = "mpi"
        self.min_np = self.max_np = self.discovery = self.slots_per_host = None
        self.reset_limit = self.store = self.driver_address = None
        self.elastic_timeout = 600.0
        self.cooldown = (30.0, 300.0)
        self.discovery_interval = 1.0
        self.program = []
        self.given = []        # the options given, in order, for messages


def parse(argv):
    """Options from chorusrun's arguments (without the program name); UsageError when they
    cannot run. The options come first; the first word that is not one starts the program."""
    options = Options()
    words = list(argv)
    elastic_only = []
    while words:
        word = words.pop(0)
        if word == "--":
            options.program = words
            break
        if not word.startswith("-") or word == "-":
            options.program = [word] + words
            break
        option = _BY_NAME.get(word)
        if option is None:
            if _refused(word):
                raise UsageError(f"horovodrun's option {word} is not supported by chorusrun "
                                 "(chorus runs over MPI; see chorusrun --help for what is)")
            raise UsageError(f"unknown option {word} (see chorusrun --help)")
        values = []
        for check in option.checks:
            if not words:
                raise UsageError(f"{word} needs {option.metavar}")
            values.append(check(word, words.pop(0)))
        options.given.append(word)
        if option.implies_elastic:
            options.elastic = True
        elif option.jobs == (ELASTIC,):
            elastic_only.append(word)
        if option.setting is not None:
            options.settings.append(option.setting(values))
        if option.store is not None:
            value = (values[0] if len(values) == 1 else tuple(values)) if values \
                else option.constant
            if option.repeat:
                getattr(options, option.store).append(value)
            else:
                setattr(options, option.store, value)
    if options.help:
        return options
    if elastic_only and not options.elastic:
        raise UsageError(f"{elastic_only[0]} is an option of elastic jobs: add --elastic")
    if not options.program:
        raise UsageError("no program given (usage: chorusrun -np N program [args])")
    if options.cooldown[1] < options.cooldown[0]:
        raise UsageError(f"--blacklist-cooldown-range: the maximum {options.cooldown[1]:g} is "
                         f"below the minimum {options.cooldown[0]:g}")
    if options.elastic and sum(x is not None
                               for x in (options.discovery, options.hosts, options.hostfile)) > 1:
        raise UsageError("give one of --host-discovery-script, -H and --hostfile")
    if options.elastic:
        # -np alone: that many ranks at most; neither -np nor --max-np: as many as there are
        options.min_np = options.min_np or options.np or 1
        options.max_np = options.max_np or options.np
        if options.max_np is not None and options.max_np < options.min_np:
            raise UsageError(f"--max-np {options.max_np} is below --min-np {options.min_np}")
    return options


HEADER = """\
chorusrun — starts a chorus training job with the right MPI launcher command: on this machine,
on a host list or host file, inside an SGE parallel-environment job or a Slurm allocation, with
Open MPI's mpirun or an MPICH-family Hydra mpiexec (MPICH, Intel MPI, MVAPICH); and, with
--elastic, an elastic job that goes on when hosts fail, come or go.

  chorusrun [options] program [args...]
  chorusrun --elastic [--min-np N] [--max-np N] [--host-discovery-script SCRIPT] [options]
            program [args...]
"""

FOOTER = """\
- Without hosts it runs on this machine, oversubscribing when N exceeds the cores. Inside SGE
  ($PE_HOSTFILE and $JOB_ID) it uses the granted hosts and slots; inside Slurm
  ($SLURM_JOB_NODELIST) the allocation (-np at most $SLURM_NTASKS).
- A host file goes to Open MPI's mpirun as it is, after chorusrun rejected a line Open MPI would
  not take, naming it; for Hydra chorusrun reads either syntax into -hosts.
- CHORUS_*, NCCL_*, UCX_* and OMPI_MCA_* variables and those a training process needs (PATH,
  LD_LIBRARY_PATH, PYTHONPATH, CUDA_VISIBLE_DEVICES, OMP_NUM_THREADS) reach every rank.
- Every option works for fixed and elastic jobs alike, except those marked [elastic], which are
  for elastic jobs only (--elastic, --min-np, --max-np and --host-discovery-script start one).
  horovodrun's other options (--gloo, ...) are refused by name.
- Elastic: the job runs as many ranks as there are usable slots, between --min-np and
  --max-np; a rank that disappears (killed, crashed) or goes silent after another reported a
  failed collective has failed, and its host is left out for a cooldown; the job starts again
  on the others from the last commit, and takes in hosts that come at the next commit.
"""


def help_text():
    lines = [HEADER]
    for title, options in SECTIONS:
        lines.append(f"{title}:")
        for option in options:
            left = f"  {', '.join(option.names)} {option.metavar}".rstrip()
            mark = " [elastic]" if option.jobs == (ELASTIC,) else ""
            text = textwrap.wrap(option.help + mark, 96 - 33)
            if len(left) > 32:
                lines.append(left)
                left = ""
            lines.append(f"{left:<33}{text[0]}")
            lines += [" " * 33 + more for more in text[1:]]
        lines.append("")
    lines.append(FOOTER)
    return "\n".join(lines)


def environment_forwards(environment=None):
    """The variables of this environment that reach every rank by name (Open MPI: -x NAME)."""
    environment = os.environ if environment is None else environment
    names = sorted(n for n in environment
                   if re.match(r"^(CHORUS|NCCL|UCX|OMPI_MCA)_[A-Za-z0-9_]*$", n))
    names += [n for n in ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "CUDA_VISIBLE_DEVICES",
                          "OMP_NUM_THREADS", "OMPI_ALLOW_RUN_AS_ROOT",
                          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM") if n in environment]
    return names
