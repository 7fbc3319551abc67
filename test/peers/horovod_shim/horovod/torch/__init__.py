"""horovod.torch is chorus.torch: the module itself, and its submodules under Horovod's names,
so that `import horovod.torch as hvd`, `from horovod.torch.mpi_ops import synchronize` and
`hvd.elastic` reach chorus's one copy of each."""
import sys

import chorus.torch
import chorus.torch.elastic
import chorus.torch.mpi_ops

sys.modules["horovod.torch.mpi_ops"] = chorus.torch.mpi_ops
sys.modules["horovod.torch.elastic"] = chorus.torch.elastic
sys.modules[__name__] = chorus.torch
