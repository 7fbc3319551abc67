"""Elastic training, framework-neutral parts (Horovod's horovod.common.elastic): State,
ObjectState, the run decorator and the commit store. chorus.torch.elastic binds them to torch
(TorchState, ElasticSampler); chorusrun --elastic (chorus.launcher.elastic) is the driver.
docs/elastic.md describes the design."""
from ..core import HostsUpdatedInterrupt
from .run import EXIT_RESTART, run_fn
from .state import ObjectState, State
from .store import CommitStore

__all__ = ["State", "ObjectState", "run_fn", "CommitStore", "HostsUpdatedInterrupt",
           "EXIT_RESTART"]
