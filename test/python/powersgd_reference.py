"""PowerSGD in float64 numpy, written from the paper (Vogels et al. 2019, Algorithm 1 with
error feedback) and torch's hook, apart from chorus's code: the reference of test_powersgd.py
and test_comm_hooks.py. It is fed every rank's gradient, which the tests know: the model Known
here, whose gradients are the inputs `gradient` makes from (step, rank, parameter)."""
import zlib

import numpy as np
import torch

from checks import check

# name: shape. With rank 2: w1 and w2 (6 x 12) and unused (no gradient: zeros) are factored,
# small (2 * (3 + 3) > 9) and one (a single row) and bias (a vector) travel whole.
SHAPES = {"w1": (7, 5), "w2": (6, 3, 4), "small": (3, 3), "bias": (11,), "one": (1, 4),
          "unused": (5, 8)}
FACTORED = ("w1", "w2", "unused")
RANK = 2


class Known(torch.nn.Module):
    """Its loss is sum(p * x) over the parameters but `unused`: each gradient is the x given.
    `unused` gets no gradient, or with touch_unused (which DDP needs) a zero one."""

    def __init__(self, touch_unused=False):
        super().__init__()
        self.touch_unused = touch_unused
        for name, shape in SHAPES.items():
            self.register_parameter(name, torch.nn.Parameter(torch.zeros(shape)))

    def forward(self, inputs):
        loss = sum((getattr(self, name) * x).sum() for name, x in inputs.items())
        return loss + 0.0 * self.unused.sum() if self.touch_unused else loss


def gradient(step, rank, name):
    """A rank's gradient of `name` at `step` (float32 values), zero for the unused one."""
    if name == "unused":
        return np.zeros(SHAPES[name], dtype=np.float32)
    values = np.random.default_rng([step, rank, list(SHAPES).index(name)])
    return values.standard_normal(SHAPES[name]).astype(np.float32)


def inputs(step, rank):
    """Known's inputs that give this rank's gradients at `step`."""
    return {name: torch.from_numpy(gradient(step, rank, name))
            for name in SHAPES if name != "unused"}


def close(actual, expected, tolerance, what):
    """Checks |actual - expected| <= tolerance * (1 + max |expected|) everywhere."""
    actual = np.asarray(actual, dtype=np.float64)
    error = np.max(np.abs(actual - expected)) if actual.size else 0.0
    bound = tolerance * (1.0 + np.max(np.abs(expected)) if expected.size else 1.0)
    check(actual.shape == expected.shape and error <= bound,
          f"{what}: max error {error:.3g} > {bound:.3g} (shapes {actual.shape}, "
          f"{expected.shape})")


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
