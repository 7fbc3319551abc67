"""chorus — collective communication for data-parallel training (Python binding).

    import chorus.torch as hvd      # Horovod-style API for PyTorch tensors
    import chorus.numpy as cn       # the same collectives on numpy arrays

The binding loads libchorus with ctypes: no compiled extension. Set CHORUS_LIBRARY to use a
particular build of the library."""
from . import _library
from .core import (ChorusError, cross_rank, cross_size, init, is_initialized, join, local_rank,
                   local_size, rank, shutdown, size, start_timeline, stop_timeline,
                   timeline_mark)

# The library's version, the one version there is (meson.build's): the binding is part of it.
__version__ = library_version = _library.lib.chorus_version().decode()

__all__ = ["ChorusError", "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
           "local_size", "cross_rank", "cross_size", "join", "start_timeline", "stop_timeline",
           "timeline_mark", "__version__", "library_version"]
