"""PowerSGD in float64 numpy, written from the paper (Vogels et al. 2019, Algorithm 1 with
error feedback) and torch's hook, apart from chorus's code: the reference of test_powersgd.py
and test_comm_hooks.py. It is fed every rank's gradient, which the tests know."""
import zlib

import numpy as np
import torch


def gram_schmidt(matrix):
    """Orthonormal columns by classical Gram-Schmidt, in float64; a column that vanishes stays
    zero (its contribution to P P^T M is zero either way)."""
    result = np.array(matrix, dtype=np.float64)
    for i in range(result.shape[1]):
        for j in range(i):
            result[:, i] -= (result[:, j] @ result[:, i]) * result[:, j]
        norm = np.linalg.norm(result[:, i])
        result[:, i] = result[:, i] / norm if norm > 0 else 0.0
    return result


def starting_q(m, rank, seed, key):
    """The documented starting Q: torch's standard normal values (float64) from a generator
    seeded with seed * 2**32 + CRC-32 of the key."""
    generator = torch.Generator().manual_seed(seed * (1 << 32) + zlib.crc32(key.encode()))
    return torch.randn(m, rank, generator=generator, dtype=torch.float64).numpy()


class ReferencePowerSGD:
    """One matrix's PowerSGD over `ranks` ranks: warm start, error feedback."""

    def __init__(self, key, rank, ranks, seed=0, error_feedback=True):
        self.key, self.rank, self.ranks, self.seed = key, rank, ranks, seed
        self.error_feedback = error_feedback
        self.q = None
        self.residuals = [None] * ranks

    def step(self, gradients):
        """gradients: every rank's n x m gradient. Returns the approximation (the same on every
        rank), the averaged Q and every rank's residual."""
        ms = [np.array(g, dtype=np.float64).reshape(g.shape[0], -1) for g in gradients]
        if self.error_feedback:
            ms = [m + e if e is not None else m for m, e in zip(ms, self.residuals)]
        if self.q is None:
            self.q = starting_q(ms[0].shape[1], self.rank, self.seed, self.key)
        q = gram_schmidt(self.q)
        p = gram_schmidt(sum(m @ q for m in ms) / self.ranks)
        self.q = sum(m.T @ p for m in ms) / self.ranks
        approximation = p @ self.q.T
        if self.error_feedback:
            self.residuals = [m - approximation for m in ms]
        return approximation, self.q, self.residuals
