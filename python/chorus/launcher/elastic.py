"""chorusrun --elastic: runs an elastic training job (chorus.torch.elastic, Horovod's hvd.elastic)
on the hosts there are, and brings it to a new set of hosts when one fails or hosts are added or
removed.

- The hosts: the discovery script's lines (`host` or `host:slots`, slots default
  --slots-per-host, else 1), run every --discovery-interval seconds; or fixed: -H, a host file,
  the SGE or Slurm allocation, else this machine.
- The job runs as many ranks as there are usable slots, at least --min-np and at most --max-np.
- Each generation of the job is one launch of the MPI launcher (command.py, as a fixed job's) on
  min(slots, --max-np) ranks, with CHORUS_ELASTIC_DRIVER (TOKEN@ADDRESS:PORT: this driver, and
  the token its ranks present; protocol.py), CHORUS_ELASTIC_STORE (where commits survive the
  ranks) and CHORUS_ELASTIC_GENERATION.
- A rank that disappears without saying goodbye (killed, crashed), or that cannot be heard once
  another rank reported a failed collective (a cut network), has failed: its host is left out for
  a cooldown (doubling with each failure of the host), and the job goes on on the others from the
  last commit: in the surviving processes where it can (Open MPI, the other ranks reported the
  failed collective and wait for the driver's word: the driver tells the living at once who
  died, then names the ranks that go on, those on hosts where none died or went silent, and
  tells the others to leave), else by starting the job again (--restart-on-failure always
  does).
- Hosts added (or back from their cooldown) or removed: the driver tells the ranks, which raise
  HostsUpdatedInterrupt at their next commit and leave together; the job starts again with them.
- Fewer than --min-np slots for --elastic-timeout seconds: the job ends, saying so. More than
  --reset-limit restarts: the job ends. An exception of the training script (not a failed
  collective) ends the job at once, naming the rank.
With --worlds ucx a generation has no MPI launcher: the driver starts every rank itself and forms
their worlds over UCX (elastic_worlds.py), so that a lost host's daemon or a cut host cannot
take the job down. Open MPI's mpirun runs with orte_enable_recovery, so that ranks on healthy
hosts outlive a failed one until the driver ends the generation; under Hydra (MPICH), whose
mpiexec ends the job when a process dies, the host whose ranks disconnected first is taken as
the failed one. Standard library only."""
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid

from . import protocol
from .command import Job, quoted
from .elastic_hosts import Blacklist, Discovery
from .options import UsageError

STARTED = time.monotonic()
# A failed rank's host-mates die within this of it; later disconnections are the launcher's.
SAME_FAILURE_S = 0.25
# After a rank reports a failed collective: how long the others have to report too (the first
# rank to notice a failure stops the others at once, so they report within milliseconds); one
# that does not is unreachable (a cut network) or frozen.
REPORT_GRACE_S = 1.0
# A generation's launcher gets this long to end after SIGTERM (it may wait for a host it cannot
# reach), and ranks this long to end after one reported an error of the script.
KILL_GRACE_S = 2.0
SCRIPT_ERROR_GRACE_S = 5.0
# From rank 0's word that the ranks grow in place (at their commit) to the grown world's first
# sync: a new process starts Python, imports the script's modules (torch: seconds) and joins.
# Past it the generation ends and the job starts again: Open MPI returns a failed spawn to rank
# 0 only and leaves the other ranks in MPI_Comm_spawn.
GROW_DEADLINE_S = 60.0


def say(message):
    # one write per line: the ranks write to the same terminal or file
    sys.stderr.write(f"chorusrun: [{time.monotonic() - STARTED:7.1f} s] {message}\n")
    sys.stderr.flush()


class JobEnded(Exception):
    """The elastic job ends, for the reason given, with `status`."""

    def __init__(self, message, status=1):
        super().__init__(message)
        self.status = status


def die(message, status=1):
    raise JobEnded(message, status)


