#!/usr/bin/env python3
"""Error feedback in chorus.torch (int8 and int4 compression) under mpirun at np=2 and np=3,
against references computed here from every rank's known inputs: an allreduce's residual is what
a numpy reference of chorus.h's quantization drops of the compensated contribution (plus, on the
rank that owns a value's shard, what requantizing the sum dropped); over steps, the results plus
every rank's residual add up to the inputs; DistributedOptimizer keeps one residual per
parameter by default (not with error_feedback=False), with backward_passes_per_step too, in its
state_dict, zeroed by load_state_dict and by a TorchState restore; bad residuals are refused;
float16 and bfloat16 tensors match float32's path.
Prints 'N passed, N failed' from rank 0 and exits non-zero on any failure."""
import sys

import numpy as np
import torch

import chorus.torch as hvd
from checks import check, counts

BLOCK = 256  # chorus.h: values per block of the INT8 and INT4 compressions


def quantized_nearest(values, levels):
    """chorus.h's quantization with rounding to nearest, decoded: per block of 256, offset the
    minimum, scale the range over `levels` (rounded up to float32), codes rounded to nearest."""
    values = np.asarray(values, dtype=np.float32)
    decoded = np.empty_like(values)
    for start in range(0, len(values), BLOCK):
        block = values[start:start + BLOCK]
        low, high = np.float32(block.min()), np.float32(block.max())
        exact = (float(high) - float(low)) / levels
        scale = np.float32(exact)
        if float(scale) < exact:
            scale = np.nextafter(scale, np.float32(np.inf))
        if scale == 0:
            decoded[start:start + BLOCK] = low
            continue
        codes = np.floor((block.astype(np.float64) - float(low)) * (1.0 / float(scale)) + 0.5)
        codes = np.minimum(codes, levels).astype(np.float32)
        decoded[start:start + BLOCK] = low + codes * scale
    return decoded


def gradient(seed, rank, shape):
    """Rank `rank`'s input of step `seed`: every rank can compute every rank's."""
    generator = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(shape, generator=generator) * (1 + rank)


def allreduce_residuals(rank, size):
    """One allreduce with a residual, against the reference of what each rank's quantization
    dropped; then the telescoping sum over steps, int8 and int4, sum and average."""
    count = 3 * BLOCK + 5
    for compression, levels, bits in ((hvd.Compression.int8, 255, "int8"),
                                      (hvd.Compression.int4, 15, "int4")):
        for op, factor in ((hvd.Sum, 1.0), (hvd.Average, 1.0 / size)):
            what = f"{bits} {'sum' if op == hvd.Sum else 'average'}"
            residual = torch.zeros(count)
            results = torch.zeros(count, dtype=torch.float64)
            inputs = torch.zeros(count, dtype=torch.float64)
            every_residual = [torch.zeros(count) for _ in range(size)]
            largest = 0.0  # of a compensated contribution or a residual, on any rank
            steps = 6
            for step in range(steps):
                grads = [gradient(step, r, (count,)) for r in range(size)]
                for r in range(size):
                    inputs += grads[r].double()
                compensated = [(grads[r] + every_residual[r]).numpy() for r in range(size)]
                decoded = [quantized_nearest(c, levels) for c in compensated]
                dropped = compensated[rank] - decoded[rank]
                result = hvd.allreduce(grads[rank].clone(), op=op, name=f"ef.{what}",
                                       compression=compression, error_feedback=residual)
                results += result.double()
                # Beyond this rank's own quantization error, only the owner's fold of the sum's:
                # S - result / f, S the sum of every rank's decoded contribution.
                fold = (sum(d.astype(np.float64) for d in decoded) -
                        result.double().numpy() / factor)
                extra = residual.double().numpy() - dropped
                scale = max(1.0, float(np.abs(compensated[rank]).max()))
                own = extra == 0
                owned = np.abs(extra - fold) <= 2.0 ** -22 * (scale + np.abs(fold))
                check(bool(np.all(own | owned)) and bool(np.any(dropped != 0)),
                      f"{what} step {step}: residual is neither the rank's quantization error "
                      f"nor that plus the fold of the sum's, at {int(np.sum(~(own | owned)))} "
                      "values")
                every_residual = list(hvd.allgather(residual.unsqueeze(0),
                                                    name=f"ef.{what}.residuals"))
                largest = max(largest, max(float(np.abs(c).max()) for c in compensated),
                              max(float(e.abs().max()) for e in every_residual))
            check(bool(residual.abs().sum() > 0), f"{what}: the residual is nonzero")
            carried = sum(e.double() for e in every_residual)
            gap = (results + factor * carried - factor * inputs).abs().max().item()
            # chorus.h: float32 rounding of each step's sums and residuals, half an ulp of at
            # most `largest` for three roundings per rank and step (twice that, for slack).
            bound = 2 * factor * steps * 3 * size * 2.0 ** -24 * largest
            check(gap <= bound, f"{what}: results + f * residuals off the inputs by {gap} "
                                f"(bound {bound})")


