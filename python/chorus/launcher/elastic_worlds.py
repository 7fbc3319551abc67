"""chorusrun --elastic --worlds ucx: a generation whose ranks the driver starts itself, one process
each (on this machine directly, on other hosts through the rsh agent mpirun would use:
OMPI_MCA_plm_rsh_agent, else ssh), and whose worlds it forms without MPI (chorus over UCX,
chorus.launcher.worlds): no launcher's daemons hold the job together, so a lost host, its
daemon included, or a cut one, is only lost ranks. After a failure the survivors open the next
world in their own processes; the failed host's ranks are killed where the driver can reach
them. Standard library only."""
import os
import shlex
import signal
import socket
import subprocess
import time

from . import protocol, worlds
from .elastic import KILL_GRACE_S, Generation, say
from .options import environment_forwards


class RankProcesses:
    """The generation's rank processes, seen as one launcher process by the watch: it has ended
    once every process of a rank that goes on has ended."""

    def __init__(self):
        self.started = {}  # launch index (the rank it first had) -> (host, Popen)
        self.members = None  # the launch indices of the ranks that go on; None: all
        self.pid = None
        self.returncode = None

    def poll(self):
        watched = [p for index, (_, p) in self.started.items()
                   if self.members is None or index in self.members]
        if any(p.poll() is None for p in watched):
            return None
        codes = [p.returncode for p in watched]
        self.returncode = next((c for c in codes if c != 0), 0)
        return self.returncode


class WorldsGeneration(Generation):
    """A Generation (elastic.py) whose launch, stop and going on in place are its own."""

    rebuild_broken = ("the world the others open cannot form without it (forming another "
                      "instead: not yet)")

    def __init__(self, driver, number, placement):
        super().__init__(driver, number, placement)
        self.in_place = not driver.options.restart_on_failure
        self.process = RankProcesses()
        self.forming = None  # the world being formed (WorldForming), until its tables are sent
        self.world = 0

    def launch(self):
        options = self.driver.options
        agent = shlex.split(os.environ.get("OMPI_MCA_plm_rsh_agent") or "ssh")
        local = {"localhost", "127.0.0.1", socket.gethostname(),
                 socket.gethostname().split(".")[0]}
        rank = 0
        for host, slots in self.placement.items():
            for _ in range(slots):
                settings = dict(self.settings())
                settings.update(options.settings)
                settings.update({"CHORUS_ELASTIC_WORLDS": "ucx", "CHORUS_ELASTIC_HOST": host,
                                 "CHORUS_ELASTIC_RANK": str(rank),
                                 "CHORUS_ELASTIC_SIZE": str(self.np)})
                for forward in options.forwards:
                    name, _, value = forward.partition("=")
                    if value or name in os.environ:
                        settings[name] = value or os.environ[name]
                if host in local:
                    command = options.program
                    environment = dict(os.environ, **settings)
                else:
                    passed = {n: os.environ[n] for n in environment_forwards()}
                    passed.update(settings)
                    command = agent + [host] + [shlex.quote(w) for w in
                                                ["env"] + [f"{n}={v}" for n, v in passed.items()]
                                                + options.program]
                    environment = None
                if options.verbose:
                    say(f"rank {rank} on {host}: {' '.join(command)}")
                process = subprocess.Popen(command, env=environment, start_new_session=True)
                self.process.started[rank] = (host, process)
                rank += 1

    def message(self, rank, line):
        known = rank.rank is not None
        super().message(rank, line)
        if rank not in self.ranks:
            return
        message = protocol.parse(line)
        if not known and rank.rank is not None:
            # Its hello's rank is its launch index, and its host the one it was started on.
            rank.launch = rank.rank
            launched = self.process.started.get(rank.launch)
            if launched is not None:
                rank.host = launched[0]
            heard = [r for r in self.ranks if r.rank is not None]
            if len(heard) == self.np and self.forming is None and self.world == 0:
                self.form(0, sorted(heard, key=lambda r: r.rank))
        elif message is not None and message.kind == "address" and self.forming is not None:
            self.forming.address(rank, int(message.fields[0]), message.fields[1])
            if self.forming.complete():
                for member, table in self.forming.tables():
                    self.send(member, table)
                self.forming = None
        elif message is not None and message.kind == "shut":
            rank.shut = True
            living = [r for r in self.ranks if r.closed_at is None]
            if all(r.shut for r in living):
                for r in living:  # every rank is done with every world
                    self.send(r, protocol.close(self.world + 1))

    def hosts_to_grow_onto(self, available):
        """Hosts added while ranks run: not yet in place on worlds without MPI (the driver
        would start their ranks and form the next world at a commit); the ranks leave at their
        next commit and the job starts again with them."""
        if any(h not in self.placement for h in available):
            say("hosts added: on worlds without MPI they join by a restart (in place: not yet)")
        return None

    def form(self, number, members):
        self.world = number
        self.forming = worlds.WorldForming(number, members)
        for member in members:
            self.send(member, self.forming.opening())

    def verdict(self, kept):
        """Going on in place: the ranks that go on open the next world (Generation sends it)."""
        self.forming = worlds.WorldForming(self.world + 1, kept)
        self.world += 1
        self.process.members = {r.launch for r in kept}
        return self.forming.opening()

    def retire(self, rank):
        """A rank left out (its host failed): its process is ended where the driver reaches it,
        so that it cannot come back into a world it is no longer in."""
        launched = self.process.started.get(rank.launch)
        if launched is not None:
            _kill(launched[1], signal.SIGKILL)

    def stop(self):
        self.stopped_at = time.monotonic()
        processes = [p for _, p in self.process.started.values()]
        for process in processes:
            _kill(process, signal.SIGTERM)
        deadline = time.monotonic() + KILL_GRACE_S
        for process in processes:
            try:
                process.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                _kill(process, signal.SIGKILL)
                process.wait()
        self.process.poll()
        for rank in self.ranks:
            if rank.closed_at is None:
                self.driver.selector.unregister(rank.connection)
                rank.connection.close()
                rank.closed_at = time.monotonic()


def _kill(process, signum):
    if process.poll() is None:
        try:
            os.killpg(process.pid, signum)
        except ProcessLookupError:
            pass
