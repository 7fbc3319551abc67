"""CUDA tensors whose producing kernels are still queued on torch's streams when they are
submitted: on the default stream and on a side stream (torch.cuda.stream), alone and fused, each
behind milliseconds of matrix products; and allgathers back to back on each stream, whose
outputs chorus allocates and reuses. chorus must wait for that work before it reads them, or
the sums come out of stale memory. Checked against sums computed from every rank's known inputs.
Exits 77 (skip) without as many CUDA devices as ranks on the host."""
import sys

import torch

if not torch.cuda.is_available():
    print("gpu_streams: no CUDA device; skipped")
    sys.exit(77)

import chorus.torch as hvd  # noqa: E402

hvd.init()
if torch.cuda.device_count() < hvd.local_size():
    print("gpu_streams: fewer CUDA devices than ranks on this host; skipped")
    sys.exit(77)
torch.cuda.set_device(hvd.local_rank())
size, rank = hvd.size(), hvd.rank()
busy = torch.randn(4096, 4096, device="cuda")
side = torch.cuda.Stream()
failures = checks = 0
for stream_name, stream in (("default", torch.cuda.default_stream()), ("side", side)):
    with torch.cuda.stream(stream):
        for round_ in range(6):
            counts = [100003] if round_ % 2 == 0 else [1 + 37 * t % 1021 for t in range(40)]
            handles, expected = [], []
            for t, count in enumerate(counts):
                for _ in range(4):  # queued ahead of the tensor's own kernel
                    busy = torch.tanh(busy @ busy)
                base = torch.arange(count, device="cuda", dtype=torch.float32)
                value = base * (rank + 1) + round_ + 0 * busy[0, 0]
                name = f"late.{stream_name}.{round_}.{t}"
                handles.append(hvd.allreduce_async(value, op=hvd.Sum, name=name))
                weights = sum(r + 1 for r in range(size))
                expected.append(torch.arange(count, dtype=torch.float64) * weights +
                                size * round_)
            for handle, want in zip(handles, expected):
                got = hvd.synchronize(handle).double().cpu()
                checks += 1
                if not torch.allclose(got, want, rtol=1e-6, atol=1e-3):
                    failures += 1
                    wrong = (got - want).abs().argmax().item()
                    print(f"rank {rank}: {stream_name} stream, round {round_}: element {wrong} "
                          f"is {got[wrong].item()}, expected {want[wrong].item()}")
    # Allgathers, whose outputs chorus allocates and the binding copies out on this stream
    # before it frees them: back to back, so that freed memory is reused at once.
    with torch.cuda.stream(stream):
        for round_ in range(20):
            rows = 1 + (rank + round_) % 3
            for _ in range(2):
                busy = torch.tanh(busy @ busy)
            value = torch.full((rows, 1000), float(rank * 100 + round_), device="cuda") + \
                0 * busy[0, 0]
            got = hvd.allgather(value, name=f"gather.{stream_name}.{round_}").double().cpu()
            want = torch.cat([torch.full((1 + (r + round_) % 3, 1000), float(r * 100 + round_),
                                         dtype=torch.float64) for r in range(size)])
            checks += 1
            if got.shape != want.shape or not torch.equal(got, want):
                failures += 1
                print(f"rank {rank}: {stream_name} stream, allgather {round_} wrong")
print(f"gpu_streams np={size} rank {rank}: {checks - failures} passed, {failures} failed")
hvd.shutdown()
sys.exit(1 if failures else 0)
