/*
 * sweep.c — chorus-bench's sweep: every size from -b to -e through chorus (submit, wait), then,
 * after chorus_shutdown, through plain MPI (MPI_Allreduce, MPI_Bcast, MPI_Allgatherv,
 * MPI_Reduce_scatter, MPI_Alltoallv), as nccl-tests prints it: size, count, type, redop, time,
 * algbw, busbw, #wrong, and the ratio of the busbws. Results are checked, not only timed. With
 * --device cuda the buffers are on the local rank's GPU (no MPI column: MPI reads host memory).
 */
#include "bench.h"

#include "check.h"
#include "workload.h"

#include <chorus_query.h>
#include <math.h>
#include <mpi.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One size of a sweep: index 0 chorus, 1 MPI. */
struct sweep_row {
    size_t count, bytes;
    double time[2];
    long wrong[2];
};

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
    case CHORUS_ALLREDUCE: return bench_size > 1 ? 2.0 * (bench_size - 1) / bench_size : 1;
    case CHORUS_ALLGATHER:
    case CHORUS_REDUCESCATTER:
    case CHORUS_ALLTOALL: return bench_size > 1 ? (double)(bench_size - 1) / bench_size : 1;
    default: return 1;
    }
}

/* Where the measured buffers live: host memory, or with --device cuda the local rank's GPU
 * (chorus built with CUDA and NCCL, and chorus-bench-emulated over the emulated CUDA runtime
 * and NCCL). */
static void *buffer_alloc(const struct options *o, size_t bytes)
{
    if (o->device)
        return chorus_query_device_alloc(bytes, chorus_local_rank());
    /* MPI gets the same memory: on this VM its allreduce ran at 1.4-1.9 GB/s in some runs and
     * 3.7-10 GB/s in others, from 64 KiB to 4 MiB, on the shared heap's memory and on calloc's
     * alike (np=2, 2026-11-26). */
    return bench_host_alloc(bytes, bench_shared_heap);
}

static void buffer_free(const struct options *o, void *buffer)
{
    if (o->device) {
        chorus_query_device_free(buffer);
        return;
    }
    bench_host_free(buffer);
}

