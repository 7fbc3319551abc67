/*
 * chorus_bench.c — chorus-bench's entry: parses the options (options.c) and runs the mode they
 * name (bench.h lists the modes and their files).
 *
 * wait) against plain MPI (MPI_Allreduce, MPI_Bcast, MPI_Allgatherv) in the same run, as
 * nccl-tests prints it: size, count, type, op, time, algbw, busbw, #wrong, per size, and the
 * ratio of chorus's busbw to MPI's. Results are checked, not only timed.
 *
 *   chorus-bench [-c allreduce|broadcast|allgather|reducescatter|alltoall] [-b 8] [-e 256M]
 *                [-f 2] [-n iters]
 *                [-w warmup] [-d float32|...] [--csv FILE]
 *   chorus-bench --world [sweep options]   (chorus on a world over UCX, as elastic jobs run)
 *   chorus-bench --device cuda [sweep options]   (built with CUDA and NCCL: buffers on the GPU; no MPI
 *                                column; chorus-bench-emulated runs it over the emulated CUDA
 *                                runtime and NCCL and says so: logic, never GPU speed)
 *   chorus-bench --latency [-b 8] [-e 64K] [--rounds 5]
 *                               (small allreduces and a barrier: MPI, chorus's ordered path,
 *                                its negotiated path, in interleaved rounds; latency.c)
 *   chorus-bench --cycle N [-c broadcast|allgather]
 *                               (the cost of a step of N tiny allreduces, broadcasts or
 *                                allgathers: negotiation)
 *   chorus-bench --workload resnet50|bert|FILE [--steps N] [-c broadcast]
 *                               (a training step: every gradient of a real model, submitted in
 *                                reverse order, against MPI per tensor and MPI on one packed
 *                                buffer; last line: summary: workload=... chorus_ms=...; with
 *                                -c broadcast every tensor is broadcast from rank 0 instead,
 *                                as broadcast_parameters does)
 *   chorus-bench --workload MODEL --overlap [--compute-ratio 1,3] [--compare PARAMS]
 *                [--step-timeline FILE]
 *                               (the gradients become ready one by one behind compute, as in
 *                                backward: exposed communication of chorus against
 *                                MPI_Allreduce and MPI_Iallreduce per tensor; see overlap.h)
 *
 * busbw factors: allreduce 2(n-1)/n, allgather, reducescatter and alltoall (n-1)/n,
 * broadcast 1. The last line is
 *   summary: <collective> np=<n> min_ratio=<x> ratio_at_64MiB=<z> latency_8B_us=<l>
 * where min_ratio is the smallest ratio over sizes from 256 KiB up. It also prints the memory
 * bandwidth of a plain copy measured in the same run, the ceiling for on-host collectives.
 */
#include "bench.h"

#include "overlap.h"

#include <mpi.h>
#include <stdio.h>

int bench_rank, bench_size;

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &bench_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &bench_size);
    struct options o = {.sweep = {.collective = CHORUS_ALLREDUCE, .dtype = CHORUS_FLOAT32,
                                  .warmup = 3},
                        .min_bytes = 8, .max_bytes = (size_t)256 << 20, .factor = 2,
                        .ratios = {1, 3}, .ratio_count = 2};
    int parsed = parse_options(argc, argv, &o);
    if (parsed >= 0) {
        MPI_Finalize();
        return parsed;
    }
    if (o.world && (o.link || o.latency || o.workload != NULL || o.cycle_tensors > 0)) {
        if (bench_rank == 0)
            fprintf(stderr, "chorus-bench: --world runs the sweeps only\n");
        MPI_Finalize();
        return 2;
    }
    if (o.link) {
        link_benchmark();
        MPI_Finalize();
        return 0;
    }
    if (o.latency) {
        if (!o.max_bytes_given)
            o.max_bytes = 64 << 10;
        int status = latency_benchmark(&o);
        MPI_Finalize();
        return status;
    }
    if ((o.world ? measure_init_world(0) : chorus_init(NULL)) != CHORUS_OK) {
        fprintf(stderr, "%s: %s\n", o.world ? "chorus_init_world" : "chorus_init",
                chorus_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (o.sweep.device && (o.workload != NULL || o.cycle_tensors > 0)) {
        if (bench_rank == 0)
            fprintf(stderr, "chorus-bench: --device cuda runs the sweeps only\n");
        chorus_shutdown();
        MPI_Finalize();
        return 2;
    }
    if (o.workload != NULL || o.cycle_tensors > 0) {
        if (o.workload != NULL && o.overlap) {
            struct overlap_options overlap = {.workload = o.workload,
                                              .steps = o.steps > 0 ? o.steps : 15,
                                              .ratios = o.ratios, .ratio_count = o.ratio_count,
                                              .compare = o.compare,
                                              .timeline = o.step_timeline};
            long wrong = o.autotune ? overlap_autotune(&overlap, bench_rank, bench_size)
                                    : overlap_benchmark(&overlap, bench_rank, bench_size);
            chorus_shutdown();
            MPI_Finalize();
            return wrong == 0 ? 0 : 1;
        }
        if (o.workload != NULL && o.autotune)
            workload_autotune(o.workload, o.steps > 0 ? o.steps : 20);
        else if (o.workload != NULL)
            workload_benchmark(o.workload, o.steps > 0 ? o.steps : 20, o.sweep.collective,
                               o.step_timeline);
        else
            cycle_benchmark(o.cycle_tensors, o.sweep.collective);
        chorus_shutdown();
        MPI_Finalize();
        return 0;
    }
    int status = sweep_benchmark(&o);
    MPI_Finalize();
    return status;
}