class Rank:
    def __init__(self, connection):
        self.connection = connection
        self.buffer = b""
        self.rank = self.host = None
        self.said = None         # done | restart | failed
        self.lost = None         # in-place | restart: reported a failed collective, waits
        self.retired = False     # told to leave after the job went on without its host
        self.reason = ""
        self.closed_at = None    # when its connection ended
        self.process = None      # --worlds ucx: the process the driver started for it
        self.shut = False        # --worlds ucx: chorus shut down there as its process ends


def advertised_address(options, hosts):
    if options.driver_address:
        return options.driver_address
    first = next(iter(hosts))
    try:
        probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        probe.connect((first, 9))  # no packet is sent: this only picks the route
        address = probe.getsockname()[0]
        probe.close()
        return address
    except OSError:
        return socket.getfqdn()


class Generation:
    """One run of the job on a fixed set of hosts, watched until it ends."""

    # Why a death while the ranks form chorus again ends the generation.
    rebuild_broken = ("the others wait for it in MPI (MPI_Comm_create_group, or MPI_Comm_spawn "
                      "growing) and cannot be told")

    def rebuild_survivable(self):
        """Whether a death while the ranks form chorus again after a failure can be met as a
        failure like any other (the ranks that go on report it and form again without it)."""
        return False

    def __init__(self, driver, number, placement):
        self.driver = driver
        self.number = number
        self.placement = placement  # host -> slots used
        self.np = sum(placement.values())
        self.ranks = []
        self.failure_at = None
        self.failure_kind = None  # disconnected | reported
        self.close_at = None
        self.cause = None
        self.notified = None
        self.update_line = None
        # The job may go on in the surviving processes: Open MPI's mpirun keeps them (recovery
        # on, see launch); Hydra ends every rank when one dies.
        self.in_place = driver.launcher.kind == "openmpi" and not driver.options.restart_on_failure
        self.in_place_resets = 0
        # Between the word to go on in place and the new rank 0's "resumed" (or, growing, rank
        # 0's "growing" and "grown"): the ranks form chorus again, and a death now leaves the
        # others waiting in MPI for the dead.
        self.rebuilding = False
        # Where ranks can be added in place: the hosts this launch's mpirun holds, with their
        # slots (Open MPI 4.1 spawns onto those alone), and of those the hosts whose ranks were
        # killed while the job went on in place, whose daemons may live (a host cut off or
        # gone whole may not have one: it comes back by a restart).
        self.allocation = dict(placement)
        self.daemons_alive = set()
        self.removing = set()  # hosts whose ranks the driver ended on purpose (removed hosts)
        self.grow_hosts = None   # the hosts of the grow asked for, a host once per rank
        self.grow_started = None  # rank 0's word that the ranks began growing

    def launch(self):
        driver = self.driver
        job = Job(driver.options, self.np, self.placement, inside=driver.discovery.inside)
        environment = dict(os.environ)
        # Open MPI lets the ranks on healthy hosts outlive a failed one until the driver ends
        # the generation.
        environment.setdefault("OMPI_MCA_orte_enable_recovery", "1")
        command = job.command(driver.launcher, self.settings())
        if driver.options.verbose:
            say("launching: " + quoted(command))
        self.process = subprocess.Popen(command, env=environment, start_new_session=True)

    def settings(self):
        """The variables the ranks of this generation get besides the options' (they reach
        every rank through the launcher, also on other hosts)."""
        return [(protocol.ENVIRONMENT, protocol.driver_address(self.driver.token,
                                                               self.driver.address)),
                ("CHORUS_ELASTIC_STORE", self.driver.store),
                ("CHORUS_ELASTIC_GENERATION", str(self.number))]

    def accept(self):
        connection, _ = self.driver.listener.accept()
        connection.setblocking(False)
        rank = Rank(connection)
        self.ranks.append(rank)
        self.driver.selector.register(connection, selectors.EVENT_READ, rank)

    def read(self, rank):
        try:
            data = rank.connection.recv(65536)
        except OSError:
            data = b""
        if not data:
            self.close(rank)
            if rank.said is None and rank.rank is not None and not rank.retired:
                if self.failure_at is None:
                    self.failure_at = rank.closed_at
                    self.failure_kind = "disconnected"
                    if self.rebuilding and not self.rebuild_survivable():
                        # The others wait for it in MPI_Comm_create_group, deaf to any word:
                        # nothing to wait for, the job starts again.
                        self.cause = (f"rank {rank.rank} on {rank.host} disconnected while the "
                                      "others formed chorus again")
                        wait = 0.0
                    else:
                        self.cause = (f"rank {rank.rank} on {rank.host} disconnected without "
                                      "leaving (killed or crashed)")
                        # To go on in place, the others must first meet the failure and report
                        # it: told now, they do at once (else chorus's bound finds it).
                        wait = self.driver.report_bound() if self.in_place else SAME_FAILURE_S
                    self.close_at = rank.closed_at + wait
                if self.in_place:
                    notice = protocol.peer_lost(self.in_place_resets, rank.rank)
                    for other in self.ranks:
                        if other is not rank and other.rank is not None:
                            self.send(other, notice)
            return
        rank.buffer += data
        while b"\n" in rank.buffer and rank in self.ranks:
            line, rank.buffer = rank.buffer.split(b"\n", 1)
            self.message(rank, line.decode(errors="replace").strip())

    def message(self, rank, line):
        message = protocol.parse(line)
        if rank.rank is None:
            # The first line must be this job's hello: anything else is not one of its ranks.
            if message is None or message.kind != "hello" or \
                    message.fields[0] != self.driver.token:
                self.driver.selector.unregister(rank.connection)
                rank.connection.close()
                self.ranks.remove(rank)
                return
            rank.rank = int(message.fields[1])
            rank.host = self.host_of(message.fields[3], rank.connection)
            if self.update_line:  # an update sent before this rank was there
                self.send(rank, self.update_line)
        elif message is None:
            return
        elif message.kind == "commit":
            self.driver.last_commit = int(message.fields[0])
        elif message.kind == "resumed":
            self.rebuilding = False
            self.driver.last_commit = int(message.fields[0])
            since = ""
            if self.driver.failure_noticed_at is not None:
                since = (f", {time.monotonic() - self.driver.failure_noticed_at:.1f} s after "
                         "the failure was noticed")
                self.driver.failure_noticed_at = None
            say(f"generation {self.number}: {self.np} ranks resumed from commit "
                f"{message.fields[0]}{since}")
        elif message.kind == "growing":
            self.grow_started = time.monotonic()
            self.rebuilding = True
        elif message.kind == "grown":
            self.grown(int(message.fields[0]), int(message.fields[1]))
        elif message.kind == "bye":
            kind, reason = message.fields
            rank.said, rank.reason = kind, reason
            if kind == "failed" and self.close_at is None:
                self.cause = f"rank {rank.rank} on {rank.host}: {reason}"
                self.close_at = time.monotonic() + SCRIPT_ERROR_GRACE_S
            elif kind == "restart" and reason.startswith("failure"):
                self.reported(rank, reason)
        elif message.kind == "lost":
            rank.lost, reason = message.fields
            self.reported(rank, reason)
            if not self.in_place:
                self.send(rank, protocol.leave())

    def reported(self, rank, reason):
        """A rank reported a failed collective: the others have REPORT_GRACE_S to be heard."""
        now = time.monotonic()
        if self.failure_at is None:
            self.failure_at = now
            self.failure_kind = "reported"
            self.cause = f"rank {rank.rank} on {rank.host} reported {reason[8:]}"
        self.close_at = min(self.close_at or now + REPORT_GRACE_S, now + REPORT_GRACE_S)

    def grown(self, number, size):
        """Rank 0: the ranks grew in place and took commit `number`; `size` ranks now."""
        self.rebuilding = False
        self.driver.last_commit = number
        hosts = self.grow_hosts or []
        for host in hosts:
            self.placement[host] = self.placement.get(host, 0) + 1
        self.np = size
        since = (f", {time.monotonic() - self.grow_asked:.1f} s after they were asked to at their "
                 f"next commit, {time.monotonic() - self.grow_started:.1f} s after they began"
                 if self.grow_started is not None else "")
        say(f"generation {self.number}: grew in place to {size} ranks "
            f"({', '.join(sorted(set(hosts)))} added) from commit {number}{since}")
        self.grow_hosts = self.grow_started = None
        # The hosts changed under this generation: the same list of usable hosts is news again
        # after the next failure.
        self.update_line = self.notified = None

    def host_of(self, hostname, connection):
        """Which of this generation's hosts a rank runs on (of its launch's, for ranks added in
        place): by the name it reports, else by the address it connected from (hosts given as
        addresses, or under other names)."""
        short = hostname.split(".")[0]
        for host in self.allocation:
            if host in (hostname, short) or host.split(".")[0] == short:
                return host
        try:
            peer = connection.getpeername()[0]
        except OSError:
            return hostname
        for host in self.allocation:
            try:
                if peer in {info[4][0] for info in socket.getaddrinfo(host, None)}:
                    return host
            except OSError:
                continue
        return hostname

    def notify_hosts(self, available):
        """Tells the ranks when the usable hosts differ from this generation's."""
        options = self.driver.options
        removed = [h for h in self.placement if h not in available]
        room = sum(available.values()) > self.np and (options.max_np is None or
                                                       self.np < options.max_np)
        key = (tuple(sorted(available.items())))
        if not (removed or room) or key == self.notified or self.grow_hosts is not None:
            return
        self.notified = key
        kind = "changed" if removed and room else "removed" if removed else "added"
        self.driver.updates += 1
        listed = ', '.join(f'{h}:{s}' for h, s in available.items())
        hosts = None if removed else self.hosts_to_grow_onto(available)
        if hosts:
            self.grow_hosts, self.grow_asked = hosts, time.monotonic()
            say(f"hosts added ({listed}): the ranks add {len(hosts)} on "
                f"{', '.join(sorted(set(hosts)))} in place at their next commit")
            self.update_line = protocol.grow(self.driver.updates, hosts)
        else:
            say(f"hosts {kind} ({listed}): the ranks leave at their next commit")
            self.update_line = protocol.hosts_updated(self.driver.updates, kind)
        for rank in self.ranks:
            if rank.rank is not None:
                self.send(rank, self.update_line)

    def hosts_to_grow_onto(self, available):
        """The hosts to add ranks on in place (one entry a rank), or None when the new slots
        cannot be had that way (the log says why; the ranks then leave for a restart)."""
        added = {h: s for h, s in available.items() if h not in self.placement}
        if not self.in_place or not added:
            return None
        why = None
        for host in added:
            if host not in self.allocation:
                why = (f"{host} is not in this launch's allocation: Open MPI 4.1 cannot add a "
                       "host to a running job")
            elif host not in self.daemons_alive:
                why = (f"{host}'s ranks went silent (cut off?): its Open MPI daemon may be "
                       "gone")
        if why is None and self.rebuilding:
            why = "the ranks are forming chorus again"
        if why is not None:
            say(f"not adding ranks in place: {why}")
            return None
        limit = self.driver.options.max_np
        hosts = []
        for host in sorted(added):
            for _ in range(min(added[host], self.allocation[host])):
                if limit is None or self.np + len(hosts) < limit:
                    hosts.append(host)
        return hosts or None

    @staticmethod
    def send(rank, line):
        if rank.closed_at is None:
            try:
                rank.connection.sendall(line.encode())
            except OSError:
                pass

    def accounted(self):
        heard = [r for r in self.ranks if r.rank is not None]
        return len(heard) >= self.np and all(r.said or r.closed_at or r.lost for r in heard)

    def finished_in_place(self, now):
        """After going on in place: whether every rank trained to the end and its process ended
        (each keeps its connection until then) some seconds ago while the launcher still runs:
        its MPI may wait for the ranks left behind (a cut host's), so the driver ends it."""
        if not self.ranks or not all(r.said == "done" and r.closed_at for r in self.ranks):
            return False
        return now - max(r.closed_at for r in self.ranks) > KILL_GRACE_S

    def split_after_failure(self):
        """The ranks heard from; of them, the gone ones (dead: ended without a word; silent:
        neither reported nor ended by the deadline, cut off or frozen), the others, and of
        those the ones on hosts where none is gone, in rank order: who would go on in place."""
        heard = [r for r in self.ranks if r.rank is not None]
        gone = [r for r in heard if r.said is None and not r.lost]
        others = [r for r in heard if r not in gone]
        failed_hosts = {r.host for r in gone}
        kept = sorted((r for r in others if r.host not in failed_hosts), key=lambda r: r.rank)
        return heard, gone, others, kept

    def why_not_in_place(self):
        """Why the job cannot go on in the surviving processes now; None when it can."""
        options = self.driver.options
        if options.restart_on_failure:
            return "--restart-on-failure"
        if not self.in_place:
            return "Hydra (MPICH) ends every rank when one dies"
        if self.process.poll() is not None:
            return "the launcher ended"
        if self.rebuilding and not self.rebuild_survivable():
            return f"{self.cause}: {self.rebuild_broken}"
        heard, gone, others, kept = self.split_after_failure()
        if len(heard) < self.np:
            return f"only {len(heard)} of {self.np} ranks had started"
        if not gone:
            return "no rank died or went silent"
        unable = [r for r in others if r.lost != "in-place" or r.closed_at]
        if unable:
            return f"rank {unable[0].rank} on {unable[0].host} cannot go on in its process"
        if len(kept) < options.min_np:
            return (f"{len(kept)} rank(s) left on hosts where none failed, fewer than "
                    f"--min-np {options.min_np}")
        if options.reset_limit is not None and self.driver.resets >= options.reset_limit:
            return f"the reset limit (--reset-limit {options.reset_limit})"
        return None

    def go_on_in_place(self):
        """After a failure: when every rank that did not die reported it and waits, names the
        ranks that go on (those on hosts where none died) to them and tells the others to leave,
        and watches on. False (nothing sent, and the log says why) when the job must start again
        instead."""
        why_not = self.why_not_in_place()
        if why_not:
            say(f"generation {self.number}: not going on in the surviving processes: {why_not}")
            return False
        driver = self.driver
        _, gone, others, kept = self.split_after_failure()
        failed = {}
        for r in gone:
            failed.setdefault(r.host, []).append(
                f"rank {r.rank} {'disconnected' if r.closed_at is not None else 'went silent'}")
        driver.resets += 1
        driver.failure_noticed_at = self.failure_at
        for host, why in failed.items():
            if host in self.removing:  # not a failure: the discovery script dropped it
                self.removing.discard(host)
                say(f"host {host} removed: its ranks ended")
                continue
            seconds = driver.blacklist.add(host)
            say(f"host {host} failed ({', '.join(why)}): left out for {seconds:g} s")
            # Its ranks killed, its daemon may live on: back from its cooldown, it can take
            # ranks in place (hosts_to_grow_onto).
            if all(r.closed_at is not None for r in gone if r.host == host):
                self.daemons_alive.add(host)
            else:
                self.daemons_alive.discard(host)
        line = self.verdict(kept)
        # The silent are told to leave too, should they hear.
        for r in others + [r for r in gone if r.closed_at is None]:
            if r in kept:
                self.send(r, line)
            else:
                r.retired = True
                self.send(r, protocol.leave())
                self.retire(r)
        say(f"generation {self.number} goes on in the surviving processes: {len(kept)} ranks "
            f"(were {', '.join(str(r.rank) for r in kept)} of {self.np}) on "
            f"{', '.join(sorted({r.host for r in kept}))}, after {self.cause}")
        for new_rank, r in enumerate(kept):
            r.rank, r.lost = new_rank, None
        self.ranks = kept
        self.np = len(kept)
        self.placement = {h: sum(r.host == h for r in kept) for h in self.placement
                          if h not in failed}
        self.failure_at = self.failure_kind = self.close_at = self.cause = None
        self.notified = None  # hosts it had been told of may come back now
        self.in_place_resets += 1
        self.rebuilding = True
        return True

    @staticmethod
    def verdict(kept):
        """The word to the ranks that go on in place (`kept`, in their new order)."""
        return protocol.reform([r.rank for r in kept])

    def retire(self, rank):
        """A rank told to leave after its host failed: under mpirun, the generation's end ends
        it."""

    def watch(self):
        """Runs until the generation ends; returns the ranks as they left."""
        driver = self.driver
        next_discovery = time.monotonic() + driver.options.discovery_interval
        exited_at = None
        while True:
            for key, _ in driver.selector.select(0.1):
                if key.data is None:
                    self.accept()
                else:
                    self.read(key.data)
            now = time.monotonic()
            if now >= next_discovery and self.close_at is None:
                next_discovery = now + driver.options.discovery_interval
                available = driver.available()
                if available is not None:
                    self.notify_hosts(available)
            if self.in_place_resets and self.finished_in_place(now):
                break
            if (self.grow_started is not None and self.close_at is None and
                    now - self.grow_started > GROW_DEADLINE_S):
                self.cause = (f"the ranks did not grow in place within {GROW_DEADLINE_S:g} s "
                              "(a spawn that failed leaves them in MPI_Comm_spawn)")
                say(f"generation {self.number}: {self.cause}: starting the job again")
                break
            if self.process.poll() is not None:
                exited_at = exited_at or now
                # what the ranks said just before the launcher ended is still arriving
                if self.accounted() or now - exited_at > 1.0:
                    break
            if self.close_at is not None and (now >= self.close_at or self.accounted()):
                if self.failure_at is not None and self.go_on_in_place():
                    continue
                for rank in self.ranks:
                    if rank.lost and rank.closed_at is None:
                        self.send(rank, protocol.leave())
                break
        self.stop()
        return self.process.returncode

    def stop(self):
        self.stopped_at = time.monotonic()
        self.end_launched()
        for rank in self.ranks:
            if rank.closed_at is None:
                self.close(rank)

    def end_launched(self):
        """Ends what this generation launched: the MPI launcher, with its ranks."""
        end_processes([self.process])

    def close(self, rank):
        """Closes the driver's end of a rank's connection, noting when."""
        self.driver.selector.unregister(rank.connection)
        rank.connection.close()
        rank.closed_at = time.monotonic()

    def failed_hosts(self):
        """The hosts to leave out after this generation, and why."""
        if self.failure_at is None:
            return {}
        failed = {}
        for rank in self.ranks:
            if rank.rank is None or rank.said is not None or rank.lost or rank.retired:
                continue
            closed = rank.closed_at is not None and rank.closed_at < self.stopped_at
            if closed and rank.closed_at <= self.failure_at + SAME_FAILURE_S:
                failed.setdefault(rank.host, []).append(f"rank {rank.rank} disconnected")
            elif not closed and self.failure_kind == "reported":
                failed.setdefault(rank.host, []).append(f"rank {rank.rank} went silent")
        heard_hosts = {r.host for r in self.ranks if r.rank is not None}
        if failed and set(failed) >= set(self.placement) and len(self.placement) > 1:
            say("every host's ranks failed at once: cannot tell which host failed, so none is "
                "left out")
            return {}
        return {h: r for h, r in failed.items() if h in heard_hosts}


