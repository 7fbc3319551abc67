"""DistributedOptimizer for chorus.torch, as horovod/torch/optimizer.py: gradients are
allreduced as backward produces them, and step() waits for them. With int8 or int4 compression
it keeps an error feedback residual per parameter (chorus's own, compression.py)."""
import contextlib
import copy
import inspect
import warnings

import torch

from .. import _library as c
from .compression import LOSSY_DTYPES, Compression, _wire
from .mpi_ops import (_OPS, Adasum, Average, Sum, _resolve_op, allreduce_async_,
                      sparse_allreduce_async, synchronize)
from .powersgd import LowRankState, PowerSGD
from .process_sets import _set_id
from .shared_memory import (SHARED_GRADIENT_MINIMUM, share_gradient, shared_gradients_wanted,
                            shared_tensor)

# torch's own default for zero_grad(set_to_none=...): False in 1.13, True from 2.0.
_SET_TO_NONE_DEFAULT = inspect.signature(torch.optim.Optimizer.zero_grad).parameters[
    "set_to_none"].default


class _DistributedOptimizer(torch.optim.Optimizer):
    def __init__(self, params, named_parameters, compression, backward_passes_per_step, op,
                 gradient_predivide_factor, sparse_as_dense, process_set, shared,
                 error_feedback):
        super(self.__class__, self).__init__(params)
        self._process_set = process_set
        all_parameters = [p for group in self.param_groups for p in group["params"]]
        if named_parameters is not None:
            named = list(named_parameters)
            names = [name for name, _ in named]
            duplicates = sorted({name for name in names if names.count(name) > 1})
            if duplicates:
                raise ValueError("parameter names in named_parameters must be unique; "
                                 f"found duplicates: {', '.join(duplicates)}")
            known = {id(p) for _, p in named}
            unnamed = [i for i, p in enumerate(all_parameters) if id(p) not in known]
            if unnamed:
                raise ValueError("named_parameters was given, but the optimizer's parameters "
                                 f"at positions {unnamed} are not in it")
        else:
            # The same names on every rank: they follow the parameter groups' order.
            named = [(f"allreduce.noname.{group}.{index}", p)
                     for group, param_group in enumerate(self.param_groups)
                     for index, p in enumerate(param_group["params"])]
        if op == Adasum and (compression is not Compression.none or
                             gradient_predivide_factor != 1.0):
            raise ValueError("DistributedOptimizer(op=Adasum) combines whole updates: it takes "
                             "neither compression nor gradient_predivide_factor")
        if op not in _OPS:
            _resolve_op(None, op)  # raises, naming the op
        if compression is PowerSGD:
            raise ValueError("compression=Compression.powersgd takes its options: "
                             "Compression.powersgd(rank), e.g. Compression.powersgd(4)")
        low_rank = compression if isinstance(compression, PowerSGD) else None
        # The compressions whose residual chorus keeps in C (chorus_op_args.error_feedback).
        lossy = low_rank is None and _wire(compression) in (
            c.COMPRESSION_INT8, c.COMPRESSION_INT4, c.COMPRESSION_TOPK)
        if error_feedback is not None and low_rank is not None:
            low_rank = copy.copy(low_rank)  # the user's compressor stays as it was
            low_rank.error_feedback = bool(error_feedback)
        elif error_feedback and not lossy:
            raise ValueError(f"DistributedOptimizer(error_feedback=True) with compression="
                             f"{getattr(compression, '__name__', compression)!r}: error "
                             "feedback is kept for Compression.int8, .int4, .topk and .powersgd")
        if low_rank is not None and op != Average:
            raise ValueError(f"DistributedOptimizer(compression={low_rank!r}) averages the "
                             "gradients (its factors are averaged): op must be Average")
        self._names = {p: name for name, p in named}
        self._parameter_names = self._names  # Horovod's attribute, which scripts read
        # As in Horovod, a rank outside the process set steps with its own gradients.
        self._member = process_set is None or process_set.included()
        self._resparsify = set()  # sparse gradients made dense (sparse_as_dense) for the allreduce
        # With PowerSGD, the gradients it does not factor travel whole.
        self._compression = Compression.none if low_rank is not None else compression
        _wire(self._compression)
        self._low_rank = LowRankState(low_rank) if low_rank is not None else None
        self._passes = backward_passes_per_step
        self._op = op
        self._predivide = gradient_predivide_factor
        self._sparse_as_dense = sparse_as_dense
        self._sparse_dims = {}  # parameters whose gradients came sparse: their sparse dims
        self._handles = {}
        self._pass_count = {}
        self._hooks = []
        self._synchronized = False
        self._skip_synchronize = False
        self._register_hooks()
        # Gradients in the shared heap are allreduced in place on one host (shared_memory.py).
        # Each dense CPU gradient moves there when it is first allreduced (whether a parameter's
        # gradients come sparse is known only then); backward then accumulates into it, and
        # zero_grad keeps it there. Where each lies, by parameter:
        self._share = shared_gradients_wanted(shared)
        self._shared = {}
        # Error feedback for the lossy compressions, one float32 residual per parameter whose
        # gradient is a dense float32, float16 or bfloat16 tensor, on its device, made with its
        # first allreduce (_residual).
        self._feedback = lossy and error_feedback is not False and op in (Sum, Average)
        self._residuals = {}

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if not p.requires_grad:
                    continue
                self._pass_count[p] = 0
                # The gradient accumulator's hook runs when p.grad is final for this pass.
                accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
                accumulator.register_hook(self._make_hook(p))
                self._hooks.append(accumulator)

    def _allreduce_gradient(self, p):
        if p.grad is None:
            # Not used on this rank this step: it contributes zeros, as in Horovod, so that the
            # ranks that did use it are not left waiting (no entries, where its gradients are
            # sparse).
            p.grad = (self._no_entries(p) if p in self._sparse_dims and not self._sparse_as_dense
                      else torch.zeros_like(p))
        prescale = 1.0 / self._predivide
        postscale = self._predivide / self._passes if self._op == Average else 1.0 / self._passes
        if p.grad.is_sparse and not self._sparse_as_dense:
            self._allreduce_sparse_gradient(p, prescale * postscale)
            return
        if p.grad.is_sparse:
            # Horovod makes it sparse again after the allreduce (SparseAdam needs that).
            p.grad = p.grad.to_dense()
            self._resparsify.add(p)
        if self._low_rank is not None and self._low_rank.factor_rank(p.grad):
            # Averaged with the same factors as the allreduce below, applied to P and Q; the
            # passes' division is local, so that the residual is of the averaged gradient.
            # (Not moved to the shared heap: it is not allreduced in place.)
            self._handles[p] = _LowRankGradient(
                self._low_rank, self._names[p], p.grad, 1.0 / self._passes,
                lambda factor, name: allreduce_async_(
                    factor, name=name, op=Average, prescale_factor=prescale,
                    postscale_factor=self._predivide, process_set=self._process_set))
            return
        if (self._share and p not in self._resparsify and p not in self._shared and
                p.grad.device.type == "cpu" and
                p.grad.numel() * p.grad.element_size() > SHARED_GRADIENT_MINIMUM):
            self._shared[p] = share_gradient(p)
        self._handles[p] = allreduce_async_(p.grad, name=f"gradient.{self._names[p]}",
                                            op=self._op, prescale_factor=prescale,
                                            postscale_factor=postscale,
                                            compression=self._compression,
                                            process_set=self._process_set,
                                            error_feedback=self._residual(p))

    def _residual(self, p):
        """The error feedback residual of `p`'s gradient (in units of the gradient divided by
        gradient_predivide_factor, the allreduce's contribution), zeros at first, in the shared
        heap where its gradient lies there; None where there is none (error feedback off, or a
        gradient chorus does not quantize)."""
        grad = p.grad
        if not self._feedback or grad.dtype not in LOSSY_DTYPES:
            return None
        residual = self._residuals.get(p)
        if residual is None or residual.shape != grad.shape:
            residual = (shared_tensor(grad.shape) if p in self._shared
                        else torch.zeros(grad.shape, dtype=torch.float32, device=grad.device))
            self._residuals[p] = residual
        return residual

    def _allreduce_sparse_gradient(self, p, scale):
        """Horovod's way for sparse gradients (an embedding with sparse=True): their indices and
        values allgathered; the gradient is replaced by the combined one at synchronize()."""
        if self._op not in (Sum, Average):
            raise ValueError(f"parameter {self._names[p]}: sparse gradients take op Sum or "
                             "Average; pass sparse_as_dense=True for other ops")
        self._sparse_dims[p] = p.grad.sparse_dim()
        wait = sparse_allreduce_async(p.grad, f"gradient.{self._names[p]}", self._op,
                                      self._process_set)

        def finish():
            combined = wait()
            p.grad = combined * scale if scale != 1.0 else combined
        self._handles[p] = finish

    def _no_entries(self, p):
        """A sparse gradient of `p` with no entries."""
        dims = self._sparse_dims[p]
        return torch.sparse_coo_tensor(torch.empty((dims, 0), dtype=torch.int64),
                                       torch.empty((0, *p.shape[dims:]), dtype=p.dtype),
                                       p.shape)

    def _make_hook(self, p):
        def hook(*ignored):
            if self._op == Adasum or not self._member:
                return  # the gradients stay local
            if p in self._handles:
                raise AssertionError(f"gradient of {self._names[p]} computed twice before "
                                     "step() or synchronize(); with gradient accumulation set "
                                     "backward_passes_per_step")
            self._pass_count[p] += 1
            if self._pass_count[p] < self._passes:
                return
            self._pass_count[p] = 0
            self._allreduce_gradient(p)
        return hook

    def synchronize(self):
        """Waits for every gradient allreduce started by backward. Parameters whose hooks did not
        run (unused on this rank) are allreduced now, contributing zeros. With Adasum there is
        nothing to wait for: the gradients stay local."""
        if self._op == Adasum or not self._member:
            self._synchronized = True
            return
        for p in self._pass_count:
            if p not in self._handles:
                self._pass_count[p] = 0
                self._allreduce_gradient(p)
        try:
            handles = list(self._handles.values())
            # PowerSGD's second allreduces (Q): every Q made first, then all sent in a burst,
            # so that they fuse into few batches (sent as each was made, they trickled out
            # between the products, a batch and a round trip each: across 2 emulated hosts
            # that was a third of ResNet-50's step).
            low_rank = [h for h in handles if isinstance(h, _LowRankGradient)]
            for handle in low_rank:
                handle.make_q()
            for handle in low_rank:
                handle.send_q()
            for handle in handles:
                synchronize(handle)
        finally:
            self._handles.clear()
        if self._low_rank is not None:
            self._low_rank.iteration += 1
        for p in self._resparsify:
            p.grad = p.grad.to_sparse()
        self._resparsify.clear()
        self._synchronized = True

    @contextlib.contextmanager
    def skip_synchronize(self):
        """For step() after an explicit synchronize() (gradient clipping, say)."""
        self._skip_synchronize = True
        try:
            yield
        finally:
            self._skip_synchronize = False

    def step(self, closure=None):
        if not self._skip_synchronize:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() "
                              "after optimizer.synchronize(): the gradients are allreduced "
                              "again. Wrap step() in `with optimizer.skip_synchronize():`.")
            self.synchronize()
        self._synchronized = False
        if self._op == Adasum and self._member:
            return self._adasum_step(closure)
        return super(self.__class__, self).step(closure)

    def _adasum_step(self, closure):
        """Horovod's Adasum optimizer: each rank takes the step its own gradients give, and the
        ranks' updates (new minus old parameters) are combined by Adasum, which keeps what they
        agree on without adding it twice; every rank then applies the combined update."""
        starts = {p: p.detach().clone() for p in self._pass_count}
        loss = super(self.__class__, self).step(closure)
        pending = []
        for p, start in starts.items():
            delta = (p.detach() - start).contiguous()
            pending.append((p, start, delta,
                            allreduce_async_(delta, name=f"adasum.update.{self._names[p]}",
                                             op=Adasum, process_set=self._process_set)))
        for p, start, delta, handle in pending:
            synchronize(handle)
            with torch.no_grad():
                p.copy_(start + delta)
        return loss

    def _names_in_order(self):
        """The parameters' names, in the order torch's state_dict numbers the parameters."""
        return [self._names[p] for group in self.param_groups for p in group["params"]]

    def state_dict(self, *args, **kwargs):
        """torch's, with this rank's error feedback residuals of int8/int4 (copies) under
        "error_feedback", keyed as torch keys the parameters' state (their position in the
        parameter groups), and with Compression.powersgd its state under "powersgd": the step
        count, and each matrix's Q and this rank's residual by parameter number; so that a
        checkpoint or hvd.elastic's TorchState holds them."""
        state = super(self.__class__, self).state_dict(*args, **kwargs)
        if self._residuals:
            positions = {p: i for i, p in enumerate(
                p for group in self.param_groups for p in group["params"])}
            state["error_feedback"] = {positions[p]: residual.clone()
                                       for p, residual in self._residuals.items()}
        if self._low_rank is not None:
            numbers = {name: i for i, name in enumerate(self._names_in_order())}
            state["powersgd"] = self._low_rank.state_dict(numbers.__getitem__)
        return state

    def load_state_dict(self, state_dict, *args, **kwargs):
        """torch's, and the step in progress is given up: hvd.elastic loads the last commit
        after a failed collective, maybe in the middle of backward, when the gradient
        allreduces already started failed or belong to the world before. The int8/int4 error
        feedback residuals are zeroed, whatever the state holds: a loaded state may be another
        rank's (rank 0's checkpoint, hvd.elastic's sync), whose residual this rank does not owe,
        and loaded on every rank it would be added once per rank; a reset loses at most one
        step's quantization error. PowerSGD's state comes back from the dict's "powersgd"; a
        dict without one (saved without PowerSGD) starts it afresh: no steps, Q's from the seed,
        residuals zero."""
        self._handles.clear()
        self._pass_count = dict.fromkeys(self._pass_count, 0)
        self._resparsify.clear()
        self._synchronized = False
        for residual in self._residuals.values():
            residual.zero_()
        if self._low_rank is not None:
            self._low_rank.load_state_dict(state_dict.get("powersgd"),
                                           self._names_in_order().__getitem__)
        state_dict = {key: value for key, value in state_dict.items()
                      if key not in ("error_feedback", "powersgd")}
        return super(self.__class__, self).load_state_dict(state_dict, *args, **kwargs)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("zero_grad() while gradient allreduces are in flight; call "
                                 "step() or synchronize() first")
        if not self._shared:
            return super(self.__class__, self).zero_grad(*args, **kwargs)
        # Gradients in the shared heap stay there, zeroed: set to None, the next ones would come
        # from torch's allocator, and be staged again. The optimizer steps alike either way,
        # since synchronize() gives every unused parameter a zero gradient (as Horovod does).
        set_to_none = args[0] if args else kwargs.get("set_to_none", _SET_TO_NONE_DEFAULT)
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if self._shared.get(p) == p.grad.data_ptr():
                    p.grad.zero_()
                elif set_to_none:
                    p.grad = None
                else:
                    if p.grad.grad_fn is not None:
                        p.grad.detach_()
                    else:
                        p.grad.requires_grad_(False)
                    p.grad.zero_()


