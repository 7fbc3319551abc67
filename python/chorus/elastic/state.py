"""Horovod's elastic State and ObjectState, with commits that survive a restart of the ranks.

As in Horovod: commit() saves the state in memory (restore() goes back to it after a failed
collective) and then checks for host updates, raising HostsUpdatedInterrupt on every rank at the
same commit. sync() makes every rank hold rank 0's state. Reset callbacks run after the job was
brought to new hosts.

What chorus adds: a commit is also written to the job's commit store (store.py), and when the
ranks start again after a change of hosts, _resume() agrees on the newest commit that any rank
can read and loads it on every rank from one that has it, so a new host gets it and no rank
trains on stale or mixed state."""
import copy
import pickle
import queue

from ..core import HostsUpdatedInterrupt
from .store import CommitStore

# Horovod's HostUpdateResult bits, as the driver sends them (KIND of hosts-updated), and
# chorus's own for hosts the running ranks add in place (the driver's grow).
_UPDATE_BITS = {"removed": 1, "added": 2, "changed": 3, "grow": 4}


class GrowInterrupt(HostsUpdatedInterrupt):
    """Raised by commit() on every rank alike when the driver asked for ranks on `hosts` (a
    host once per rank) in place: chorus.elastic.run adds them (chorus_grow) and goes on in
    these processes. A HostsUpdatedInterrupt, for code that catches those."""

    def __init__(self, hosts):
        super().__init__(False)
        self.hosts = hosts


class State:
    """The state of a training loop under chorus.elastic.run: subclasses say how to save,
    restore and sync it (Horovod's State)."""

    def __init__(self, bcast_object, get_rank, allgather_object=None, get_local_rank=None,
                 serialize=pickle.dumps, deserialize=pickle.loads):
        self._bcast_object = bcast_object
        self._allgather_object = allgather_object
        self._rank = get_rank
        self._local_rank = get_local_rank or get_rank
        self._serialize = serialize
        self._deserialize = deserialize
        self._reset_callbacks = []
        self._host_messages = queue.Queue()
        self._grow_hosts = {}  # update number -> the hosts of the driver's grow
        self._last_updated = 0
        self._commits = 0
        self._store = CommitStore.from_environment()
        self._link = None  # chorus.elastic.run connects it to the driver

    def register_reset_callbacks(self, callbacks):
        """Functions to call after the job was brought to a new set of hosts (to scale the
        learning rate by the new size, say)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        for callback in self._reset_callbacks:
            callback()

    def on_hosts_updated(self, timestamp, update_res):
        self._host_messages.put((timestamp, update_res))

    def commit(self):
        """Saves the state (in memory and in the commit store), then raises
        HostsUpdatedInterrupt on every rank if the driver reported new or lost hosts."""
        self.save()
        self._commits += 1
        self._persist()
        self.check_host_updates()

    def check_host_updates(self):
        """Raises HostsUpdatedInterrupt on every rank alike when the driver has reported a
        change of hosts since the last check (rank 0's view decides): GrowInterrupt when all
        it reported is ranks to add in place."""
        if self._link is None:
            return  # no driver: nothing can report a change
        while not self._link.updates.empty():
            number, kind, *hosts = self._link.updates.get()
            if kind == "grow":
                self._grow_hosts[number] = hosts[0]
            self._host_messages.put((number, _UPDATE_BITS.get(kind, 3)))
        previous = latest = self._last_updated
        update = 0
        while not self._host_messages.empty():
            number, bits = self._host_messages.get()
            if number > latest:
                latest = number
                update |= bits
        hosts = self._grow_hosts.get(latest) if update == _UPDATE_BITS["grow"] else None
        self._grow_hosts.clear()
        previous, self._last_updated, update, hosts = self._bcast_object(
            (previous, latest, update, hosts))
        if self._last_updated > previous:
            if hosts:
                raise GrowInterrupt(hosts)
            # A grow among other changes is a change like any: the job starts again.
            raise HostsUpdatedInterrupt(update == _UPDATE_BITS["removed"])

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self):
        raise NotImplementedError()

    # What a commit holds, as one picklable object (subclasses).
    def _saved(self):
        raise NotImplementedError()

    def _load_saved(self, saved):
        raise NotImplementedError()

    def _persist(self):
        if self._store is not None and self._local_rank() == 0:
            self._store.write(self._commits, self._serialize(self._saved()))
        if self._link is not None and self._rank() == 0:
            self._link.commit(self._commits)

    def _resume(self):
        """After a restart: the newest commit any rank can read, loaded on every rank from the
        lowest rank that has it. Returns its number, or None when there is none (a new job)."""
        if self._store is None or self._allgather_object is None:
            return None
        newest = self._allgather_object(self._store.newest())
        best = max(newest)
        if best < 0:
            return None
        holder = newest.index(best)
        payload = self._store.read(best) if self._rank() == holder else None
        payload = self._bcast_object(payload, root_rank=holder)
        self._load_saved(self._deserialize(payload))
        self._commits = best
        if self._local_rank() == 0 and self._store.newest() != best:
            self._store.write(best, payload)  # this host has it too now
        return best

    def _resume_in_place(self):
        """After chorus was formed again in the surviving processes (restore() went back to each
        rank's own last commit): every rank takes the new rank 0's, which becomes the commit to
        go back to. Returns its number."""
        self._commits = self._bcast_object(self._commits)
        self.sync()
        self.save()
        return self._commits

    # After chorus_grow, on the ranks that were there and on the ones it added alike, the same:
    # every rank takes rank 0's state and commit number. A name of its own, so that each step
    # can be told apart (test/python/elastic_train.py reports them apart).
    _join_grown = _resume_in_place

    def _finished(self):
        """The whole job is done: its commits are no longer needed."""
        if self._store is not None and self._local_rank() == 0:
            self._store.remove()


class ObjectState(State):
    """State of plain Python objects, given as keyword arguments and read and set as attributes
    (Horovod's ObjectState). save() keeps a deep copy, so a list appended to after a commit is
    restored as it was at the commit."""

    def __init__(self, bcast_object, get_rank, allgather_object=None, get_local_rank=None,
                 serialize=pickle.dumps, deserialize=pickle.loads, **kwargs):
        self._saved_state = copy.deepcopy(kwargs)
        self._set_attributes()
        super().__init__(bcast_object, get_rank, allgather_object, get_local_rank, serialize,
                         deserialize)

    def save(self):
        self._saved_state = {name: copy.deepcopy(getattr(self, name))
                             for name in self._saved_state}

    def restore(self):
        self._set_attributes()

    def sync(self):
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._set_attributes()

    def _set_attributes(self):
        for name, value in self._saved_state.items():
            setattr(self, name, copy.deepcopy(value))

    def _saved(self):
        return {"objects": self._saved_state}

    def _load_saved(self, saved):
        self._saved_state = saved["objects"]
        self.restore()
