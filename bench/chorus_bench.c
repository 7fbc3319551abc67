/*
 * chorus-bench — measures what a user gets from chorus (submit through the public API, then
 * wait) against plain MPI (MPI_Allreduce, MPI_Bcast, MPI_Allgatherv) in the same run, as
 * nccl-tests prints it: size, count, type, op, time, algbw, busbw, #wrong, per size, and the
 * ratio of chorus's busbw to MPI's. Results are checked, not only timed.
 *
 *   chorus-bench [-c allreduce|broadcast|allgather|reducescatter|alltoall] [-b 8] [-e 256M]
 *                [-f 2] [-n iters]
 *                [-w warmup] [-d float32|...] [--csv FILE]
 *   chorus-bench-gpu --device cuda [sweep options]   (buffers on the local rank's GPU; no MPI
 *                                column; chorus-bench-emulated runs it over the emulated CUDA
 *                                runtime and NCCL and says so: logic, never GPU speed)
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
#include "../test/common/reference.h"
#include "overlap.h"
#include "workload.h"
#ifdef CHORUS_BENCH_DEVICE
#include "../lib/gpu/gpu.h"
#endif

#include <chorus.h>
#include <getopt.h>
#include <math.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct options {
    chorus_collective collective;
    size_t min_bytes, max_bytes;
    double factor;
    int iterations; /* 0: chosen per size */
    int warmup;
    chorus_dtype dtype;
    const char *csv;
    int cycle_tensors; /* --cycle N: time steps of N small allreduces instead of sizes */
    const char *workload; /* --workload resnet50|bert|FILE: a training step's gradients */
    int steps;
    bool device; /* --device cuda: buffers on the local rank's GPU, through NCCL */
    bool link;   /* --link: what the network between the first two hosts delivers to MPI */
    bool overlap; /* --overlap: the workload's gradients trickle in behind compute */
    double ratios[8];
    int ratio_count;
    const char *compare;       /* --compare PARAMS: a second chorus configuration */
    const char *step_timeline; /* --step-timeline FILE */
};

static int rank, size;

#define ARRAY_SIZE(array) (sizeof(array) / sizeof((array)[0]))

/* One size of a sweep: index 0 chorus, 1 MPI. */
struct sweep_row {
    size_t count, bytes;
    double time[2];
    long wrong[2];
};