class _LowRankGradient:
    """A gradient on its way as PowerSGD's factors (powersgd.py): P's allreduce in flight;
    then, from synchronize() once every gradient's P was submitted, Q's. Called, it waits for
    Q and writes the approximation into the gradient."""

    def __init__(self, state, name, gradient, scale, allreduce):
        self._state = state
        self._name = name
        self._allreduce = allreduce
        self._matrix = state.begin(name, gradient, scale)
        self._handle = allreduce(self._matrix.p, f"powersgd.p.{name}")
        self._q = None
        self._q_sent = False

    def make_q(self):
        """Waits for P's allreduce and makes this rank's Q."""
        if self._q is None:
            self._handle.wait()
            self._q = LowRankState.middle(self._matrix)

    def send_q(self):
        if not self._q_sent:
            self.make_q()
            self._handle = self._allreduce(self._q, f"powersgd.q.{self._name}")
            self._q_sent = True

    def __call__(self):
        self.send_q()
        self._handle.wait()
        self._state.end(self._matrix)


def _is_distributed(optimizer):
    """Whether `optimizer` is a DistributedOptimizer (a class made by DistributedOptimizer())."""
    return type(optimizer).__dict__.get("synchronize") is _DistributedOptimizer.synchronize


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0,
                         num_groups=0, groups=None, sparse_as_dense=False, process_set=None,
                         shared_gradients=None, error_feedback=None):
    """Wraps `optimizer`: every gradient is allreduced (averaged) as soon as backward produces it,
    and step() waits for all of them before updating (among the ranks of `process_set`, if
    given). With backward_passes_per_step > 1,
    gradients are accumulated locally over that many passes before one allreduce. `groups` and
    `num_groups` are accepted for Horovod's scripts (its order of arguments) and change nothing:
    chorus fuses small gradients anyway.
    compression=Compression.int8, .int4 or .topk(ratio) keeps error feedback: what compressing a
    gradient drops in one step is added to the parameter's next gradient, so that training
    converges as without compression. One float32 residual per parameter with a float32,
    float16 or bfloat16 gradient, the gradient's size, on its device, made with its first
    allreduce (in the shared heap where the gradient lies there; GPU gradients are compressed
    through host memory); in state_dict() under "error_feedback", zeroed by load_state_dict() (an elastic
    restore too). With backward_passes_per_step > 1 it applies to the one allreduce of the
    accumulated gradient; its units are those of the gradient divided by
    gradient_predivide_factor.
    compression=Compression.powersgd(rank) averages gradient matrices as rank-`rank` factors
    with error feedback (chorus.torch.powersgd), op Average only; its state is in
    state_dict()["powersgd"].
    error_feedback (chorus's own; None: on for int8, int4 and topk, and the compressor's choice
    for powersgd, which is on by default) turns error feedback on or off; True with a compressor
    that keeps none (none, fp16, bf16) raises ValueError.
    op=Adasum is Horovod's Adasum optimizer: every rank steps with its own gradients and the
    updates are combined with Adasum (float32 and float64 parameters).
    shared_gradients (chorus's own; None: CHORUS_SHARED_GRADIENTS, default on) puts the gradients
    of CPU parameters in chorus's shared heap, where allreduces on one host run in place
    (chorus.torch.shared_memory); zero_grad() then zeroes them there instead of setting them to
    None."""
    _set_id(process_set)  # an unknown set fails here, not at the first gradient
    if groups is not None and not isinstance(groups, (int, list)):
        raise ValueError(f"groups={groups!r} must be a number or a list of parameter lists")
    if not isinstance(num_groups, int) or num_groups < 0:
        raise ValueError(f"num_groups={num_groups!r} must be a number >= 0")
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step,
               op, gradient_predivide_factor, sparse_as_dense, process_set, shared_gradients,
               error_feedback)

