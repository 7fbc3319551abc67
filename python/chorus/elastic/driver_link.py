"""A rank's line to chorusrun's elastic driver (CHORUS_ELASTIC_DRIVER=TOKEN@ADDRESS:PORT).

One TCP connection per rank, lines of text. The rank says who it is (hello, with the job's
token: the driver drops a connection that does not present it), rank 0 reports
commits, and every rank says how it leaves (bye done | bye restart REASON | bye failed TEXT). A
rank that disappears without a bye has failed: that is how the driver tells the host that failed
from the hosts whose ranks it stopped. The driver sends `hosts-updated NUMBER KIND` when the
discovered hosts change; State.check_host_updates reads them."""
import os
import queue
import socket
import sys
import threading


class DriverLink:
    def __init__(self, address):
        self._token, _, address = address.rpartition("@")
        host, _, port = address.rpartition(":")
        self._socket = socket.create_connection((host, int(port)), timeout=30)
        self._socket.settimeout(None)
        self._lock = threading.Lock()
        self.updates = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="chorus-elastic-driver",
                                        daemon=True)
        self._reader.start()

    @classmethod
    def from_environment(cls):
        """The link to the driver that started this rank, or None without one."""
        address = os.environ.get("CHORUS_ELASTIC_DRIVER")
        if not address:
            return None
        try:
            return cls(address)
        except OSError as e:
            print(f"chorus.elastic: cannot reach the elastic driver at {address}: {e}; going on "
                  "without it (no host updates)", file=sys.stderr, flush=True)
            return None

    def _read(self):
        buffered = b""
        while True:
            try:
                data = self._socket.recv(4096)
            except OSError:
                return
            if not data:
                return
            buffered += data
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                words = line.decode(errors="replace").split()
                if len(words) == 3 and words[0] == "hosts-updated":
                    self.updates.put((int(words[1]), words[2]))

    def send(self, line):
        with self._lock:
            try:
                self._socket.sendall((line.replace("\n", " ") + "\n").encode())
            except OSError:
                pass  # the driver is gone or unreachable: nothing to tell it then

    def hello(self, rank, size):
        self.send(f"hello {self._token} {rank} {size} {socket.gethostname()} {os.getpid()}")

    def leave(self, how):
        """Says how this rank leaves (`done`, `restart REASON`, `failed TEXT`) and closes."""
        self.send(f"bye {how}")
        self.close()

    def close(self):
        try:
            self._socket.shutdown(socket.SHUT_WR)
        except OSError:
            pass
