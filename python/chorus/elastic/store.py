"""Where a commit survives the processes that made it.

MPI (Open MPI 4.1, MPICH 4.0) cannot drop a dead process from a communicator, so chorus's elastic
driver restarts every rank when the hosts change. What the ranks committed must outlive them: each
commit is also written, by one rank per host, into a directory of that host
(CHORUS_ELASTIC_STORE/<hostname>/, by default under /dev/shm). After a restart the ranks agree on
the newest commit any of them can read and take it from a rank that has it (State._resume).

A commit is written to a temporary file and renamed into place, so a process killed while writing
leaves the previous commit readable; only the newest commit is kept."""
import os
import re
import socket

_COMMIT_FILE = re.compile(r"^commit-(\d+)\.bin$")


class CommitStore:
    def __init__(self, root, host=None):
        self.directory = os.path.join(root, host or socket.gethostname())

    @classmethod
    def from_environment(cls):
        """The store the elastic driver named (CHORUS_ELASTIC_STORE), or None."""
        root = os.environ.get("CHORUS_ELASTIC_STORE")
        return cls(root) if root else None

    def _commits(self):
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return []
        return sorted(int(m.group(1)) for m in map(_COMMIT_FILE.match, names) if m)

    def newest(self):
        """The number of the newest commit on this host, or -1."""
        commits = self._commits()
        return commits[-1] if commits else -1

    def _path(self, number):
        return os.path.join(self.directory, f"commit-{number}.bin")

    def read(self, number):
        with open(self._path(number), "rb") as f:
            return f.read()

    def write(self, number, payload):
        os.makedirs(self.directory, exist_ok=True)
        temporary = os.path.join(self.directory, f".commit-{number}.{os.getpid()}.tmp")
        with open(temporary, "wb") as f:
            f.write(payload)
        os.replace(temporary, self._path(number))
        for older in self._commits():
            if older < number:
                try:
                    os.unlink(self._path(older))
                except FileNotFoundError:
                    pass

    def remove(self):
        """The job is done: its commits (and any half-written one) are no longer needed."""
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            names = []
        for name in names:
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self.directory)
            os.rmdir(os.path.dirname(self.directory))  # the last host of a shared directory
        except OSError:
            pass