def kill_group(process, signum):
    """Sends `signum` to the process group a started process leads, while it runs."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass


def end_processes(processes):
    """SIGTERM to each process's group; SIGKILL to those still running KILL_GRACE_S later."""
    for process in processes:
        kill_group(process, signal.SIGTERM)
    deadline = time.monotonic() + KILL_GRACE_S
    for process in processes:
        try:
            process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            kill_group(process, signal.SIGKILL)
            process.wait()


class Driver:
    def __init__(self, options, launcher):
        self.options = options
        self.launcher = launcher
        self.discovery = Discovery(options, say)
        self.blacklist = Blacklist(options.cooldown)
        self.order = []  # hosts in the order they first served, so rank 0 stays put
        self.updates = 0
        self.last_commit = None
        self.failure_noticed_at = None
        self.store = options.store or f"/dev/shm/chorus-elastic-{uuid.uuid4().hex[:12]}"
        self.token = uuid.uuid4().hex  # what a rank of this job says first
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("0.0.0.0", 0))
        self.listener.listen(256)
        self.listener.setblocking(False)
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.listener, selectors.EVENT_READ, None)
        self.address = None
        self.current = None  # the generation running now
        self.resets = 0

    def report_bound(self):
        """How long after a rank died the others have all met it and reported: chorus's bound
        on a wait (CHORUS_TIMEOUT_SECONDS, as the ranks get it), a second more when rank 0 died
        (the others give it that head start to name the rank), and the report grace."""
        bound = dict(self.options.settings).get("CHORUS_TIMEOUT_SECONDS",
                                                os.environ.get("CHORUS_TIMEOUT_SECONDS", "60"))
        try:
            seconds = float(bound)
        except ValueError:
            seconds = 60.0
        return seconds + 1.0 + REPORT_GRACE_S

    def available(self):
        hosts = self.discovery.hosts()
        if hosts is None:
            return None
        return {h: s for h, s in hosts.items() if not self.blacklist.blocked(h)}

    def wait_for_slots(self):
        waited_from = time.monotonic()
        said_waiting = False
        while True:
            available = self.available() or {}
            slots = sum(available.values())
            if slots >= self.options.min_np:
                return available
            if time.monotonic() - waited_from > self.options.elastic_timeout:
                die(f"only {slots} slot(s) on usable hosts ({', '.join(available) or 'none'}; "
                    f"left out after failures: {self.blacklist.describe()}), fewer than "
                    f"--min-np {self.options.min_np}, for {self.options.elastic_timeout:g} s "
                    "(--elastic-timeout): ending the job", status=1)
            if not said_waiting:
                say(f"waiting for --min-np {self.options.min_np} slots: {slots} on usable hosts "
                    f"from {self.discovery.where} (left out: {self.blacklist.describe()}), up "
                    f"to {self.options.elastic_timeout:g} s")
                said_waiting = True
            time.sleep(self.options.discovery_interval)

    def placement(self, available):
        for host in available:
            if host not in self.order:
                self.order.append(host)
        wanted = sum(available.values())
        if self.options.max_np is not None:
            wanted = min(wanted, self.options.max_np)
        placement = {}
        for host in self.order:
            if host in available and wanted > 0:
                placement[host] = min(available[host], wanted)
                wanted -= placement[host]
        return placement

    def run(self):
        start_failures = 0
        number = 0
        while True:
            available = self.wait_for_slots()
            placement = self.placement(available)
            if self.address is None:
                self.address = (f"{advertised_address(self.options, placement)}:"
                                f"{self.listener.getsockname()[1]}")
                if self.options.verbose:
                    say(f"ranks reach this driver at {self.address}")
            if self.options.worlds == "ucx":
                from .elastic_worlds import WorldsGeneration  # it builds on this module
                generation = WorldsGeneration(self, number, placement)
            else:
                generation = Generation(self, number, placement)
            say(f"generation {number}: {generation.np} ranks on "
                f"{', '.join(f'{h}:{s}' for h, s in placement.items())}")
            self.current = generation
            generation.launch()
            status = generation.watch()
            heard = [r for r in generation.ranks if r.rank is not None]
            failed_script = [r for r in heard if r.said == "failed"]
            if failed_script:
                r = failed_script[0]
                die(f"rank {r.rank} on {r.host} failed: {r.reason} (an error of the training "
                    "script, not of a host: not restarting)", status=1)
            if len(heard) == generation.np and all(r.said == "done" for r in heard):
                if generation.in_place_resets:
                    return 0  # the launcher may have been ended, waiting for the ranks left out
                if status != 0:
                    say(f"training finished, but the job then exited with status {status}")
                return status if status is not None and status >= 0 else 1
            if not heard:
                start_failures += 1
                say(f"generation {number} ended (status {status}) before any rank reached "
                    "hvd.elastic.run")
                if start_failures >= 3:
                    die(f"the job failed {start_failures} times in a row before training "
                        "started: ending it", status=1)
            else:
                start_failures = 0
            failed = generation.failed_hosts()
            if generation.failure_at is not None:
                self.failure_noticed_at = generation.failure_at
                for host, why in failed.items():
                    seconds = self.blacklist.add(host)
                    say(f"host {host} failed ({', '.join(why)}): left out for {seconds:g} s")
                say(f"generation {number} ended: {generation.cause}"
                    + (f"; last commit {self.last_commit}" if self.last_commit else ""))
            elif heard and all(r.said == "restart" for r in heard):
                say(f"generation {number} left at commit {self.last_commit} for the new hosts")
            else:
                say(f"generation {number} ended with status {status}: restarting")
            self.resets += 1
            if self.options.reset_limit is not None and self.resets > self.options.reset_limit:
                die(f"the job was reset {self.resets - 1} times (--reset-limit "
                    f"{self.options.reset_limit}): ending it", status=1)
            number += 1

    def dry_run(self):
        """--dry-run: what the first generation would run, without running it."""
        available = self.available() or {}
        if sum(available.values()) < self.options.min_np:
            raise UsageError(f"only {sum(available.values())} slot(s) in {self.discovery.where}, "
                             f"fewer than --min-np {self.options.min_np}")
        generation = Generation(self, 0, self.placement(available))
        self.address = f"{advertised_address(self.options, generation.placement)}:" \
                       f"{self.listener.getsockname()[1]}"
        job = Job(self.options, generation.np, generation.placement,
                  inside=self.discovery.inside)
        sys.stderr.write(f"chorusrun: {self.launcher.describe()}\n")
        sys.stderr.write(f"chorusrun: elastic job, hosts from {self.discovery.where}; "
                         f"generation 0 on {generation.np} ranks would run:\n")
        sys.stderr.write(f"chorusrun: {quoted(job.command(self.launcher, generation.settings()))}"
                         "\n")
        return 0

    def remove_store(self):
        """When the job ends, however it ends. The ranks remove their hosts' commits after
        training; a job that ended otherwise leaves them, and the default store (not one the user
        named) goes here, as far as this machine reaches it (its own /dev/shm, or a shared one)."""
        if self.options.store is None:
            shutil.rmtree(self.store, ignore_errors=True)
            return
        try:
            os.rmdir(self.store)
        except OSError:
            pass


def run(options, launcher):
    """Runs the elastic job; returns the exit status (a message said why where it is not 0)."""
    driver = Driver(options, launcher)
    if options.dry_run:
        return driver.dry_run()

    def interrupted(signum, _frame):
        if driver.current is not None:
            driver.current.stop()
        driver.remove_store()
        sys.stderr.write(f"chorusrun: stopped by signal {signum}\n")
        os._exit(128 + signum)
    signal.signal(signal.SIGTERM, interrupted)
    try:
        return driver.run()
    except JobEnded as e:
        sys.stderr.write(f"chorusrun: {e}\n")
        return e.status
    except KeyboardInterrupt:
        if driver.current is not None:
            driver.current.stop()
        sys.stderr.write("chorusrun: interrupted\n")
        return 130
    finally:
        driver.remove_store()
