"""Horovod's process sets for chorus.torch (horovod/common/process_sets.py): collectives among
some ranks, each set added and removed on every rank alike."""
from ..core import process_set_add as _core_process_set_add
from ..core import process_set_remove as _core_process_set_remove
from ..core import rank, size


class ProcessSet:
    """Horovod's process set: collectives among `ranks` alone (None: every rank, the global
    set). A set is usable once add_process_set (or init(process_sets=...)) has added it on every
    rank; its collectives then wait only for its members."""

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = 0 if ranks is None else None

    def _id(self):
        if self.process_set_id is None:
            raise ValueError(f"{self!r} has not been added: call add_process_set() on every "
                             "rank first")
        return self.process_set_id

    def size(self):
        return size() if self.ranks is None else len(self.ranks)

    def rank(self):
        """This rank's rank within the set (-1 when it is not a member)."""
        if self.ranks is None:
            return rank()
        return self.ranks.index(rank()) if rank() in self.ranks else -1

    def included(self):
        return self.ranks is None or rank() in self.ranks

    def __repr__(self):
        return "ProcessSet(global)" if self.ranks is None else f"ProcessSet({self.ranks})"


global_process_set = ProcessSet()


def _set_id(process_set):
    """The library's id of a process_set= argument (None: the global set)."""
    if process_set is None:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError(f"process_set={process_set!r} must be a ProcessSet")
    return process_set._id()


def _set_size(process_set):
    return size() if process_set is None else process_set.size()


def _set_rank(process_set):
    return rank() if process_set is None else process_set.rank()


def add_process_set(process_set):
    """Adds a set (a ProcessSet or a list of ranks); every rank must call it alike, in the same
    order. Returns the ProcessSet, now usable as process_set=."""
    candidate = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if candidate.ranks is None:
        raise ValueError("the global process set exists already")
    if candidate.process_set_id is not None:
        raise ValueError(f"{candidate!r} has been added already (id {candidate.process_set_id})")
    candidate.process_set_id = _core_process_set_add(candidate.ranks)
    return candidate


def remove_process_set(process_set):
    """Removes an added set (every rank alike); returns True, as Horovod does."""
    if process_set is global_process_set or process_set.ranks is None:
        raise ValueError("the global process set cannot be removed")
    _core_process_set_remove(process_set._id())
    process_set.process_set_id = None
    return True