/* Copies between a measured buffer (either end) and host memory. */
static void buffer_copy(const struct options *o, void *to, const void *from, size_t bytes)
{
    if (o->device) {
        chorus_query_device_copy(to, from, bytes);
        return;
    }
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
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.collective = o->collective;
    args.name = "bench";
    args.input = measured_tensor(o, buffer, count);
    args.flags = o->ordered ? CHORUS_OP_ORDERED : 0;
    if (o->collective == CHORUS_ALLGATHER)
        args.input.shape[0] = (int64_t)(count / (size_t)bench_size);
    chorus_handle *handle = NULL;
    chorus_status status = chorus_submit(&args, &handle);
    if (status == CHORUS_OK)
        status = chorus_wait(handle);
    /* The handle keeps an allgather's output: freeing the handle lets chorus reuse the buffer,
     * as a training loop that reads the result and lets go of it would. */
    if (status == CHORUS_OK && gathered != NULL && o->collective == CHORUS_ALLGATHER)
        chorus_handle_output(handle, gathered);
    chorus_handle_free(handle);
    return status;
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
        MPI_Allgatherv(buffer, counts[bench_rank], type, gather_out, counts, displacements, type,
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

/* Runs the operation once on data every rank can check (check.h) and counts wrong elements.
 * The data is made and checked in host memory `work`, copied to and from `buffer` where that is
 * device memory. */
static long check(const struct options *o, bool use_chorus, void *buffer, size_t count,
                  void *gather_out, int *counts, int *displacements)
{
    size_t element = chorus_dtype_size(o->dtype), bytes = count * element;
    unsigned char *work = o->device ? malloc(bytes ? bytes : 1) : buffer;
    long wrong = 0;
    if (o->collective == CHORUS_ALLREDUCE) {
        check_fill(work, count, o->dtype, 17, bench_rank, bench_size);
        if (o->device)
            buffer_copy(o, buffer, work, bytes);
        if (use_chorus)
            run_chorus(o, buffer, count, NULL);
        else
            run_mpi(o, buffer, count, NULL, counts, displacements);
        if (o->device)
            buffer_copy(o, work, buffer, bytes);
        wrong = check_sum(work, 0, count, o->dtype, bench_size, 17);
    } else if (o->collective == CHORUS_REDUCESCATTER) {
        check_fill(work, count, o->dtype, 20, bench_rank, bench_size);
        if (o->device)
            buffer_copy(o, buffer, work, bytes);
        size_t first = block_start(count, (size_t)bench_size, (size_t)bench_rank);
        size_t length = block_length(count, (size_t)bench_size, (size_t)bench_rank);
        if (use_chorus) {
            chorus_tensor tensor = measured_tensor(o, buffer, count), scattered = {0};
            if (chorus_reducescatter("bench.check", &tensor, CHORUS_SUM, &scattered) !=
                    CHORUS_OK ||
                scattered.shape[0] != (int64_t)length)
                wrong = (long)length + 1;
            else
                buffer_copy(o, gather_out, scattered.data, length * element);
            if (scattered.data != NULL)
                buffer_free(o, scattered.data);
        } else {
            run_mpi(o, buffer, count, gather_out, counts, displacements);
        }
        if (wrong == 0)
            wrong = check_sum(gather_out, first, length, o->dtype, bench_size, 20);
    } else if (o->collective == CHORUS_ALLTOALL) {
        /* Block k of this rank's input goes to rank k: bytes from (seed 40 + k, this rank). */
        size_t block = (count / (size_t)bench_size) * element;
        for (int k = 0; k < bench_size; k++)
            check_fill_bytes(work + (size_t)k * block, block, 40 + (uint64_t)k, bench_rank);
        if (o->device)
            buffer_copy(o, buffer, work, block * (size_t)bench_size);
        if (use_chorus) {
            chorus_tensor tensor = measured_tensor(o, buffer, count), exchanged = {0};
            if (chorus_alltoall("bench.check", &tensor, NULL, &exchanged, NULL) != CHORUS_OK)
                wrong = (long)(block * (size_t)bench_size) + 1;
            else
                buffer_copy(o, gather_out, exchanged.data, block * (size_t)bench_size);
            if (exchanged.data != NULL)
                buffer_free(o, exchanged.data);
        } else {
            run_mpi(o, buffer, count, gather_out, counts, displacements);
        }
        for (int r = 0; r < bench_size && wrong == 0; r++)
            wrong += check_bytes((unsigned char *)gather_out + (size_t)r * block, block,
                                 40 + (uint64_t)bench_rank, r);
    } else if (o->collective == CHORUS_BROADCAST) {
        if (bench_rank == 0)
            check_fill_bytes(work, bytes, 18, 0);
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
        wrong = check_bytes(work, bytes, 18, 0);
    } else {
        size_t block = (count / (size_t)bench_size) * element;
        check_fill_bytes(work, block, 19, bench_rank);
        if (o->device)
            buffer_copy(o, buffer, work, block);
        if (use_chorus) {
            chorus_tensor tensor = measured_tensor(o, buffer, count / (size_t)bench_size);
            chorus_tensor gathered = {0};
            if (chorus_allgather("bench.check", &tensor, &gathered) != CHORUS_OK) {
                wrong = (long)(block * (size_t)bench_size) + 1;
            } else {
                buffer_copy(o, gather_out, gathered.data, block * (size_t)bench_size);
                buffer_free(o, gathered.data);
            }
        } else {
            run_mpi(o, buffer, count, gather_out, counts, displacements);
        }
        for (int r = 0; r < bench_size && wrong == 0; r++)
            wrong += check_bytes((char *)gather_out + (size_t)r * block, block, 19, r);
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
                fprintf(stderr, "rank %d: %s\n", bench_rank, chorus_last_error());
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

size_t sweep_count(const struct options *o, size_t bytes)
{
    size_t count = bytes / chorus_dtype_size(o->dtype);
    /* On a GPU, reducescatters of whole blocks per rank, as a GPU job's usually are (they go
     * straight from input to output, without padding). */
    bool blocks = o->collective == CHORUS_ALLGATHER || o->collective == CHORUS_ALLTOALL ||
                  (o->device && o->collective == CHORUS_REDUCESCATTER);
    if (blocks)
        count -= count % (size_t)bench_size;
    if (count == 0)
        count = blocks ? (size_t)bench_size : 1;
    return count;
}

/* Times `count` elements through chorus or MPI (o->iterations times, else as many as make about
 * 0.4 GB of traffic), then checks one more operation's result; `wrong` gets the wrong elements
 * summed over ranks. Seconds per operation, the slowest rank's. */
static double measure(const struct options *o, bool use_chorus, size_t count, int *counts,
                      int *displacements, long *wrong)
{
    size_t bytes = count * chorus_dtype_size(o->dtype);
    for (int r = 0; r < bench_size; r++) {
        counts[r] = o->collective == CHORUS_REDUCESCATTER
                        ? (int)block_length(count, (size_t)bench_size, (size_t)r)
                        : (int)(count / (size_t)bench_size);
        displacements[r] = r * counts[r];
    }
    void *buffer = buffer_alloc(o, bytes);
    void *gather_out = calloc(1, bytes ? bytes : 1);
    int iterations = o->iterations;
    if (iterations <= 0) {
        double target = 4e8;
        iterations = (int)(target / (double)(bytes + 4096));
        iterations = iterations < 5 ? 5 : iterations > 2000 ? 2000 : iterations;
    }
    double seconds = time_operation(o, use_chorus, buffer, count, iterations, gather_out, counts,
                                    displacements);
    long mine = check(o, use_chorus, buffer, count, gather_out, counts, displacements);
    MPI_Allreduce(&mine, wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    buffer_free(o, buffer);
    free(gather_out);
    return seconds;
}

double sweep_measure_chorus(const struct options *o, size_t count, long *wrong)
{
    int *counts = calloc((size_t)bench_size, sizeof *counts);
    int *displacements = calloc((size_t)bench_size, sizeof *displacements);
    double seconds = measure(o, true, count, counts, displacements, wrong);
    free(counts);
    free(displacements);
    return seconds;
}

int sweep_benchmark(const struct options *o)
{
    double memory_bandwidth = copy_bandwidth();
    double round_trip = cache_line_round_trip();
    FILE *csv = bench_rank == 0 && o->csv ? fopen(o->csv, "w") : NULL;
    if (csv)
        fprintf(csv, "collective,np,bytes,count,chorus_us,chorus_busbw,mpi_us,mpi_busbw,ratio\n");
    size_t element = chorus_dtype_size(o->dtype);
    const char *collective = chorus_collective_name(o->collective);
    if (bench_rank == 0 && o->device) {
        printf("# chorus-bench %s, %d ranks, dtype %s, buffers on the GPU (NCCL)\n", collective,
               bench_size, chorus_dtype_name(o->dtype));
#ifdef CHORUS_BENCH_EMULATED
        printf("# EMULATED GPU: the CUDA runtime and NCCL are chorus's test emulation; these "
               "times prove nothing about GPU speed\n");
#endif
        printf("#%11s %12s %8s %6s  %10s %8s %8s %6s\n", "size (B)", "count", "type", "redop",
               "time (us)", "algbw", "busbw", "#wrong");
    } else if (bench_rank == 0) {
        printf("# chorus-bench %s, %d ranks, dtype %s; memory copy bandwidth %.2f GB/s; cache-line "
               "round trip between local ranks 0 and 1 %.0f ns\n",
               collective, bench_size, chorus_dtype_name(o->dtype), memory_bandwidth, round_trip);
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
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes && row_count < ARRAY_SIZE(rows);
         bytes = (size_t)ceil((double)bytes * o->factor)) {
        size_t count = sweep_count(o, bytes);
        rows[row_count++] = (struct sweep_row){.count = count, .bytes = count * element};
        if (count * element >= o->max_bytes)
            break;
    }
    int *counts = calloc((size_t)bench_size, sizeof *counts);
    int *displacements = calloc((size_t)bench_size, sizeof *displacements);
    /* On a GPU there is no MPI baseline here: MPI reads host memory. */
    for (int pass = 0; pass < (o->device ? 1 : 2); pass++) {
        bool use_chorus = pass == 0;
        if (!use_chorus)
            chorus_shutdown();
        for (size_t i = 0; i < row_count; i++) {
            struct sweep_row *row = &rows[i];
            row->time[pass] = measure(o, use_chorus, row->count, counts, displacements,
                                      &row->wrong[pass]);
        }
    }
    if (o->device)
        chorus_shutdown();
    double min_ratio = INFINITY, ratio_64 = NAN, latency_8 = NAN;
    for (size_t i = 0; i < row_count; i++) {
        const struct sweep_row *row = &rows[i];
        double chorus_algbw = (double)row->bytes / row->time[0] / 1e9;
        double mpi_algbw = (double)row->bytes / row->time[1] / 1e9;
        double chorus_busbw = chorus_algbw * bus_factor(o->collective);
        double mpi_busbw = mpi_algbw * bus_factor(o->collective);
        double ratio = chorus_busbw / mpi_busbw;
        if (row->bytes >= ((size_t)256 << 10) && ratio < min_ratio)
            min_ratio = ratio;
        if (row->bytes == ((size_t)64 << 20))
            ratio_64 = ratio;
        if (isnan(latency_8) && row->bytes <= 8)
            latency_8 = row->time[0] * 1e6;
        if (bench_rank == 0 && o->device) {
            printf(" %11zu %12zu %8s %6s  %10.1f %8.2f %8.2f %6ld\n", row->bytes, row->count,
                   chorus_dtype_name(o->dtype), redop_name(o->collective),
                   row->time[0] * 1e6, chorus_algbw, chorus_busbw, row->wrong[0]);
        } else if (bench_rank == 0) {
            printf(" %11zu %12zu %8s %6s  %10.1f %8.2f %8.2f %6ld  %10.1f %8.2f %8.2f %6ld  %6.2f\n",
                   row->bytes, row->count, chorus_dtype_name(o->dtype),
                   redop_name(o->collective), row->time[0] * 1e6,
                   chorus_algbw, chorus_busbw, row->wrong[0], row->time[1] * 1e6, mpi_algbw,
                   mpi_busbw, row->wrong[1], ratio);
            if (csv)
                fprintf(csv, "%s,%d,%zu,%zu,%.3f,%.4f,%.3f,%.4f,%.4f\n", collective, bench_size,
                        row->bytes, row->count, row->time[0] * 1e6, chorus_busbw,
                        row->time[1] * 1e6, mpi_busbw, ratio);
        }
    }
    if (csv)
        fclose(csv);
    long wrong = 0;
    for (size_t i = 0; i < row_count; i++)
        wrong += rows[i].wrong[0] + rows[i].wrong[1];
    if (bench_rank == 0 && o->device)
        printf("summary: %s np=%d device=cuda latency_8B_us=%.1f wrong=%ld\n", collective, bench_size,
               latency_8, wrong);
    else if (bench_rank == 0)
        printf("summary: %s np=%d min_ratio=%.2f ratio_at_64MiB=%.2f latency_8B_us=%.1f\n",
               collective, bench_size, min_ratio, ratio_64, latency_8);
    free(counts);
    free(displacements);
    /* Wrong results fail the run, whatever the times. */
    return wrong == 0 ? 0 : 1;
}

bool bench_parse_size(const char *text, size_t *bytes)
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
