"""Where chorusrun --elastic's hosts come from (chorus.launcher.elastic, the driver): the
discovery script run each time, or the fixed hosts (-H, a host file, the SGE or Slurm allocation,
this machine); and the blacklist of hosts whose ranks failed, each left out for a cooldown that
doubles with its failures. Standard library only."""
import subprocess
import time

from . import hosts as hostlib
from .options import UsageError


class Discovery:
    """The hosts the job may use now: from the discovery script (run each time), or fixed (-H,
    a host file, the SGE or Slurm allocation, this machine)."""

    def __init__(self, options, say):
        self.options = options
        self.say = say  # where a failure of the discovery script is told
        self.fixed = None
        self.inside = None
        default = options.slots_per_host or 1
        if options.discovery:
            self.where = f"discovery script {options.discovery}"
            return
        try:
            if options.hosts:
                self.where = "-H"
                self.fixed = hostlib.parse_list(options.hosts, default)
            elif options.hostfile:
                self.where = f"host file {options.hostfile}"
                self.fixed = hostlib.read_file(options.hostfile, default)
            else:
                allocation = hostlib.Allocation.of_environment()
                if allocation is not None:
                    self.where = self.inside = allocation.description
                    self.fixed = allocation.hosts if allocation.hosts is not None \
                        else allocation.slurm_hosts()
                else:
                    self.where = "this machine"
                    self.fixed = {"localhost": options.max_np or options.np or options.min_np}
        except hostlib.HostError as e:
            raise UsageError(f"cannot read the hosts: {e}") from None
        if not self.fixed:
            raise UsageError(f"no hosts in {self.where}")

    def hosts(self):
        """host -> slots, or None when the discovery script failed this time."""
        if self.fixed is not None:
            return dict(self.fixed)
        try:
            result = subprocess.run([self.options.discovery], capture_output=True, text=True,
                                    timeout=30)
        except (OSError, subprocess.TimeoutExpired) as e:
            self.say(f"the discovery script failed: {e}")
            return None
        if result.returncode != 0:
            self.say(f"the discovery script exited with {result.returncode}: "
                f"{result.stderr.strip()[:200]}")
            return None
        try:
            return hostlib.merge(filter(None, (
                hostlib.parse_entry(line, self.options.slots_per_host or 1,
                                    f"discovery script, line {i}")
                for i, line in enumerate(result.stdout.splitlines(), 1))))
        except hostlib.HostError as e:
            self.say(str(e))
            return None


class Blacklist:
    """Hosts whose ranks failed, each left out for a cooldown that doubles with its failures."""

    def __init__(self, cooldown):
        self.cooldown = cooldown
        self.until = {}
        self.failures = {}

    def add(self, host):
        self.failures[host] = self.failures.get(host, 0) + 1
        low, high = self.cooldown
        seconds = min(high, low * 2 ** (self.failures[host] - 1))
        self.until[host] = time.monotonic() + seconds
        return seconds

    def blocked(self, host):
        return self.until.get(host, 0) > time.monotonic()

    def describe(self):
        now = time.monotonic()
        return ", ".join(f"{h} for {t - now:.0f} s more" for h, t in self.until.items()
                         if t > now) or "none"
