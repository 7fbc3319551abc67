"""PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019): low-rank compression of gradient
matrices with error feedback, as torch 1.13's DDP hook (ddp_comm_hooks/powerSGD_hook.py)
computes it. This module holds the compressor's options (hvd.Compression.powersgd) and its
arithmetic; DistributedOptimizer (optimizer.py) and the DDP hook (comm_hooks.py) move the
factors with their own collectives.

One step for a gradient G of n x m (its first dimension by the rest), rank r, on every rank i:

    M_i = G_i + E_i                      E_i: this rank's residual (error feedback), 0 at first
    Q   = orthogonalize(Q)               Q: m x r, last step's (warm start), first from a seed
    P   = average over ranks of M_i Q    the first allreduce: n x r
    P   = orthogonalize(P)
    Q   = average over ranks of M_i^T P  the second allreduce: m x r
    A   = P Q^T                          the same on every rank: the averaged gradient's
    E_i = M_i - A                        rank-r approximation, which replaces G_i

(n + m) r numbers travel instead of n m. The products are linear in M_i, so averaging P and Q
averages the M_i: A approximates the average of the M_i, and over steps the approximations
plus the ranks' average residual add up to the sum of the averaged gradients. Orthogonalizing
Q before it is used is torch's addition to the paper (the approximation is the same; the
products are better conditioned)."""
import math
import zlib

import torch

from .. import _library as c


class PowerSGD:
    """hvd.Compression.powersgd(rank): gradients that are matrices (a dimension or more after
    the first, n x m with n the first) travel as two rank-`rank` factors where that is smaller,
    (n + m) * rank * min_compression_rate < n * m; vectors and small matrices travel whole.
    start_iter: the number of steps that first average every gradient whole (a warm-up, as
    torch's start_powerSGD_iter). error_feedback: what the approximation misses is added to
    the next step's gradient. warm_start: each step starts from the previous step's Q (else
    from a fresh random one). seed: the seed of the random starting Q's, the same on every
    rank."""
    wire = c.COMPRESSION_NONE  # for the gradients that travel whole

    def __init__(self, rank=4, start_iter=0, min_compression_rate=1.0, error_feedback=True,
                 warm_start=True, seed=0):
        if not isinstance(rank, int) or isinstance(rank, bool) or rank < 1:
            raise ValueError(f"Compression.powersgd(rank={rank!r}): the rank is a whole "
                             "number >= 1")
        if not isinstance(start_iter, int) or isinstance(start_iter, bool) or start_iter < 0:
            raise ValueError(f"Compression.powersgd(start_iter={start_iter!r}): a number of "
                             "steps >= 0")
        if not (isinstance(min_compression_rate, (int, float)) and
                math.isfinite(min_compression_rate) and min_compression_rate > 0):
            raise ValueError(f"Compression.powersgd(min_compression_rate="
                             f"{min_compression_rate!r}): a finite number > 0")
        if not isinstance(seed, int) or seed < 0:
            raise ValueError(f"Compression.powersgd(seed={seed!r}): a whole number >= 0")
        self.rank = rank
        self.start_iter = start_iter
        self.min_compression_rate = float(min_compression_rate)
        self.error_feedback = bool(error_feedback)
        self.warm_start = bool(warm_start)
        self.seed = seed

    def __repr__(self):
        return (f"Compression.powersgd(rank={self.rank}, start_iter={self.start_iter}, "
                f"min_compression_rate={self.min_compression_rate}, "
                f"error_feedback={self.error_feedback}, warm_start={self.warm_start}, "
                f"seed={self.seed})")

    # Horovod's compressor interface: PowerSGD needs its state and its own collectives, so a
    # collective that compresses through it (reducescatter) refuses it rather than sending the
    # tensor whole under PowerSGD's name.
    def compress(self, tensor):
        refuse_one_collective(self)

    @staticmethod
    def decompress(tensor, context):
        return tensor

    def factor_rank(self, tensor):
        """The rank of the factors `tensor` travels as, or 0 where it travels whole (a vector,
        a matrix too small to gain, a dtype that is not a real floating point one)."""
        if tensor.dim() < 2 or not tensor.dtype.is_floating_point or tensor.is_sparse:
            return 0
        n = tensor.shape[0]
        m = tensor.numel() // n if n else 0
        r = min(n, m, self.rank)
        return r if (n + m) * r * self.min_compression_rate < n * m else 0


def refuse_one_collective(compression):
    """Raises ValueError: a single collective (hvd.allreduce, reducescatter) cannot take
    PowerSGD, which keeps state from step to step."""
    raise ValueError(f"compression={compression!r}: PowerSGD compresses gradients step after "
                     "step, in DistributedOptimizer(compression=Compression.powersgd(rank)) or "
                     "the DDP hook chorus.torch.comm_hooks.powersgd_hook, not in one "
                     "collective")


def orthogonalize(matrix):
    """The Q of matrix's reduced QR factorization, with R's diagonal made non-negative: the
    orthonormal basis Gram-Schmidt gives for a matrix of full column rank (LAPACK's signs would
    otherwise depend on rounding). A column that is zero (a gradient of zeros) gives a unit
    column, never a NaN."""
    q, r = torch.linalg.qr(matrix)
    negative = (torch.diagonal(r) < 0).to(q.dtype)
    return q * (1.0 - 2.0 * negative)


def initial_q(m, rank, seed, key, dtype=torch.float32):
    """The m x rank starting Q of the matrix called `key`: standard normal values from a
    generator seeded with (seed, CRC-32 of key), so the same on every rank and independent of
    the order the gradients come in."""
    generator = torch.Generator().manual_seed(seed * (1 << 32) + zlib.crc32(key.encode()))
    return torch.randn(m, rank, generator=generator, dtype=torch.float64).to(dtype)


