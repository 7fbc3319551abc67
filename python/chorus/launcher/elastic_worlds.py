"""chorusrun --elastic --worlds ucx: a generation whose ranks the driver starts itself, one process
each (on this machine directly, on other hosts through the rsh agent mpirun would use:
OMPI_MCA_plm_rsh_agent, else ssh), and whose worlds it forms without MPI (chorus over UCX,
chorus.launcher.worlds): no launcher's daemons hold the job together, so a lost host, its
daemon included, or a cut one, is only lost ranks. After a failure the survivors open the next
world in their own processes; the failed host's ranks are killed where the driver can reach
them. A host added (or back from its cooldown): the driver starts its ranks, which wait, and the
running ranks open the next world with them at their next commit. A host removed from the
discovery script's list: the driver ends its ranks and the others go on as after a loss.
Standard library only."""
import os
import shlex
import signal
import socket
import subprocess
import time

from . import protocol, worlds
from .elastic import GROW_DEADLINE_S, Generation, end_processes, kill_group, say
from .options import environment_forwards

# Before the driver starts ranks on an added host (or one back from its cooldown), a probe
# started there the same way must reach the driver within PROBE_S: a host whose network is
# still cut would otherwise take a rank that waits for the driver until GROW_DEADLINE_S.
PROBE_S = 5.0
PROBE_QUICK_S = 0.5
PROBE = ("import socket, sys; c = socket.create_connection((sys.argv[1], int(sys.argv[2])), "
         "float(sys.argv[3])); c.sendall(b'probe\\n'); c.close()")


def end_now(process):
    """Kills a started process's group and reaps it."""
    kill_group(process, signal.SIGKILL)
    try:
        process.wait(timeout=1.0)
    except subprocess.TimeoutExpired:
        pass


class RankProcesses:
    """The generation's rank processes, seen as one launcher process by the watch: it has ended
    once every process of a rank that goes on has ended."""

    def __init__(self):
        self.started = []  # [host, the rank it was started as, Popen, claimed by a hello]
        self.members = None  # the Popen of the ranks that go on; None: all
        self.pid = None
        self.returncode = None

    def claim(self, host, rank):
        """The process started on `host` as `rank` that said hello now, or None."""
        for entry in self.started:
            if entry[:2] == [host, rank] and not entry[3]:
                entry[3] = True
                return entry[2]
        return None

    def poll(self):
        watched = [p for _, _, p, _ in self.started
                   if self.members is None or p in self.members]
        if any(p.poll() is None for p in watched):
            return None
        codes = [p.returncode for p in watched]
        self.returncode = next((c for c in codes if c != 0), 0)
        return self.returncode


