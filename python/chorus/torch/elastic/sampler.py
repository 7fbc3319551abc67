"""ElasticSampler: Horovod's sampler for elastic jobs, which splits what is left of an epoch
among the ranks there are now.

Every rank walks the same permutation of the dataset (seeded by seed + epoch). Training records
each batch (record_batch), which advances `processed_num`, the length of the permutation's
prefix that the whole job has processed: ranks process in step, so it is the same number on every
rank. After a restart on a different number of ranks, the rest of the permutation is split
among them, so every sample of the epoch is processed once (plus at most size() - 1 repeated at
the end to make the shares equal, as torch's DistributedSampler does)."""
import math
import random

import torch.utils.data

from ...core import rank, size


class ElasticSampler(torch.utils.data.Sampler):
    def __init__(self, dataset, shuffle=True, seed=0):
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_num = 0
        self.processed_indices = set()  # Horovod's older sampler's field; kept for scripts
        self.reset()

    def set_epoch(self, epoch):
        """Starts `epoch` with nothing processed (call it when an epoch ends, as Horovod asks,
        so that a resumed epoch keeps what it did)."""
        self.epoch = epoch
        self.processed_num = 0
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Every rank processed one batch of batch_size samples."""
        self.processed_num += batch_size * self.num_replicas

    def record_indices(self, indices):
        """This rank processed these indices (kept for scripts; the split follows
        processed_num)."""
        self.processed_indices.update(int(i) for i in indices)

    def state_dict(self):
        return {"epoch": self.epoch, "processed_num": self.processed_num}

    def load_state_dict(self, state_dict):
        self.epoch = state_dict["epoch"]
        self.processed_num = state_dict["processed_num"]
        self.reset()

    def reset(self):
        """Splits what is left of the epoch among the ranks of the job as it is now."""
        self.num_replicas = size()
        self.rank = rank()
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]
        self.num_samples = math.ceil(len(self.remaining_indices) / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        padded = self.remaining_indices + \
            self.remaining_indices[:self.total_size - len(self.remaining_indices)]
        self.indices = padded[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
