"""SyncBatchNorm for chorus.torch, as horovod/torch/sync_batch_norm.py."""
import itertools

import torch

from .mpi_ops import Sum, allreduce


class SyncBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """Batch normalization whose statistics are those of the whole batch across ranks, as
    Horovod's SyncBatchNorm: in training, each channel's count, sum and sum of squares are
    allreduced (differentiably, so backward is right too); in evaluation the running statistics
    are used as in torch's BatchNorm. Every rank must run the module the same number of times."""

    _instances = itertools.count()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self._name = f"sync_batch_norm.{next(SyncBatchNorm._instances)}"
        self._calls = itertools.count()

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm expects at least 2D input (got {input.dim()}D)")

    def forward(self, input):
        self._check_input_dim(input)
        if not (self.training or not self.track_running_stats):
            return torch.nn.functional.batch_norm(input, self.running_mean, self.running_var,
                                                  self.weight, self.bias, False, 0.0, self.eps)
        channels = input.shape[1]
        flat = input.transpose(0, 1).reshape(channels, -1)  # channel-major
        local = torch.cat([flat.sum(1), (flat * flat).sum(1),
                           torch.full((1,), float(flat.shape[1]), dtype=flat.dtype)])
        total = allreduce(local, op=Sum, name=f"{self._name}.{next(self._calls)}")
        count = total[-1]
        mean = total[:channels] / count
        variance = total[channels:2 * channels] / count - mean * mean
        if self.training and self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked += 1
                momentum = (1.0 / float(self.num_batches_tracked) if self.momentum is None
                            else self.momentum)
                unbiased = variance * count / max(count - 1, 1)
                self.running_mean.mul_(1 - momentum).add_(mean.detach() * momentum)
                self.running_var.mul_(1 - momentum).add_(unbiased.detach() * momentum)
        shape = [1, channels] + [1] * (input.dim() - 2)
        normalized = (input - mean.view(shape)) / torch.sqrt(variance.view(shape) + self.eps)
        if self.affine:
            normalized = normalized * self.weight.view(shape) + self.bias.view(shape)
        return normalized