class WorldsGeneration(Generation):
    """A Generation (elastic.py) whose launch, stop and going on in place are its own."""

    rebuild_broken = ("the world the added ranks open cannot form without it, and they "
                      "cannot yet report that")

    def rebuild_survivable(self):
        """A world formed after a failure that loses a member meets it as a failure: the
        members that go on fail to form it (their tables never come, or chorus_init_world names
        the lost rank), report it, and open the next one without it. Not a world formed to add
        ranks: the added ranks are still in hvd.init, which cannot report."""
        return self.in_place and self.grow_started is None

    def __init__(self, driver, number, placement):
        super().__init__(driver, number, placement)
        self.in_place = not driver.options.restart_on_failure
        self.process = RankProcesses()
        self.forming = None  # the world being formed (WorldForming), until its tables are sent
        self.world = 0
        self.joining = {}  # the processes of added hosts' ranks -> their Rank once they said hello
        self.grow_told = False  # the running ranks were told to add the joining ones
        self.probes = {}  # added host -> (its probe's Popen, when it started): see reachable

    def launch(self):
        rank = 0
        for host, slots in self.placement.items():
            for _ in range(slots):
                self.start(host, rank, self.np)
                rank += 1

    @staticmethod
    def local(host):
        return host in {"localhost", "127.0.0.1", socket.gethostname(),
                        socket.gethostname().split(".")[0]}

    def run_on(self, host, words, settings):
        """Starts `words` on `host` with `settings` in its environment: directly on this
        machine, else through the rsh agent."""
        if self.local(host):
            command, environment = words, dict(os.environ, **settings)
        else:
            agent = shlex.split(os.environ.get("OMPI_MCA_plm_rsh_agent") or "ssh")
            passed = {n: os.environ[n] for n in environment_forwards()}
            passed.update(settings)
            command = agent + [host] + [shlex.quote(w) for w in
                                        ["env"] + [f"{n}={v}" for n, v in passed.items()]
                                        + words]
            environment = None
        if self.driver.options.verbose:
            say(f"on {host}: {' '.join(command)}")
        return subprocess.Popen(command, env=environment, start_new_session=True)

    def start(self, host, rank, size):
        """Starts the program on `host` as a rank meant to be `rank` of `size`."""
        options = self.driver.options
        settings = dict(self.settings())
        settings.update(options.settings)
        settings.update({"CHORUS_ELASTIC_WORLDS": "ucx", "CHORUS_ELASTIC_HOST": host,
                         "CHORUS_ELASTIC_RANK": str(rank), "CHORUS_ELASTIC_SIZE": str(size)})
        for forward in options.forwards:
            name, _, value = forward.partition("=")
            if value or name in os.environ:
                settings[name] = value or os.environ[name]
        process = self.run_on(host, options.program, settings)
        self.process.started.append([host, rank, process, False])
        if self.process.members is not None:
            self.process.members.add(process)

    def read(self, rank):
        """An added rank whose connection ends before it joined is dropped, not a failure of
        the running ranks."""
        if rank.process in self.joining:
            try:
                ended = rank.connection.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                ended = True
            if ended:
                self.drop_joiner(rank.process, f"the rank started on {rank.host} ended before "
                                 "it joined")
                return
        super().read(rank)

    @staticmethod
    def host_of(hostname, connection):
        """A rank reports the host the driver started it on (CHORUS_ELASTIC_HOST)."""
        return hostname

    def message(self, rank, line):
        known = rank.rank is not None
        super().message(rank, line)
        if rank not in self.ranks:
            return
        message = protocol.parse(line)
        if not known and rank.rank is not None:
            # Its hello names the host it was started on and the rank it was started as.
            rank.process = self.process.claim(rank.host, rank.rank)
            if rank.process in self.joining:
                self.joining[rank.process] = rank
                if all(self.joining.values()) and not self.grow_told:
                    self.ask_to_grow()  # every added rank waits: the others may grow
                return
            heard = [r for r in self.ranks if r.rank is not None]
            if len(heard) == self.np and self.forming is None and self.world == 0:
                self.form(0, sorted(heard, key=lambda r: r.rank))
        elif message is not None and message.kind == "growing" and self.joining:
            added = list(self.joining.values())
            current = sorted((r for r in self.ranks if r.rank is not None and r not in added),
                             key=lambda r: r.rank)
            self.joining = {}
            self.grow_told = False
            self.form(self.world + 1, current + added)
        elif message is not None and message.kind == "address" and self.forming is not None:
            self.forming.address(rank, int(message.fields[0]), message.fields[1])
            if self.forming.complete():
                for member, table in self.forming.tables():
                    self.send(member, table)
                self.forming = None
        elif message is not None and message.kind == "bye" and self.joining:
            waiting = list(self.joining.values())
            if all(r.said == "done" for r in self.ranks if r.rank is not None and
                   r not in waiting):
                # Training ended before the added ranks could join: they are not needed.
                for process in list(self.joining):
                    self.drop_joiner(process, None)
        elif message is not None and message.kind == "shut":
            rank.shut = True
            living = [r for r in self.ranks if r.closed_at is None]
            if all(r.shut for r in living):
                for r in living:  # every rank is done with every world
                    self.send(r, protocol.close(self.world + 1))

    def notify_hosts(self, available):
        """Hosts added while the ranks run (and none removed): the driver starts their ranks,
        which wait for the next world; once all said hello the others are told to grow at their
        next commit. Anything else as Generation does (the ranks leave, the job restarts)."""
        if self.joining:
            self.drop_lost_joiners()  # which may leave their hosts out: ask the blacklist again
            available = {h: s for h, s in available.items()
                         if not self.driver.blacklist.blocked(h)}
        removed = [h for h in self.placement if h not in available]
        added = {h: s for h, s in available.items() if h not in self.placement}
        limit = self.driver.options.max_np
        if removed and self.remove_in_place(removed):
            return None
        if removed or not added or not self.in_place:
            return super().notify_hosts(available)
        if self.joining or self.rebuilding or self.grow_hosts is not None or \
                (limit is not None and self.np >= limit):
            return None
        added = self.reachable(added)
        if not added:
            return None
        hosts = [h for h in sorted(added) for _ in range(added[h])]
        hosts = hosts[:max(limit - self.np, 0)] if limit is not None else hosts
        before = len(self.process.started)
        for i, host in enumerate(hosts):
            self.start(host, self.np + i, self.np + len(hosts))
        self.joining = {p: None for _, _, p, _ in self.process.started[before:]}
        self.grow_hosts = hosts
        self.grow_asked = time.monotonic()
        say(f"hosts added ({', '.join(sorted(set(hosts)))}): their {len(hosts)} rank(s) start, "
            "and the ranks add them in place at their next commit")
        return None

    def remove_in_place(self, removed):
        """Hosts the discovery script no longer lists: the driver ends their ranks, and the
        others meet that as a lost host and go on in their processes (go_on_in_place), as after a
        failure. False where they cannot: a failure, a forming world or added ranks under way,
        or fewer than --min-np ranks left."""
        if not self.in_place or self.rebuilding or self.joining or self.probes or \
                self.close_at is not None or self.grow_hosts is not None:
            return False
        leaving = [r for r in self.ranks if r.rank is not None and r.host in removed]
        staying = [r for r in self.ranks if r.rank is not None and r not in leaving]
        if len(staying) < self.driver.options.min_np:
            return False
        fresh = set(removed) - self.removing
        if fresh:
            self.removing |= fresh
            say(f"hosts removed ({', '.join(sorted(fresh))}): their {len(leaving)} rank(s) end, "
                "and the others go on in their processes")
            for rank in leaving:
                self.retire(rank)
        return True

    def reachable(self, added):
        """The added hosts whose probe reached the driver, once every added host's probe has
        ended; {} meanwhile. A host whose probe failed or took over PROBE_S is left out for a
        cooldown (which doubles with each failure), as a host whose ranks failed."""
        _, driver_host, port = protocol.split_driver_address(
            protocol.driver_address(self.driver.token, self.driver.address))
        now = time.monotonic()
        new = [h for h in added if h not in self.probes and not self.local(h)]
        for host in new:
            words = ["python3", "-c", PROBE, driver_host, str(port), str(PROBE_S)]
            self.probes[host] = (self.run_on(host, words, {}), now)
        # A reachable host answers in a fraction of a second: wait that long for new probes
        # rather than a discovery interval.
        while new and time.monotonic() - now < PROBE_QUICK_S and \
                any(self.probes[h][0].poll() is None for h in new):
            time.sleep(0.01)
        now = time.monotonic()
        reached = {}
        for host in added:
            process, started = self.probes.get(host, (None, now))
            if process is None:
                reached[host] = added[host]
            elif process.poll() is None and now - started < PROBE_S:
                return {}
        for host in added:
            process, _ = self.probes.pop(host, (None, now))
            if process is None:
                continue
            if process.poll() == 0:
                reached[host] = added[host]
                continue
            end_now(process)
            seconds = self.driver.blacklist.add(host)
            say(f"host {host} is available but does not reach the driver yet (a probe started "
                f"there did not connect within {PROBE_S:g} s): left out for {seconds:g} s")
        return reached

    @staticmethod
    def hosts_to_grow_onto(available):
        """Generation's grow onto its launch's hosts (Open MPI's spawn): never here; more slots
        on hosts the job runs on join by a restart."""
        return None

    def drop_lost_joiners(self):
        """Added ranks that ended, or said nothing within GROW_DEADLINE_S, before the others
        were asked to grow (their host unreachable, say): their hosts are left out for a
        cooldown, and the ranks that said hello join without them."""
        late = time.monotonic() - self.grow_asked > GROW_DEADLINE_S
        hosts = {p: h for h, _, p, _ in self.process.started}
        for process, rank in list(self.joining.items()):
            if rank is None and (process.poll() is not None or late):
                seconds = self.driver.blacklist.add(hosts[process])
                self.drop_joiner(process, f"the rank started on {hosts[process]} never reached "
                                 f"the driver: the host is left out for {seconds:g} s")
        if not self.joining:
            self.grow_hosts = self.notified = None
        elif all(self.joining.values()) and not self.grow_told:
            self.grow_hosts = [r.host for r in self.joining.values()]
            self.ask_to_grow()

    def drop_joiner(self, process, why):
        """An added rank that will not join: ended, and no longer watched or waited for."""
        end_now(process)
        rank = self.joining.pop(process)
        if rank is not None:
            rank.retired = True
            self.ranks.remove(rank)
            if rank.closed_at is None:
                self.close(rank)
        if self.process.members is None:
            self.process.members = {p for _, _, p, _ in self.process.started}
        self.process.members.discard(process)
        # Forgotten, so that a rank started later on the same host as the same rank cannot be
        # taken for this one when it says hello (claim).
        self.process.started = [e for e in self.process.started if e[2] is not process]
        if why:
            say(why)

    def ask_to_grow(self):
        self.grow_told = True
        self.driver.updates += 1
        self.update_line = protocol.grow(self.driver.updates, self.grow_hosts)
        for rank in self.ranks:
            if rank.rank is not None and rank.process not in self.joining:
                self.send(rank, self.update_line)

    def form(self, number, members):
        self.world = number
        self.forming = worlds.WorldForming(number, members)
        for member in members:
            self.send(member, self.forming.opening())

    def verdict(self, kept):
        """Going on in place: the ranks that go on open the next world (Generation sends it)."""
        self.forming = worlds.WorldForming(self.world + 1, kept)
        self.world += 1
        self.process.members = {r.process for r in kept}
        return self.forming.opening()

    def retire(self, rank):
        """A rank left out (its host failed): its process is ended where the driver reaches it,
        so that it cannot come back into a world it is no longer in."""
        if rank.process is not None:
            kill_group(rank.process, signal.SIGKILL)

    def end_launched(self):
        end_processes([p for _, _, p, _ in self.process.started])
        self.process.poll()