static bool parse_size(const char *text, size_t *bytes)
{
    char *end = NULL;
    double value = strtod(text, &end);
    if (end == text || value < 0)
        return false;
    switch (*end) {
    case 'K': case 'k': value *= 1024; break;
    case 'M': case 'm': value *= 1024 * 1024; break;
    case 'G': case 'g': value *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    *bytes = (size_t)value;
    return true;
}

static MPI_Datatype mpi_type(chorus_dtype dtype)
{
    switch (dtype) {
    case CHORUS_UINT8: return MPI_UINT8_T;
    case CHORUS_INT8: return MPI_INT8_T;
    case CHORUS_INT32: return MPI_INT32_T;
    case CHORUS_INT64: return MPI_INT64_T;
    case CHORUS_FLOAT32: return MPI_FLOAT;
    case CHORUS_FLOAT64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}

/* The redop column: what the benchmark reduces with, or none. */
static const char *redop_name(chorus_collective collective)
{
    return collective == CHORUS_ALLREDUCE || collective == CHORUS_REDUCESCATTER ? "sum" : "none";
}

static double bus_factor(chorus_collective collective)
{
    switch (collective) {
    case CHORUS_ALLREDUCE: return size > 1 ? 2.0 * (size - 1) / size : 1;
    case CHORUS_ALLGATHER:
    case CHORUS_REDUCESCATTER:
    case CHORUS_ALLTOALL: return size > 1 ? (double)(size - 1) / size : 1;
    default: return 1;
    }
}

/* Where the measured buffers live: host memory, or with --device cuda the local rank's GPU
 * (chorus-bench-gpu, and chorus-bench-emulated over the emulated CUDA runtime and NCCL). */
static void *buffer_alloc(const struct options *o, size_t bytes)
{
#ifdef CHORUS_BENCH_DEVICE
    if (o->device)
        return gpu_malloc(bytes ? bytes : 1, chorus_local_rank());
#endif
    (void)o;
    return calloc(1, bytes ? bytes : 1);
}

static void buffer_free(const struct options *o, void *buffer)
{
#ifdef CHORUS_BENCH_DEVICE
    if (o->device) {
        gpu_free(buffer);
        return;
    }
#endif
    (void)o;
    free(buffer);
}

/* Copies between a measured buffer (either end) and host memory. */
static void buffer_copy(const struct options *o, void *to, const void *from, size_t bytes)
{
#ifdef CHORUS_BENCH_DEVICE
    if (o->device) {
        gpu_copy(to, from, bytes);
        return;
    }
#endif
    (void)o;
    memcpy(to, from, bytes);
}

/* Rank `index`'s share of `count` elements split over `parts` ranks as chorus and Horovod split
 * a reducescatter: the first count % parts ranks get one more. */
static size_t block_length(size_t count, size_t parts, size_t index)
{
    return count / parts + (index < count % parts ? 1 : 0);
}

static size_t block_start(size_t count, size_t parts, size_t index)
{
    return index * (count / parts) + (index < count % parts ? index : count % parts);
}

/* The measured buffer as a tensor of `count` elements, in host or device memory. */
static chorus_tensor measured_tensor(const struct options *o, void *buffer, size_t count)
{
    return (chorus_tensor){.data = buffer, .dtype = o->dtype, .ndims = 1,
                           .shape = {(int64_t)count},
                           .memory = o->device ? CHORUS_MEMORY_CUDA : CHORUS_MEMORY_HOST,
                           .device = o->device ? chorus_local_rank() : 0};
}

/* One operation through chorus: submit, wait. */
static chorus_status run_chorus(const struct options *o, void *buffer, size_t count,
                                chorus_tensor *gathered)
{
    chorus_tensor tensor = measured_tensor(o, buffer, count);
    switch (o->collective) {
    case CHORUS_ALLREDUCE:
        return chorus_allreduce("bench", &tensor, NULL, CHORUS_SUM);
    case CHORUS_BROADCAST:
        return chorus_broadcast("bench", &tensor, 0);
    case CHORUS_ALLGATHER: {
        /* The handle keeps the output: freeing the handle lets chorus reuse the buffer, as a
         * training loop that reads the result and lets go of it would. */
        tensor.shape[0] = (int64_t)(count / (size_t)size);
        chorus_handle *handle = NULL;
        chorus_status status = chorus_allgather_async("bench", &tensor, &handle);
        if (status == CHORUS_OK)
            status = chorus_wait(handle);
        if (status == CHORUS_OK)
            chorus_handle_output(handle, gathered);
        chorus_handle_free(handle);
        return status;
    }
    case CHORUS_ALLTOALL:
    case CHORUS_REDUCESCATTER: {
        chorus_handle *handle = NULL;
        chorus_status status =
            o->collective == CHORUS_ALLTOALL
                ? chorus_alltoall_async("bench", &tensor, NULL, &handle)
                : chorus_reducescatter_async("bench", &tensor, CHORUS_SUM, &handle);
        if (status == CHORUS_OK)
            status = chorus_wait(handle);
        chorus_handle_free(handle);
        return status;
    }
    }
    return CHORUS_ERR_INVALID_ARGUMENT;
}

static void run_mpi(const struct options *o, void *buffer, size_t count, void *gather_out,
                    int *counts, int *displacements)
{
    MPI_Datatype type = mpi_type(o->dtype);
    switch (o->collective) {
    case CHORUS_ALLREDUCE:
        MPI_Allreduce(MPI_IN_PLACE, buffer, (int)count, type, MPI_SUM, MPI_COMM_WORLD);
        break;
    case CHORUS_BROADCAST:
        MPI_Bcast(buffer, (int)count, type, 0, MPI_COMM_WORLD);
        break;
    case CHORUS_ALLGATHER:
        MPI_Allgatherv(buffer, counts[rank], type, gather_out, counts, displacements, type,
                       MPI_COMM_WORLD);
        break;
    case CHORUS_REDUCESCATTER:
        MPI_Reduce_scatter(buffer, gather_out, counts, type, MPI_SUM, MPI_COMM_WORLD);
        break;
    case CHORUS_ALLTOALL:
        /* Every block the same size: counts[r] elements at displacements[r], both ways. */
        MPI_Alltoallv(buffer, counts, displacements, type, gather_out, counts, displacements,
                      type, MPI_COMM_WORLD);
        break;
    }
}

/* Runs the operation once on reference data and counts wrong elements. The data is made and
 * checked in host memory `work`, copied to and from `buffer` where that is device memory. */
static long check(const struct options *o, bool use_chorus, void *buffer, size_t count,
                  void *gather_out, int *counts, int *displacements)
{
    size_t element = chorus_dtype_size(o->dtype), bytes = count * element;
    unsigned char *work = o->device ? malloc(bytes ? bytes : 1) : buffer;
    char why[256];
    long wrong = 0;
    if (o->collective == CHORUS_ALLREDUCE) {
        reference_fill(work, count, o->dtype, CHORUS_SUM, 17, rank);
        if (o->device)
            buffer_copy(o, buffer, work, bytes);
        if (use_chorus)
            run_chorus(o, buffer, count, NULL);
        else
            run_mpi(o, buffer, count, NULL, counts, displacements);
        if (o->device)
            buffer_copy(o, work, buffer, bytes);
        /* The first 64 elements exactly, then the whole buffer. */
        size_t chunk = count < 64 ? count : 64;
        if (reference_check_allreduce(work, chunk, o->dtype, CHORUS_SUM, size, NULL, 17, 1, 1,
                                      why, sizeof why) >= 0)
            wrong++;
        if (reference_check_allreduce(work, count, o->dtype, CHORUS_SUM, size, NULL, 17, 1, 1,
                                      why, sizeof why) >= 0)
            wrong++;
    } else if (o->collective == CHORUS_REDUCESCATTER) {
        reference_fill(work, count, o->dtype, CHORUS_SUM, 20, rank);
        if (o->device)
            buffer_copy(o, buffer, work, bytes);
        size_t first = block_start(count, (size_t)size, (size_t)rank);
        size_t length = block_length(count, (size_t)size, (size_t)rank);
        if (use_chorus) {
            chorus_tensor tensor = measured_tensor(o, buffer, count), scattered = {0};
            if (chorus_reducescatter("bench.check", &tensor, CHORUS_SUM, &scattered) !=
                    CHORUS_OK ||
                scattered.shape[0] != (int64_t)length)
                wrong = 1;
            else
                buffer_copy(o, gather_out, scattered.data, length * element);
            if (scattered.data != NULL)
                buffer_free(o, scattered.data);
        } else {
            run_mpi(o, buffer, count, gather_out, counts, displacements);
        }
        if (wrong == 0 && reference_check_reduced(gather_out, first, length, o->dtype,
                                                  CHORUS_SUM, size, NULL, 20, 1, 1, why,
                                                  sizeof why) >= 0)
            wrong = 1;
    } else if (o->collective == CHORUS_ALLTOALL) {
        /* Block k of this rank's input goes to rank k: bytes from (seed 40 + k, this rank). */
        size_t block = (count / (size_t)size) * element;
        for (int k = 0; k < size; k++)
            reference_fill_bytes(work + (size_t)k * block, block, 40 + (uint64_t)k, rank);
        if (o->device)
            buffer_copy(o, buffer, work, block * (size_t)size);
        if (use_chorus) {
            chorus_tensor tensor = measured_tensor(o, buffer, count), exchanged = {0};
            if (chorus_alltoall("bench.check", &tensor, NULL, &exchanged, NULL) != CHORUS_OK)
                wrong = 1;
            else
                buffer_copy(o, gather_out, exchanged.data, block * (size_t)size);
            if (exchanged.data != NULL)
                buffer_free(o, exchanged.data);
        } else {
            run_mpi(o, buffer, count, gather_out, counts, displacements);
        }
        for (int r = 0; r < size && wrong == 0; r++)
            wrong += reference_check_bytes((unsigned char *)gather_out + (size_t)r * block,
                                           block, 40 + (uint64_t)rank, r) >= 0;
    } else if (o->collective == CHORUS_BROADCAST) {
        if (rank == 0)
            reference_fill_bytes(work, bytes, 18, 0);
        else
            memset(work, 0, bytes);
        if (o->device)
            buffer_copy(o, buffer, work, bytes);
        if (use_chorus)
            run_chorus(o, buffer, count, NULL);
        else
            run_mpi(o, buffer, count, NULL, counts, displacements);
        if (o->device)
            buffer_copy(o, work, buffer, bytes);
        wrong = reference_check_bytes(work, bytes, 18, 0) >= 0;
    } else {
        size_t block = (count / (size_t)size) * element;
        reference_fill_bytes(work, block, 19, rank);
        if (o->device)
            buffer_copy(o, buffer, work, block);
        if (use_chorus) {
            chorus_tensor tensor = measured_tensor(o, buffer, count / (size_t)size);
            chorus_tensor gathered = {0};
            if (chorus_allgather("bench.check", &tensor, &gathered) != CHORUS_OK) {
                wrong = 1;
            } else {
                buffer_copy(o, gather_out, gathered.data, block * (size_t)size);
                buffer_free(o, gathered.data);
            }
        } else {
            run_mpi(o, buffer, count, gather_out, counts, displacements);
        }
        for (int r = 0; r < size && wrong == 0; r++)
            wrong += reference_check_bytes((char *)gather_out + (size_t)r * block, block, 19,
                                           r) >= 0;
    }
    if (o->device)
        free(work);
    return wrong;
}

/* Average seconds per operation over `iterations`, the maximum over ranks. */
static double time_operation(const struct options *o, bool use_chorus, void *buffer,
                             size_t count, int iterations, void *gather_out, int *counts,
                             int *displacements)
{
    int warmup = o->warmup > iterations / 10 ? o->warmup : iterations / 10;
    for (int i = 0; i < warmup; i++) {
        if (use_chorus)
            run_chorus(o, buffer, count, &(chorus_tensor){0});
        else
            run_mpi(o, buffer, count, gather_out, counts, displacements);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = now();
    for (int i = 0; i < iterations; i++) {
        if (use_chorus) {
            chorus_tensor gathered = {0};
            if (run_chorus(o, buffer, count, &gathered) != CHORUS_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, chorus_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else {
            run_mpi(o, buffer, count, gather_out, counts, displacements);
        }
    }
    double elapsed = (now() - start) / iterations, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* A STREAM-like copy of 256 MiB, best of 5: the memory bandwidth of this run (GB/s). */
static double copy_bandwidth(void)
{
    size_t bytes = (size_t)256 << 20;
    char *from = malloc(bytes), *to = malloc(bytes);
    memset(from, 1, bytes);
    memset(to, 2, bytes);
    double best = 0;
    for (int i = 0; i < 5; i++) {
        double start = now();
        memcpy(to, from, bytes);
        double rate = (double)bytes / (now() - start) / 1e9;
        best = rate > best ? rate : best;
    }
    free(from);
    free(to);
    return best;
}

/* The round trip of a cache line between the first two ranks of rank 0's host, in ns (median
 * of 5 rounds of 10000; 0 when rank 0 is alone on its host). It tells how far apart their cores
 * are: on the development VM 55 ns in one placement of its virtual CPUs, 330 ns in the other. */
static double cache_line_round_trip(void)
{
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &host);
    int local_rank = 0, local_size = 1;
    MPI_Comm_rank(host, &local_rank);
    MPI_Comm_size(host, &local_size);
    _Atomic long *line = NULL;
    MPI_Win window;
    MPI_Win_allocate_shared(local_rank == 0 ? 64 : 0, 1, MPI_INFO_NULL, host, &line, &window);
    MPI_Aint bytes = 0;
    int unit = 0;
    MPI_Win_shared_query(window, 0, &bytes, &unit, &line);
    if (local_rank == 0)
        atomic_store(line, 0);
    MPI_Barrier(host);
    double rounds[5] = {0};
    const long trips = 10000;
    for (int round = 0; round < 5 && local_size > 1 && local_rank < 2; round++) {
        long base = (long)round * 2 * trips;
        double start = now();
        for (long i = 0; i < trips; i++) {
            long ping = base + 2 * i + 1, pong = ping + 1;
            if (local_rank == 0) {
                atomic_store(line, ping);
                while (atomic_load(line) != pong)
                    ;
            } else {
                while (atomic_load(line) != ping)
                    ;
                atomic_store(line, pong);
            }
        }
        rounds[round] = (now() - start) / (double)trips * 1e9;
    }
    MPI_Barrier(host);
    MPI_Win_free(&window);
    MPI_Comm_free(&host);
    qsort(rounds, 5, sizeof rounds[0], compare_doubles);
    return rounds[2];
}

/* The negotiation cost of a training step: N tiny tensors submitted at once, then waited for.
 * They fuse into one small allreduce (or broadcast from rank 0, or allgather), so the step time
 * is mostly negotiation. */
static void cycle_benchmark(int tensors, chorus_collective collective)
{
    enum { STEPS = 200, WARMUP = 20 };
    float *values = calloc((size_t)tensors, sizeof *values);
    chorus_handle **handles = calloc((size_t)tensors, sizeof *handles);
    char (*names)[32] = calloc((size_t)tensors, sizeof *names);
    double *times = calloc(STEPS, sizeof *times);
    for (int t = 0; t < tensors; t++)
        snprintf(names[t], sizeof names[t], "layer%d.grad", t);
    for (int step = 0; step < WARMUP + STEPS; step++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = now();
        for (int t = tensors - 1; t >= 0; t--) {
            chorus_tensor tensor = {.data = &values[t], .dtype = CHORUS_FLOAT32, .ndims = 1,
                                    .shape = {1}};
            chorus_status submitted =
                collective == CHORUS_BROADCAST
                    ? chorus_broadcast_async(names[t], &tensor, 0, &handles[t])
                : collective == CHORUS_ALLGATHER
                    ? chorus_allgather_async(names[t], &tensor, &handles[t])
                    : chorus_allreduce_async(names[t], &tensor, NULL, CHORUS_SUM, &handles[t]);
            if (submitted != CHORUS_OK) {
                fprintf(stderr, "rank %d: %s\n", rank, chorus_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        for (int t = 0; t < tensors; t++) {
            chorus_wait(handles[t]);
            chorus_handle_free(handles[t]);
        }
        double elapsed = now() - start, slowest = 0;
        MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (step >= WARMUP)
            times[step - WARMUP] = slowest;
    }
    qsort(times, STEPS, sizeof *times, compare_doubles);
    if (rank == 0)
        printf("cycle: np=%d tensors=%d%s median_step_us=%.1f p10_us=%.1f p90_us=%.1f\n", size,
               tensors,
               collective == CHORUS_BROADCAST   ? " broadcast"
               : collective == CHORUS_ALLGATHER ? " allgather"
                                                : "",
               times[STEPS / 2] * 1e6, times[STEPS / 10] * 1e6, times[STEPS * 9 / 10] * 1e6);
    free(values);
    free(handles);
    free(names);
    free(times);
}

/* ----- the training-step workload --------------------------------------------------------- */

/* What a workload step does with every tensor: allreduce it (a training step's gradients) or
 * broadcast it from rank 0 (broadcast_parameters at start-up or after restoring a checkpoint). */
static chorus_collective workload_collective = CHORUS_ALLREDUCE;

/* One step through chorus: every gradient submitted in reverse order (as backward produces
 * them), then all waited for. */
static double chorus_step(struct gradient *gradients, size_t count, chorus_handle **handles)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = now();
    for (size_t i = count; i-- > 0;) {
        chorus_tensor tensor = {.data = gradients[i].data, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {(int64_t)gradients[i].count}};
        chorus_status submitted =
            workload_collective == CHORUS_BROADCAST
                ? chorus_broadcast_async(gradients[i].name, &tensor, 0, &handles[i])
                : chorus_allreduce_async(gradients[i].name, &tensor, NULL, CHORUS_AVERAGE,
                                         &handles[i]);
        if (submitted != CHORUS_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, chorus_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (chorus_wait(handles[i]) != CHORUS_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, chorus_handle_error(handles[i]));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        chorus_handle_free(handles[i]);
    }
    double elapsed = now() - start, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static double mpi_per_tensor_step(struct gradient *gradients, size_t count)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = now();
    for (size_t i = count; i-- > 0;) {
        if (workload_collective == CHORUS_BROADCAST)
            MPI_Bcast(gradients[i].data, (int)gradients[i].count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        else
            MPI_Allreduce(MPI_IN_PLACE, gradients[i].data, (int)gradients[i].count, MPI_FLOAT,
                          MPI_SUM, MPI_COMM_WORLD);
    }
    double elapsed = now() - start, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static double mpi_fused_step(float *packed, size_t total)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = now();
    if (workload_collective == CHORUS_BROADCAST)
        MPI_Bcast(packed, (int)total, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else
        MPI_Allreduce(MPI_IN_PLACE, packed, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double elapsed = now() - start, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* Median step time of `run` (0: chorus, 1: MPI per tensor, 2: MPI fused) in milliseconds. */
static double measure_steps(int run, int steps, struct gradient *gradients, size_t count,
                            float *packed, size_t total, chorus_handle **handles)
{
    enum { WARMUP = 3 };
    double *times = calloc((size_t)steps, sizeof *times);
    for (int s = 0; s < WARMUP + steps; s++) {
        double t = run == 0   ? chorus_step(gradients, count, handles)
                   : run == 1 ? mpi_per_tensor_step(gradients, count)
                              : mpi_fused_step(packed, total);
        if (s >= WARMUP)
            times[s - WARMUP] = t;
    }
    double result = median(times, steps) * 1e3;
    free(times);
    return result;
}

/* "<collective><what>", for a table label. */
static const char *format_label(const char *collective, const char *what)
{
    static char label[64];
    snprintf(label, sizeof label, "%s%s", collective, what);
    return label;
}

static void workload_benchmark(const char *workload, int steps)
{
    size_t count = 0, total = 0;
    struct gradient *gradients = load_gradients(workload, rank, &count, &total);
    chorus_handle **handles = calloc(count, sizeof *handles);
    float *packed = malloc(total * sizeof(float));
    memset(packed, 0, total * sizeof(float));
    double bandwidth = copy_bandwidth();
    double round_trip = cache_line_round_trip();
    double fused = measure_steps(0, steps, gradients, count, packed, total, handles);
    restart_chorus("CHORUS_FUSION_THRESHOLD=0");
    double unfused = measure_steps(0, steps, gradients, count, packed, total, handles);
    /* The baselines run without chorus's background thread polling MPI beside them. */
    chorus_shutdown();
    double per_tensor = measure_steps(1, steps, gradients, count, packed, total, handles);
    double ideal = measure_steps(2, steps, gradients, count, packed, total, handles);
    /* The floor: an allreduce must at least read every gradient and write it back. */
    double floor_ms = (double)total * 4 / (bandwidth * 1e9) * 1e3;
    if (rank == 0) {
        printf("# %d ranks, median of %d steps after 3 warm-up steps; memory copy bandwidth "
               "%.2f GB/s; cache-line round trip between local ranks 0 and 1 %.0f ns\n",
               size, steps, bandwidth, round_trip);
        printf("# MPI initialized with MPI_THREAD_MULTIPLE; the MPI rows are measured after "
               "chorus_shutdown\n");
        printf("%-34s %10s %8s\n", "#", "step (ms)", "vs MPI");
        const char *mpi = workload_collective == CHORUS_BROADCAST ? "MPI_Bcast" : "MPI_Allreduce";
        printf("%-34s %10.2f %8.2f\n", "chorus, default fusion", fused, fused / per_tensor);
        printf("%-34s %10.2f %8.2f\n", "chorus, fusion off", unfused, unfused / per_tensor);
        printf("%-34s %10.2f %8.2f\n", format_label(mpi, " per tensor"), per_tensor, 1.0);
        printf("%-34s %10.2f %8.2f\n", format_label(mpi, ", one packed buffer"), ideal,
               ideal / per_tensor);
        printf("%-34s %10.2f %8.2f\n", "floor: bytes / copy bandwidth", floor_ms,
               floor_ms / per_tensor);
        printf("summary: workload=%s%s np=%d chorus_ms=%.2f mpi_per_tensor_ms=%.2f "
               "mpi_fused_ideal_ms=%.2f\n", workload,
               workload_collective == CHORUS_BROADCAST ? " broadcast" : "", size, fused,
               per_tensor, ideal);
    }
    free_gradients(gradients, count);
    free(handles);
    free(packed);
}

/* ----- the link between hosts ------------------------------------------------------------- */

/* Seconds for `bytes` sent by every active rank to its partner (by the sender, or with
 * both_ways by both at the same time), in 4 MiB messages; median of 3. */
static double link_transfer(int partner, bool active, bool both_ways, bool sender, size_t bytes)
{
    const size_t message = (size_t)4 << 20;
    char *out = malloc(message), *in = malloc(message);
    memset(out, 1, message);
    double times[3];
    for (int trial = 0; trial < 3; trial++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = now();
        for (size_t sent = 0; active && sent < bytes; sent += message) {
            MPI_Request requests[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
            if (sender || both_ways)
                MPI_Isend(out, (int)message, MPI_BYTE, partner, 7, MPI_COMM_WORLD, &requests[0]);
            if (!sender || both_ways)
                MPI_Irecv(in, (int)message, MPI_BYTE, partner, 7, MPI_COMM_WORLD, &requests[1]);
            MPI_Waitall(2, requests, MPI_STATUSES_IGNORE);
        }
        double elapsed = now() - start, slowest = 0;
        MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        times[trial] = slowest;
    }
    free(out);
    free(in);
    qsort(times, 3, sizeof *times, compare_doubles);
    return times[1];
}

/* Between the first two hosts: the latency of one flow, the rate of one flow one way, and the
 * rate one way when every rank of the first host exchanges with its counterpart on the second,
 * both ways at once (the traffic of a hierarchical allreduce's cross-host step). */
static void link_benchmark(void)
{
    char host[MPI_MAX_PROCESSOR_NAME] = {0};
    int length = 0;
    MPI_Get_processor_name(host, &length);
    char *hosts = calloc((size_t)size, sizeof host);
    MPI_Allgather(host, sizeof host, MPI_CHAR, hosts, sizeof host, MPI_CHAR, MPI_COMM_WORLD);
    /* Host index and local index of every rank, in rank order. */
    int *host_of = calloc((size_t)size, sizeof *host_of);
    int *local_of = calloc((size_t)size, sizeof *local_of);
    int host_count = 0;
    for (int r = 0; r < size; r++) {
        host_of[r] = -1;
        for (int q = 0; q < r && host_of[r] < 0; q++)
            if (strcmp(hosts + (size_t)q * sizeof host, hosts + (size_t)r * sizeof host) == 0)
                host_of[r] = host_of[q];
        if (host_of[r] < 0)
            host_of[r] = host_count++;
        local_of[r] = 0;
        for (int q = 0; q < r; q++)
            local_of[r] += host_of[q] == host_of[r];
    }
    if (host_count < 2) {
        if (rank == 0)
            printf("link: all %d ranks are on one host; nothing to measure\n", size);
        free(hosts), free(host_of), free(local_of);
        return;
    }
    int partner = -1;
    for (int r = 0; r < size && host_of[rank] <= 1; r++)
        if (host_of[r] == 1 - host_of[rank] && local_of[r] == local_of[rank])
            partner = r;
    int first_partner = -1;
    for (int r = 0; r < size && first_partner < 0; r++)
        if (host_of[r] == 1 && local_of[r] == 0)
            first_partner = r;
    bool first_pair = rank == 0 || rank == first_partner;
    /* Latency: 8-byte round trips of the first pair. */
    double latencies[200];
    char byte8[8] = {0};
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < 200 && first_pair; i++) {
        double start = now();
        if (rank == 0) {
            MPI_Send(byte8, 8, MPI_BYTE, first_partner, 8, MPI_COMM_WORLD);
            MPI_Recv(byte8, 8, MPI_BYTE, first_partner, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(byte8, 8, MPI_BYTE, 0, 8, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(byte8, 8, MPI_BYTE, 0, 8, MPI_COMM_WORLD);
        }
        latencies[i] = (now() - start) / 2;
    }
    double latency = first_pair ? median(latencies, 200) : 0;
    const size_t bytes = (size_t)64 << 20;
    double one_flow =
        link_transfer(rank == 0 ? first_partner : 0, first_pair, false, rank == 0, bytes);
    double all_pairs = link_transfer(partner, partner >= 0, true, true, bytes);
    int sender = host_of[rank] == 0 && partner >= 0, flows = 0;
    MPI_Allreduce(&sender, &flows, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("link: hosts=%d latency_us=%.1f one_flow_gbit=%.3f all_pairs_both_ways_gbit=%.3f "
               "flows=%d\n",
               host_count, latency * 1e6, (double)bytes * 8 / one_flow / 1e9,
               (double)bytes * flows * 8 / all_pairs / 1e9, flows);
    free(hosts), free(host_of), free(local_of);
}

static const char usage_text[] =
    "usage: chorus-bench [options]                 (under mpirun)\n"
    "Sweeps (nccl-tests columns, chorus against plain MPI in the same run):\n"
    "  -c, --collective NAME  allreduce (default), broadcast, allgather, reducescatter or\n"
    "                         alltoall\n"
    "  -b, --min-bytes SIZE   smallest size (default 8; K, M, G suffixes)\n"
    "  -e, --max-bytes SIZE   largest size (default 256M)\n"
    "  -f, --factor X         size step, a factor above 1 (default 2)\n"
    "  -n, --iterations N     timed operations per size (default: about 0.4 GB of traffic)\n"
    "  -w, --warmup N         untimed operations per size first (default 3)\n"
    "  -d, --dtype NAME       float32 (default), float64 or int32\n"
    "      --csv FILE         also write the table as CSV\n"
    "      --device cuda      buffers on the GPU (chorus-bench-gpu, chorus-bench-emulated)\n"
    "Other measurements:\n"
    "      --workload MODEL   a training step: resnet50, bert, or a file of gradient sizes\n"
    "      --steps N          steps of the workload (default 20; 15 with --overlap)\n"
    "      --overlap          with --workload: gradients become ready one by one behind busy\n"
    "                         work, as in backward; chorus against MPI_Allreduce and\n"
    "                         MPI_Iallreduce per tensor, as exposed communication\n"
    "      --compute-ratio L  compute per step as multiples of the communication (default 1,3)\n"
    "      --compare PARAMS   also a chorus row with these parameters (\"NAME=value,...\")\n"
    "      --step-timeline F  write one step per ratio to timeline F (F.1, ...), with the\n"
    "                         compute spans\n"
    "      --cycle N          a step of N tiny tensors: the negotiation's cost\n"
    "      --link             what the network between the first two hosts delivers to MPI\n"
    "  -h, --help             this text\n"
    "The last line of every run is a summary: line; a wrong result fails the run (exit 1).\n";

/* Index of `text` among `names`, or -1. */
static int choice(const char *text, const char *const *names, int count)
{
    for (int i = 0; i < count; i++)
        if (strcmp(text, names[i]) == 0)
            return i;
    return -1;
}

static bool parse_positive_int(const char *text, int *value)
{
    char *end = NULL;
    long parsed = strtol(text, &end, 10);
    if (end == text || *end != '\0' || parsed < 0 || parsed > 1000000000)
        return false;
    *value = (int)parsed;
    return true;
}

/* "1,3": compute ratios of --overlap, each above 0. */
static bool parse_ratios(const char *text, struct options *o)
{
    o->ratio_count = 0;
    const char *at = text;
    while (*at != '\0' && o->ratio_count < (int)ARRAY_SIZE(o->ratios)) {
        char *end = NULL;
        double ratio = strtod(at, &end);
        if (end == at || !(ratio > 0) || (*end != ',' && *end != '\0'))
            return false;
        o->ratios[o->ratio_count++] = ratio;
        at = *end == ',' ? end + 1 : end;
    }
    return *at == '\0' && o->ratio_count > 0;
}

/* Parses the command line into `o`. Returns -1 to go on, else the exit status (0 for --help,
 * 2 for a mistake, which it names). */
static int parse_options(int argc, char **argv, struct options *o)
{
    static const struct option long_options[] = {
        {"collective", required_argument, NULL, 'c'}, {"min-bytes", required_argument, NULL, 'b'},
        {"max-bytes", required_argument, NULL, 'e'},  {"factor", required_argument, NULL, 'f'},
        {"iterations", required_argument, NULL, 'n'}, {"warmup", required_argument, NULL, 'w'},
        {"dtype", required_argument, NULL, 'd'},      {"csv", required_argument, NULL, 'C'},
        {"device", required_argument, NULL, 'D'},     {"workload", required_argument, NULL, 'W'},
        {"steps", required_argument, NULL, 'S'},      {"cycle", required_argument, NULL, 'Y'},
        {"link", no_argument, NULL, 'L'},             {"overlap", no_argument, NULL, 'O'},
        {"compute-ratio", required_argument, NULL, 'R'},
        {"compare", required_argument, NULL, 'P'},
        {"step-timeline", required_argument, NULL, 'T'},
        {"help", no_argument, NULL, 'h'},             {NULL, 0, NULL, 0},
    };
    static const char *const collectives[] = {"allreduce", "broadcast", "allgather",
                                              "reducescatter", "alltoall"};
    static const chorus_collective collective_values[] = {
        CHORUS_ALLREDUCE, CHORUS_BROADCAST, CHORUS_ALLGATHER, CHORUS_REDUCESCATTER,
        CHORUS_ALLTOALL};
    static const char *const dtypes[] = {"float32", "float64", "int32"};
    static const chorus_dtype dtype_values[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_INT32};
    opterr = 0; /* the messages below name the mistake, once, on rank 0 */
    int option;
    while ((option = getopt_long(argc, argv, ":c:b:e:f:n:w:d:h", long_options, NULL)) != -1) {
        const char *value = optarg;
        int index = -1;
        bool ok = true;
        switch (option) {
        case 'c':
            index = choice(value, collectives, 5);
            ok = index >= 0;
            if (ok)
                o->collective = collective_values[index];
            break;
        case 'b':
            ok = parse_size(value, &o->min_bytes);
            break;
        case 'e':
            ok = parse_size(value, &o->max_bytes);
            break;
        case 'f': {
            char *end = NULL;
            o->factor = strtod(value, &end);
            ok = end != value && *end == '\0' && o->factor > 1;
            break;
        }
        case 'n':
            ok = parse_positive_int(value, &o->iterations);
            break;
        case 'w':
            ok = parse_positive_int(value, &o->warmup);
            break;
        case 'd':
            index = choice(value, dtypes, 3);
            ok = index >= 0;
            if (ok)
                o->dtype = dtype_values[index];
            break;
        case 'C':
            o->csv = value;
            break;
        case 'D':
            ok = strcmp(value, "cuda") == 0;
            o->device = ok;
#ifndef CHORUS_BENCH_DEVICE
            if (ok) {
                if (rank == 0)
                    fprintf(stderr, "chorus-bench: --device cuda needs chorus-bench-gpu (or "
                                    "chorus-bench-emulated)\n");
                return 2;
            }
#endif
            break;
        case 'W':
            o->workload = value;
            break;
        case 'S':
            ok = parse_positive_int(value, &o->steps);
            break;
        case 'Y':
            ok = parse_positive_int(value, &o->cycle_tensors);
            break;
        case 'L':
            o->link = true;
            break;
        case 'O':
            o->overlap = true;
            break;
        case 'R':
            ok = parse_ratios(value, o);
            break;
        case 'P':
            o->compare = value;
            break;
        case 'T':
            o->step_timeline = value;
            break;
        case 'h':
            if (rank == 0)
                fputs(usage_text, stdout);
            return 0;
        case ':':
            if (rank == 0)
                fprintf(stderr, "chorus-bench: %s needs a value (--help lists the options)\n",
                        argv[optind - 1]);
            return 2;
        default:
            if (rank == 0)
                fprintf(stderr, "chorus-bench: unknown option %s (--help lists the options)\n",
                        argv[optind - 1]);
            return 2;
        }
        if (!ok) {
            const char *name = "?";
            for (const struct option *known = long_options; known->name != NULL; known++)
                if (known->val == option)
                    name = known->name;
            if (rank == 0)
                fprintf(stderr, "chorus-bench: \"%s\" is not a valid --%s (--help lists the "
                                "valid values)\n",
                        value, name);
            return 2;
        }
    }
    if (o->overlap && o->workload == NULL) {
        if (rank == 0)
            fprintf(stderr, "chorus-bench: --overlap needs --workload MODEL\n");
        return 2;
    }
    if (optind < argc) {
        if (rank == 0)
            fprintf(stderr, "chorus-bench: unexpected argument %s (--help lists the options)\n",
                    argv[optind]);
        return 2;
    }
    return -1;
}

int main(int argc, char **argv)
{
    int provided = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct options o = {.collective = CHORUS_ALLREDUCE, .min_bytes = 8,
                        .max_bytes = (size_t)256 << 20, .factor = 2, .warmup = 3,
                        .dtype = CHORUS_FLOAT32, .ratios = {1, 3}, .ratio_count = 2};
    int parsed = parse_options(argc, argv, &o);
    if (parsed >= 0) {
        MPI_Finalize();
        return parsed;
    }
    if (o.link) {
        link_benchmark();
        MPI_Finalize();
        return 0;
    }
    if (chorus_init(NULL) != CHORUS_OK) {
        fprintf(stderr, "chorus_init: %s\n", chorus_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (o.device && (o.workload != NULL || o.cycle_tensors > 0)) {
        if (rank == 0)
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
            long wrong = overlap_benchmark(&overlap, rank, size);
            chorus_shutdown();
            MPI_Finalize();
            return wrong == 0 ? 0 : 1;
        }
        if (o.workload != NULL) {
            workload_collective = o.collective;
            workload_benchmark(o.workload, o.steps > 0 ? o.steps : 20);
        }
        else
            cycle_benchmark(o.cycle_tensors, o.collective);
        chorus_shutdown();
        MPI_Finalize();
        return 0;
    }
    double memory_bandwidth = copy_bandwidth();
    double round_trip = cache_line_round_trip();
    FILE *csv = rank == 0 && o.csv ? fopen(o.csv, "w") : NULL;
    if (csv)
        fprintf(csv, "collective,np,bytes,count,chorus_us,chorus_busbw,mpi_us,mpi_busbw,ratio\n");
    size_t element = chorus_dtype_size(o.dtype);
    const char *collective = chorus_collective_name(o.collective);
    if (rank == 0 && o.device) {
        printf("# chorus-bench %s, %d ranks, dtype %s, buffers on the GPU (NCCL)\n", collective,
               size, chorus_dtype_name(o.dtype));
#ifdef CHORUS_BENCH_EMULATED
        printf("# EMULATED GPU: the CUDA runtime and NCCL are chorus's test emulation; these "
               "times prove nothing about GPU speed\n");
#endif
        printf("#%11s %12s %8s %6s  %10s %8s %8s %6s\n", "size (B)", "count", "type", "redop",
               "time (us)", "algbw", "busbw", "#wrong");
    } else if (rank == 0) {
        printf("# chorus-bench %s, %d ranks, dtype %s; memory copy bandwidth %.2f GB/s; cache-line "
               "round trip between local ranks 0 and 1 %.0f ns\n",
               collective, size, chorus_dtype_name(o.dtype), memory_bandwidth, round_trip);
        printf("# MPI initialized with MPI_THREAD_MULTIPLE; the MPI column is measured after "
               "chorus_shutdown, with no chorus thread running\n");
        printf("#%11s %12s %8s %6s  %10s %8s %8s %6s  %10s %8s %8s %6s  %6s\n", "", "", "", "",
               "chorus", "", "", "", "MPI", "", "", "", "");
        printf("#%11s %12s %8s %6s  %10s %8s %8s %6s  %10s %8s %8s %6s  %6s\n", "size (B)",
               "count", "type", "redop", "time (us)", "algbw", "busbw", "#wrong", "time (us)",
               "algbw", "busbw", "#wrong", "ratio");
    }
    /* Every size through chorus first; then chorus shuts down and every size through MPI, so
     * that the baseline runs without chorus's background thread polling MPI beside it. */
    struct sweep_row rows[64];
    size_t row_count = 0;
    for (size_t bytes = o.min_bytes; bytes <= o.max_bytes && row_count < ARRAY_SIZE(rows);
         bytes = (size_t)ceil((double)bytes * o.factor)) {
        size_t count = bytes / element;
        /* On a GPU, reducescatters of whole blocks per rank, as a GPU job's usually are (they
         * go straight from input to output, without padding). */
        bool blocks = o.collective == CHORUS_ALLGATHER || o.collective == CHORUS_ALLTOALL ||
                      (o.device && o.collective == CHORUS_REDUCESCATTER);
        if (blocks)
            count -= count % (size_t)size;
        if (count == 0)
            count = blocks ? (size_t)size : 1;
        rows[row_count++] = (struct sweep_row){.count = count, .bytes = count * element};
        if (count * element >= o.max_bytes)
            break;
    }
    int *counts = calloc((size_t)size, sizeof *counts);
    int *displacements = calloc((size_t)size, sizeof *displacements);
    /* On a GPU there is no MPI baseline here: MPI reads host memory. */
    for (int pass = 0; pass < (o.device ? 1 : 2); pass++) {
        bool use_chorus = pass == 0;
        if (!use_chorus)
            chorus_shutdown();
        for (size_t i = 0; i < row_count; i++) {
            struct sweep_row *row = &rows[i];
            for (int r = 0; r < size; r++) {
                counts[r] = o.collective == CHORUS_REDUCESCATTER
                                ? (int)block_length(row->count, (size_t)size, (size_t)r)
                                : (int)(row->count / (size_t)size);
                displacements[r] = r * counts[r];
            }
            void *buffer = buffer_alloc(&o, row->bytes);
            void *gather_out = calloc(1, row->bytes);
            int iterations = o.iterations;
            if (iterations <= 0) {
                double target = 4e8; /* about 0.4 GB of traffic per measurement */
                iterations = (int)(target / (double)(row->bytes + 4096));
                iterations = iterations < 5 ? 5 : iterations > 2000 ? 2000 : iterations;
            }
            row->time[pass] = time_operation(&o, use_chorus, buffer, row->count, iterations,
                                             gather_out, counts, displacements);
            long wrong = check(&o, use_chorus, buffer, row->count, gather_out, counts,
                               displacements);
            MPI_Allreduce(&wrong, &row->wrong[pass], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            buffer_free(&o, buffer);
            free(gather_out);
        }
    }
    if (o.device)
        chorus_shutdown();
    double min_ratio = INFINITY, ratio_64 = NAN, latency_8 = NAN;
    for (size_t i = 0; i < row_count; i++) {
        const struct sweep_row *row = &rows[i];
        double chorus_algbw = (double)row->bytes / row->time[0] / 1e9;
        double mpi_algbw = (double)row->bytes / row->time[1] / 1e9;
        double chorus_busbw = chorus_algbw * bus_factor(o.collective);
        double mpi_busbw = mpi_algbw * bus_factor(o.collective);
        double ratio = chorus_busbw / mpi_busbw;
        if (row->bytes >= ((size_t)256 << 10) && ratio < min_ratio)
            min_ratio = ratio;
        if (row->bytes == ((size_t)64 << 20))
            ratio_64 = ratio;
        if (isnan(latency_8) && row->bytes <= 8)
            latency_8 = row->time[0] * 1e6;
        if (rank == 0 && o.device) {
            printf(" %11zu %12zu %8s %6s  %10.1f %8.2f %8.2f %6ld\n", row->bytes, row->count,
                   chorus_dtype_name(o.dtype), redop_name(o.collective),
                   row->time[0] * 1e6, chorus_algbw, chorus_busbw, row->wrong[0]);
        } else if (rank == 0) {
            printf(" %11zu %12zu %8s %6s  %10.1f %8.2f %8.2f %6ld  %10.1f %8.2f %8.2f %6ld  %6.2f\n",
                   row->bytes, row->count, chorus_dtype_name(o.dtype),
                   redop_name(o.collective), row->time[0] * 1e6,
                   chorus_algbw, chorus_busbw, row->wrong[0], row->time[1] * 1e6, mpi_algbw,
                   mpi_busbw, row->wrong[1], ratio);
            if (csv)
                fprintf(csv, "%s,%d,%zu,%zu,%.3f,%.4f,%.3f,%.4f,%.4f\n", collective, size,
                        row->bytes, row->count, row->time[0] * 1e6, chorus_busbw,
                        row->time[1] * 1e6, mpi_busbw, ratio);
        }
    }
    if (csv)
        fclose(csv);
    long wrong = 0;
    for (size_t i = 0; i < row_count; i++)
        wrong += rows[i].wrong[0] + rows[i].wrong[1];
    if (rank == 0 && o.device)
        printf("summary: %s np=%d device=cuda latency_8B_us=%.1f wrong=%ld\n", collective, size,
               latency_8, wrong);
    else if (rank == 0)
        printf("summary: %s np=%d min_ratio=%.2f ratio_at_64MiB=%.2f latency_8B_us=%.1f\n",
               collective, size, min_ratio, ratio_64, latency_8);
    free(counts);
    free(displacements);
    MPI_Finalize();
    /* Wrong results fail the run, whatever the times. */
    return wrong == 0 ? 0 : 1;
}
