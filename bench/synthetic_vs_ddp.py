#!/usr/bin/env python3
"""chorus.torch's DistributedOptimizer and DistributedDataParallel over chorus's
torch.distributed backend ("ddp-chorus") against DistributedDataParallel over gloo ("ddp") on the
same model, interleaved: for every round, every rank count, both backends, one mpirun each of
examples/pytorch_synthetic_benchmark.py. Prints per rank count and backend the median step time
(with the range over rounds), images/s in total, scaling efficiency (throughput at N / (N x
throughput at 1)) and chorus's step as a fraction of DDP's.

Run from the source tree:
  /usr/bin/python3 bench/synthetic_vs_ddp.py --np 1,2,4 --rounds 3 --model resnet50 \\
      [--bind core] [-- extra arguments for the benchmark script]"""
import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "pytorch_synthetic_benchmark.py")


def run_once(np, backend, args, extra, port):
    environment = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                       PYTHONPATH=os.path.join(ROOT, "python"))
    bind = args.bind if np <= (os.cpu_count() or 1) else "none"
    command = ["mpirun", "--oversubscribe", "--bind-to", bind, "-np", str(np),
               "/usr/bin/python3", SCRIPT, "--backend", backend, "--model", args.model,
               "--batch-size", str(args.batch_size), "--image-size", str(args.image_size),
               "--threads", str(args.threads), "--master-port", str(port)] + extra
    try:
        completed = subprocess.run(command, env=environment, capture_output=True, text=True,
                                   timeout=args.timeout)
    except subprocess.TimeoutExpired:
        print(f"# {' '.join(command)} ran past {args.timeout} s; this run is left out",
              flush=True)
        return None
    match = re.search(r"^result: .*step_ms=([\d.]+) .*img_per_s_total=([\d.]+)",
                      completed.stdout, re.MULTILINE)
    if completed.returncode != 0 or match is None:
        sys.exit(f"synthetic_vs_ddp: {' '.join(command)} failed ({completed.returncode}):\n"
                 f"{completed.stdout[-2000:]}{completed.stderr[-2000:]}")
    return float(match.group(1)), float(match.group(2))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--np", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    parser.add_argument("--bind", default="none", help="mpirun --bind-to while np <= cores")
    parser.add_argument("--timeout", type=int, default=900, help="seconds per run")
    parser.add_argument("--backends", default="chorus,ddp,ddp-chorus",
                        help="of the benchmark script's --backend, comma-separated (ddp, the "
                             "baseline, always runs)")
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    counts = [int(n) for n in args.np.split(",")]
    backends = ["ddp"] + [b for b in args.backends.split(",") if b and b != "ddp"]
    results = {(n, b): [] for n in counts for b in backends}
    port = 29600
    for round_index in range(args.rounds):
        for n in counts:
            for backend in backends:
                port += 1
                result = run_once(n, backend, args, extra, port)
                if result is None:
                    continue
                step, total = result
                results[(n, backend)].append((step, total))
                print(f"# round {round_index + 1}: np={n} {backend}: step {step:.1f} ms, "
                      f"{total:.2f} img/s", flush=True)
    cores = os.cpu_count()
    print(f"\n# {args.model}, batch {args.batch_size} x {args.image_size}px per rank, "
          f"{args.threads} torch thread(s) per rank, {cores} cores, --bind-to {args.bind} "
          f"(none above {cores} ranks); medians of {args.rounds} interleaved rounds")
    print(f"{'np':>3} {'backend':>10} {'step (ms)':>10} {'range':>15} {'img/s total':>12} "
          f"{'scaling':>8} {'step vs DDP':>12}")
    for n in counts:
        for backend in backends:
            steps = [s for s, _ in results[(n, backend)]]
            totals = [t for _, t in results[(n, backend)]]
            base = statistics.median(t for _, t in results[(counts[0], backend)])
            scaling = statistics.median(totals) / (n / counts[0] * base)
            ddp_step = statistics.median(s for s, _ in results[(n, "ddp")])
            print(f"{n:>3} {backend:>10} {statistics.median(steps):>10.1f} "
                  f"{min(steps):>7.1f}-{max(steps):<7.1f} {statistics.median(totals):>12.2f} "
                  f"{scaling:>7.0%} {statistics.median(steps) / ddp_step:>12.2f}")
    for n in counts:
        ddp = statistics.median(s for s, _ in results[(n, "ddp")])
        for backend in backends[1:]:
            step = statistics.median(s for s, _ in results[(n, backend)])
            print(f"summary: synthetic model={args.model} np={n} {backend}_step_ms={step:.1f} "
                  f"ddp_step_ms={ddp:.1f} ratio={step / ddp:.2f}")


if __name__ == "__main__":
    main()
