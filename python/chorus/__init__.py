"""chorus — collective communication for data-parallel training (Python binding).

    import chorus.torch as hvd      # Horovod-style API for PyTorch tensors
    import chorus.numpy as cn       # the same collectives on numpy arrays

The binding loads libchorus with ctypes: no compiled extension. Set CHORUS_LIBRARY to use a
particular build of the library."""
import warnings

from . import _library
from ._version import __version__
from .core import (ChorusError, cross_rank, cross_size, init, is_initialized, join, local_rank,
                   local_size, rank, shutdown, size, start_timeline, stop_timeline,
                   timeline_mark)

library_version = _library.lib.chorus_version().decode()
if library_version != __version__:
    warnings.warn(f"chorus binding {__version__} loaded libchorus {library_version}; "
                  "install matching versions (or set CHORUS_LIBRARY)")

__all__ = ["ChorusError", "init", "shutdown", "is_initialized", "rank", "size", "local_rank",
           "local_size", "cross_rank", "cross_size", "join", "start_timeline", "stop_timeline",
           "timeline_mark", "__version__", "library_version"]