def _compute_dtype(dtype):
    """float64 gradients are computed in float64, the others (float32, float16, bfloat16) in
    float32."""
    return torch.float64 if dtype == torch.float64 else torch.float32


class _Matrix:
    """One gradient's step in progress: M, and the factor that travels next."""

    def __init__(self, key, gradient, m, p):
        self.key = key
        self.gradient = gradient
        self.m = m
        self.p = p
        self.q = None


class LowRankState:
    """A compressor's state on this rank: each matrix's Q (the same on every rank) and residual
    (this rank's), by key, and the count of steps taken, which decides the warm-up."""

    def __init__(self, options):
        self.options = options
        self.q = {}
        self.residual = {}
        # A second buffer of each matrix's size, where the next step's M is made; with error
        # feedback it swaps with the residual at the step's end. Reused, so that a step does
        # not allocate (and fault in) two model-sized buffers anew: at ResNet-50's 25.6 M
        # values that was about a quarter of the step.
        self.spare = {}
        self.iteration = 0

    def factor_rank(self, tensor):
        """As PowerSGD.factor_rank, and 0 during the warm-up."""
        if self.iteration < self.options.start_iter:
            return 0
        return self.options.factor_rank(tensor)

    def begin(self, key, gradient, scale=1.0):
        """M = gradient * scale + residual and this rank's P = M Q, to be averaged over the
        ranks. Keeps nothing yet: a step given up (load_state_dict) leaves the state as it
        was."""
        options = self.options
        n = gradient.shape[0]
        dtype = _compute_dtype(gradient.dtype)
        g = gradient.detach().reshape(n, -1)
        m = self.spare.get(key)
        if m is None or m.shape != g.shape or m.dtype != dtype or m.device != g.device:
            m = self.spare[key] = torch.empty(g.shape, dtype=dtype, device=g.device)
        residual = self.residual.get(key)
        if options.error_feedback and residual is not None:
            if residual.shape != m.shape:
                raise ValueError(f"PowerSGD: the residual of {key} is {tuple(residual.shape)}, "
                                 f"its gradient {tuple(m.shape)} as a matrix (a state_dict "
                                 "of another model?)")
            # M = residual + scale * G in one pass (a loaded residual may lie elsewhere).
            torch.add(residual.to(m), g.to(dtype), alpha=scale, out=m)
        elif scale != 1.0:
            torch.mul(g.to(dtype), scale, out=m)
        else:
            m.copy_(g)
        r = options.factor_rank(gradient)
        q = self.q.get(key) if options.warm_start else None
        if q is None or q.shape != (m.shape[1], r):
            seed_key = key if options.warm_start else f"{key}@{self.iteration}"
            q = initial_q(m.shape[1], r, options.seed, seed_key, dtype)
        return _Matrix(key, gradient, m, torch.matmul(m, orthogonalize(q.to(m))))

    @staticmethod
    def middle(matrix):
        """After P was averaged (in place): P orthogonalized, and this rank's Q = M^T P, to be
        averaged over the ranks."""
        matrix.p = orthogonalize(matrix.p)
        # (P^T M)^T rather than M^T P: the same product, 5-7x faster with the reference BLAS
        # that Debian's torch uses (a 512 x 4608 M at rank 4, medians of interleaved runs).
        matrix.q = torch.matmul(matrix.p.t(), matrix.m).t().contiguous()
        return matrix.q

    def end(self, matrix):
        """After Q was averaged (in place): the gradient becomes P Q^T; the residual and Q are
        kept for the next step."""
        # Q^T made contiguous first: 1.3-1.7x faster there (the same measurement). The product
        # goes straight into the gradient where it has M's dtype and layout.
        gradient, key = matrix.gradient, matrix.key
        with torch.no_grad():
            if gradient.dtype == matrix.m.dtype and gradient.is_contiguous():
                approximation = gradient.view(matrix.m.shape)
                torch.matmul(matrix.p, matrix.q.t().contiguous(), out=approximation)
            else:
                approximation = torch.matmul(matrix.p, matrix.q.t().contiguous())
                gradient.copy_(approximation.view_as(gradient))
        if self.options.error_feedback:
            # M - P Q^T is the new residual; the old residual's buffer makes the next M.
            old = self.residual.get(key)
            self.residual[key] = matrix.m.sub_(approximation)
            if old is not None and old.shape == matrix.m.shape and old.dtype == matrix.m.dtype \
                    and old.device == matrix.m.device:
                self.spare[key] = old
            else:
                self.spare.pop(key, None)
        self.q[key] = matrix.q

    def reset(self):
        """Back to the start: no Q's, no residuals, no steps."""
        self.q.clear()
        self.residual.clear()
        self.spare.clear()
        self.iteration = 0

    def state_dict(self, index_of):
        """The state, keyed by index_of(key) (an optimizer's parameter numbers), with copies of
        its tensors."""
        return {"iteration": self.iteration,
                "q": {index_of(key): q.clone() for key, q in self.q.items()},
                "residual": {index_of(key): e.clone() for key, e in self.residual.items()}}

    def load_state_dict(self, state, key_of):
        """What state_dict() gave (None: reset); key_of maps its indices back to keys."""
        self.reset()
        if state is None:
            return
        self.iteration = int(state["iteration"])
        self.q = {key_of(index): q.clone() for index, q in state["q"].items()}
        self.residual = {key_of(index): e.clone() for index, e in state["residual"].items()}