def refusals():
    t = torch.ones(10)
    for bad, why in ((torch.zeros(10, dtype=torch.float64), "float64"),
                     (torch.zeros(9), "another shape"),
                     (torch.zeros(20)[::2], "not contiguous")):
        try:
            hvd.allreduce(t, name="ef.bad", compression=hvd.Compression.int8, error_feedback=bad)
            check(False, f"a residual of {why} refused")
        except ValueError as error:
            check("'ef.bad'" in str(error), f"a residual of {why} refused: {error}")
    try:
        hvd.allreduce(t, name="ef.none", error_feedback=torch.zeros(10))
        check(False, "a residual without a quantizing compression refused")
    except ValueError as error:
        check('"ef.none"' in str(error) and "error_feedback" in str(error),
              f"a residual without a quantizing compression refused: {error}")


def sixteen_bit_gradients(rank, size):
    """float16 and bfloat16 tensors go through the float32 path (chorus.h): the result is the
    float32 allreduce of the same values, widened, under the same name, rounded to 16 bits, and
    the residual is the float32 one's, bit for bit."""
    for dtype in (torch.float16, torch.bfloat16):
        for compression in (hvd.Compression.int8, hvd.Compression.int4,
                            hvd.Compression.topk(0.05)):
            label = getattr(compression, "__name__", repr(compression))
            name = f"ef.sixteen.{dtype}.{label}"
            values = gradient(7, rank, (3, 211)).to(dtype)
            wide = values.to(torch.float32)
            residual32, residual16 = torch.zeros(3, 211), torch.zeros(3, 211)
            result32 = hvd.allreduce(wide, name=name, op=hvd.Sum, compression=compression,
                                     error_feedback=residual32)
            result16 = hvd.allreduce(values, name=name, op=hvd.Sum, compression=compression,
                                     error_feedback=residual16)
            what = f"{dtype} {label}"
            check(result16.dtype == dtype and torch.equal(result16, result32.to(dtype)),
                  f"{what}: the result is float32's rounded to 16 bits")
            check(torch.equal(residual16, residual32) and float(residual16.abs().sum()) > 0,
                  f"{what}: the residual is float32's, and nonzero")
    shapes = [(7, 300), (5,)]
    model = Weights(shapes).to(torch.bfloat16)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                         named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.int8)
    model([gradient(50 + i, rank, s).to(torch.bfloat16) for i, s in enumerate(shapes)]).backward()
    optimizer.step()
    residuals = [optimizer._residuals.get(w) for w in model.weights]
    check(all(r is not None and r.dtype == torch.float32 for r in residuals) and
          float(residuals[0].abs().sum()) > 0,
          "a bfloat16 model keeps a float32 residual per parameter")


class Weights(torch.nn.Module):
    """loss = sum(weight * g): the gradient of `weight` is g, whatever the weights."""

    def __init__(self, shapes):
        super().__init__()
        self.weights = torch.nn.ParameterList([torch.nn.Parameter(torch.zeros(s)) for s in shapes])

    def forward(self, gradients):
        return sum((w * g).sum() for w, g in zip(self.weights, gradients))


