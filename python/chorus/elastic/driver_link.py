"""A rank's line to chorusrun's elastic driver (CHORUS_ELASTIC_DRIVER=TOKEN@ADDRESS:PORT): the
protocol is chorus.launcher.protocol's, which the driver speaks too. Updates the driver sends
(hosts-updated NUMBER KIND, grow NUMBER COUNT HOSTS) queue up in `updates` as (NUMBER, KIND) and
(NUMBER, "grow", [host, ...]); State.check_host_updates reads them. Its word
after a failed collective (reform RANKS, open WORLD, or leave) goes to `lost`, which waits for
it; with worlds without MPI, `opened` waits for its first open, `table` for a world's addresses
and `closed` for the word that every rank is done. One link per process (`from_environment`)."""
import os
import queue
import socket
import sys
import threading
import time

from ..launcher import protocol

_shared = None  # the process's link, once made


def shared():
    """The process's link to the driver if one was made, else None."""
    return _shared


class DriverLink:
    def __init__(self, address):
        self._token, host, port = protocol.split_driver_address(address)
        self._socket = socket.create_connection((host, port), timeout=30)
        self._socket.settimeout(None)
        self._lock = threading.Lock()
        self.updates = queue.Queue()
        # The driver's word after `lost`: a rank list, ("open", WORLD), or None.
        self._verdicts = queue.Queue()
        self._tables = queue.Queue()  # (WORLD, RANK, [hex address, ...]) of worlds without MPI
        # From `open WORLD` to that world's table: a member's loss that the driver reports
        # means the world cannot form, and ends the wait for its table, as ("lost", RANK,
        # WORLD) in _tables.
        self._forming = None
        self.lost_while_forming = None  # the rank whose loss ended the last wait, or None
        self._closed = threading.Condition()
        self.closed_before = 0  # the worlds before this number are done on every rank
        self._epoch = 0  # how many times the world was formed again in place
        self._said_hello = False
        self._reader = threading.Thread(target=self._read, name="chorus-elastic-driver",
                                        daemon=True)
        self._reader.start()

    @classmethod
    def from_environment(cls):
        """The link to the driver that started this rank (made once per process), or None
        without one."""
        global _shared
        address = os.environ.get(protocol.ENVIRONMENT)
        if not address:
            return None
        if _shared is not None:
            return _shared
        try:
            _shared = cls(address)
            return _shared
        except (OSError, ValueError) as e:
            print(f"chorus.elastic: cannot reach the elastic driver at {address}: {e}; going on "
                  "without it (no host updates)", file=sys.stderr, flush=True)
            return None

    def _read(self):
        buffered = b""
        while True:
            try:
                data = self._socket.recv(4096)
            except OSError:
                data = b""
            if not data:
                self._verdicts.put(None)  # no word will come now
                self._tables.put(None)
                self._close_through(1 << 30)
                return
            buffered += data
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                message = protocol.parse(line.decode(errors="replace"))
                if message is None:
                    continue
                if message.kind == "hosts-updated":
                    self.updates.put((int(message.fields[0]), message.fields[1]))
                elif message.kind == "grow":
                    self.updates.put((int(message.fields[0]), "grow",
                                      message.fields[2].split(",")))
                elif message.kind == "reform":
                    self._epoch += 1
                    self._verdicts.put([int(r) for r in message.fields[0].split(",")])
                elif message.kind == "peer-lost":
                    if self._forming is not None:
                        self._tables.put(("lost", int(message.fields[1]), self._forming))
                    elif int(message.fields[0]) == self._epoch:
                        self._peer_lost(int(message.fields[1]))
                elif message.kind == "leave":
                    self._verdicts.put(None)
                elif message.kind == "open":
                    self._epoch = self._forming = int(message.fields[0])
                    self._verdicts.put(("open", int(message.fields[0])))
                elif message.kind == "world":
                    if int(message.fields[0]) == self._forming:
                        self._forming = None
                    self._tables.put((int(message.fields[0]), int(message.fields[1]),
                                      message.fields[3].split(",")))
                elif message.kind == "close":
                    self._close_through(int(message.fields[0]))

    @staticmethod
    def _peer_lost(rank):
        """The driver saw rank `rank`'s process end: what waits for it fails now, not after
        chorus's bound."""
        from ..core import peer_lost
        try:
            peer_lost(rank, "its process ended (the elastic driver saw its connection end)")
        except Exception:  # noqa: BLE001 - chorus's own bound still catches it
            pass

    def _close_through(self, number):
        with self._closed:
            self.closed_before = max(self.closed_before, number)
            self._closed.notify_all()

    def _send(self, line):
        with self._lock:
            try:
                self._socket.sendall(line.encode())
            except OSError:
                pass  # the driver is gone or unreachable: nothing to tell it then

    def hello(self, rank, size):
        """The first word, once per process."""
        if not self._said_hello:
            self._said_hello = True
            # The host the driver started this rank on where it says (--worlds ucx).
            host = os.environ.get("CHORUS_ELASTIC_HOST") or socket.gethostname()
            self._send(protocol.hello(self._token, rank, size, host, os.getpid()))

    def commit(self, number):
        self._send(protocol.commit(number))

    def resumed(self, number):
        self._send(protocol.resumed(number))

    def growing(self, number):
        self._send(protocol.growing(number))

    def grown(self, number, size):
        self._send(protocol.grown(number, size))

    def lost(self, reason, in_place, wait_seconds):
        """Tells the driver that a collective failed, and waits up to `wait_seconds` for its
        word: the ranks of the current world to go on with in this process (when `in_place`:
        this process can), or None: leave for a restart."""
        self._send(protocol.lost("in-place" if in_place else "restart", reason))
        try:
            return self._verdicts.get(timeout=wait_seconds)
        except queue.Empty:
            return None

    def opened(self, wait_seconds):
        """The world the driver says to open first (worlds without MPI), or None."""
        try:
            verdict = self._verdicts.get(timeout=wait_seconds)
        except queue.Empty:
            return None
        return verdict[1] if isinstance(verdict, tuple) else None

    def address(self, world, hex_address):
        self._send(protocol.address(world, hex_address))

    def shut(self):
        self._send(protocol.shut())

    def table(self, world, wait_seconds):
        """(rank, [hex address, ...]) of world `world` once the driver sends it, or None: none
        in time, or a member was lost first (lost_while_forming then names it)."""
        deadline = time.monotonic() + wait_seconds
        self.lost_while_forming = None
        while True:
            try:
                table = self._tables.get(timeout=max(deadline - time.monotonic(), 0.0))
            except queue.Empty:
                return None
            if table is None:
                return None
            if table[0] == "lost" and table[2] == world:
                self.lost_while_forming = table[1]
                return None
            if table[0] == world:
                return table[1], table[2]

    def closed(self, world, wait_seconds):
        """Waits until every rank is done with world `world` (the driver's close); False when
        the word did not come in time."""
        with self._closed:
            return self._closed.wait_for(lambda: self.closed_before > world, wait_seconds)

    def leave(self, how, text=""):
        """Says how this rank leaves ('done', 'restart' with the reason, 'failed' with the
        error) and closes; after 'done' the connection stays until the process ends, so that
        the driver sees when it did."""
        self._send(protocol.bye(how, text))
        if how != "done":
            self.close()

    def close(self):
        try:
            self._socket.shutdown(socket.SHUT_WR)
        except OSError:
            pass
