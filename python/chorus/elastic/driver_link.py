"""A rank's line to chorusrun's elastic driver (CHORUS_ELASTIC_DRIVER=TOKEN@ADDRESS:PORT): the
protocol is chorus.launcher.protocol's, which the driver speaks too. Updates the driver sends
(hosts-updated NUMBER KIND) queue up in `updates`; State.check_host_updates reads them."""
import os
import queue
import socket
import sys
import threading

from ..launcher import protocol


class DriverLink:
    def __init__(self, address):
        self._token, host, port = protocol.split_driver_address(address)
        self._socket = socket.create_connection((host, port), timeout=30)
        self._socket.settimeout(None)
        self._lock = threading.Lock()
        self.updates = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="chorus-elastic-driver",
                                        daemon=True)
        self._reader.start()

    @classmethod
    def from_environment(cls):
        """The link to the driver that started this rank, or None without one."""
        address = os.environ.get(protocol.ENVIRONMENT)
        if not address:
            return None
        try:
            return cls(address)
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
                return
            if not data:
                return
            buffered += data
            while b"\n" in buffered:
                line, buffered = buffered.split(b"\n", 1)
                message = protocol.parse(line.decode(errors="replace"))
                if message is not None and message.kind == "hosts-updated":
                    self.updates.put((int(message.fields[0]), message.fields[1]))

    def _send(self, line):
        with self._lock:
            try:
                self._socket.sendall(line.encode())
            except OSError:
                pass  # the driver is gone or unreachable: nothing to tell it then

    def hello(self, rank, size):
        self._send(protocol.hello(self._token, rank, size, socket.gethostname(), os.getpid()))

    def commit(self, number):
        self._send(protocol.commit(number))

    def resumed(self, number):
        self._send(protocol.resumed(number))

    def leave(self, how, text=""):
        """Says how this rank leaves ('done', 'restart' with the reason, 'failed' with the
        error) and closes."""
        self._send(protocol.bye(how, text))
        self.close()

    def close(self):
        try:
            self._socket.shutdown(socket.SHUT_WR)
        except OSError:
            pass