def optimizer_residuals(rank, size):
    """DistributedOptimizer(int8, and topk): over steps, what the averaged gradients add up to
    plus every rank's residual over the ranks is the average of every rank's gradients; with
    backward_passes_per_step=2, of their accumulation; state_dict and load_state_dict."""
    shapes = [(7, 300), (5,), (20000,)]  # the last one over 64 KiB: its gradient is shared
    for compression, passes in ((hvd.Compression.int8, 1), (hvd.Compression.int8, 2),
                                (hvd.Compression.topk(0.05), 1)):
        model = Weights(shapes)
        optimizer = hvd.DistributedOptimizer(
            torch.optim.SGD(model.parameters(), lr=0.0, momentum=0.9),
            named_parameters=model.named_parameters(), compression=compression,
            backward_passes_per_step=passes)
        factor = 1.0 / (size * passes)
        results = [torch.zeros(s, dtype=torch.float64) for s in shapes]
        inputs = [torch.zeros(s, dtype=torch.float64) for s in shapes]
        for step in range(4):
            for backward in range(passes):
                seed = 100 + 10 * step + backward
                mine = [gradient(seed + i, rank, s) for i, s in enumerate(shapes)]
                for i, s in enumerate(shapes):
                    inputs[i] += sum(gradient(seed + i, r, s).double() for r in range(size))
                model(mine).backward()
            optimizer.synchronize()
            for i, w in enumerate(model.weights):
                results[i] += w.grad.double()
            with optimizer.skip_synchronize():
                optimizer.step()
            optimizer.zero_grad()
        check(len(optimizer._residuals) == len(shapes),
              f"passes {passes}: a residual per parameter ({len(optimizer._residuals)})")
        for i, w in enumerate(model.weights):
            residual = optimizer._residuals[w]
            every = hvd.allreduce(residual, op=hvd.Sum,
                                  name=f"ef.opt.{compression!r}.{passes}.{i}").double()
            gap = (results[i] + factor * every - factor * inputs[i]).abs().max().item()
            bound = 1e-5 * max(1.0, float(inputs[i].abs().max()) * factor)
            check(gap <= bound and residual.abs().sum() > 0,
                  f"passes {passes}, parameter {i}: averaged gradients + f * residuals off the "
                  f"average of the gradients by {gap} (bound {bound})")
        state = optimizer.state_dict()
        saved = state.get("error_feedback", {})
        check(len(saved) == len(shapes) and
              all(torch.equal(saved[i], optimizer._residuals[w])
                  for i, w in enumerate(model.weights)),
              f"passes {passes}: state_dict holds the residuals by parameter position")
        momentum = [b["momentum_buffer"].clone() for b in state["state"].values()]
        optimizer.load_state_dict(state)
        check(all(float(r.abs().sum()) == 0 for r in optimizer._residuals.values()),
              f"passes {passes}: load_state_dict zeroes the residuals")
        check(all(torch.equal(a, b["momentum_buffer"]) for a, b in
                  zip(momentum, optimizer.state_dict()["state"].values())),
              f"passes {passes}: load_state_dict keeps torch's state")
        check("error_feedback" in state, "load_state_dict leaves the caller's dict as it was")


def optimizer_options(rank, size):
    """error_feedback=False keeps none; TorchState saves residuals and its restore zeroes them."""
    model = Weights([(300,)])
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.int4, error_feedback=False)
    model([gradient(7, rank, (300,))]).backward()
    optimizer.step()
    check(not optimizer._residuals and "error_feedback" not in optimizer.state_dict(),
          "error_feedback=False keeps no residual")
    model = Weights([(300,)])  # a model of its own: the first optimizer's hooks stay on that
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                         named_parameters=model.named_parameters(),
                                         compression=hvd.Compression.int4)
    model([gradient(8, rank, (300,))]).backward()
    optimizer.step()
    state = hvd.elastic.TorchState(model, optimizer, epoch=0)
    state.save()
    residual = optimizer._residuals[model.weights[0]]
    saved = state._handlers["optimizer"].saved["error_feedback"][0]
    check(torch.equal(saved, residual) and float(residual.abs().sum()) > 0,
          "TorchState saves the residual")
    state.restore()
    check(float(residual.abs().sum()) == 0, "a TorchState restore zeroes the residual")


def main():
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    allreduce_residuals(rank, size)
    refusals()
    sixteen_bit_gradients(rank, size)
    optimizer_residuals(rank, size)
    optimizer_options(rank, size)
    totals = hvd.allreduce(torch.tensor([counts["passed"], counts["failed"]], dtype=torch.int64),
                           op=hvd.Sum, name="verdict")
    if rank == 0:
        print(f"error feedback np={size}: {totals[0]} passed, {totals[1]} failed", flush=True)
    hvd.shutdown()
    sys.exit(1 if totals[1] else 0)


if __name__ == "__main__":
    main()
