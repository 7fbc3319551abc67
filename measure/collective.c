/*
 * collective.c — one size of a sweep (measure.h): a collective timed through chorus (submit,
 * wait) or through plain MPI (MPI_Allreduce, MPI_Bcast, MPI_Allgatherv, MPI_Reduce_scatter,
 * MPI_Alltoallv), then run once more on data every rank can check (check.c), so that a
 * measurement of a broken path says so. chorus-bench's sweep prints these as nccl-tests does;
 * chorus-tune times each algorithm with them. With `device` the buffers are on the local rank's
 * GPU (chorus only: MPI reads host memory).
 */
#include "measure.h"

#include <chorus_query.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One size's measurement: what it runs, this rank's place in the job, and its buffers. */
struct run {
    const struct measure_sweep *sweep;
    int rank, size; /* in MPI_COMM_WORLD */
    size_t count;   /* elements of `buffer` */
    void *buffer;   /* the measured buffer: host memory, or with `device` the GPU's */
    void *gather_out; /* MPI's output, and the check's copy of chorus's */
    int *counts, *displacements; /* MPI's blocks, one per rank */
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

/* Where the measured buffers live: host memory, or with `device` the local rank's GPU (chorus
 * built with CUDA and NCCL, and chorus-bench-emulated over the emulated CUDA runtime and
 * NCCL). */
static void *buffer_alloc(const struct measure_sweep *sweep, size_t bytes)
{
    if (sweep->device)
        return chorus_query_device_alloc(bytes, chorus_local_rank());
    /* MPI gets the same memory: on this VM its allreduce ran at 1.4-1.9 GB/s in some runs and
     * 3.7-10 GB/s in others, from 64 KiB to 4 MiB, on the shared heap's memory and on calloc's
     * alike (np=2, 2026-11-26). */
    return measure_host_alloc(bytes, measure_shared_heap);
}

static void buffer_free(const struct measure_sweep *sweep, void *buffer)
{
    if (sweep->device) {
        chorus_query_device_free(buffer);
        return;
    }
    measure_host_free(buffer);
}

/* Copies between a measured buffer (either end) and host memory. */
static void buffer_copy(const struct measure_sweep *sweep, void *to, const void *from,
                        size_t bytes)
{
    if (sweep->device) {
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
static chorus_tensor measured_tensor(const struct measure_sweep *sweep, void *buffer,
                                     size_t count)
{
    return (chorus_tensor){.data = buffer, .dtype = sweep->dtype, .ndims = 1,
                           .shape = {(int64_t)count},
                           .memory = sweep->device ? CHORUS_MEMORY_CUDA : CHORUS_MEMORY_HOST,
                           .device = sweep->device ? chorus_local_rank() : 0};
}

/* One operation through chorus: submit, wait. */
static chorus_status run_chorus(const struct run *run, chorus_tensor *gathered)
{
    const struct measure_sweep *sweep = run->sweep;
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.collective = sweep->collective;
    args.name = "bench";
    args.input = measured_tensor(sweep, run->buffer, run->count);
    args.flags = sweep->ordered ? CHORUS_OP_ORDERED : 0;
    if (sweep->collective == CHORUS_ALLGATHER)
        args.input.shape[0] = (int64_t)(run->count / (size_t)run->size);
    chorus_handle *handle = NULL;
    chorus_status status = chorus_submit(&args, &handle);
    if (status == CHORUS_OK)
        status = chorus_wait(handle);
    /* The handle keeps an allgather's output: freeing the handle lets chorus reuse the buffer,
     * as a training loop that reads the result and lets go of it would. */
    if (status == CHORUS_OK && gathered != NULL && sweep->collective == CHORUS_ALLGATHER)
        chorus_handle_output(handle, gathered);
    chorus_handle_free(handle);
    return status;
}

static void run_mpi(const struct run *run)
{
    MPI_Datatype type = mpi_type(run->sweep->dtype);
    int count = (int)run->count;
    switch (run->sweep->collective) {
    case CHORUS_ALLREDUCE:
        MPI_Allreduce(MPI_IN_PLACE, run->buffer, count, type, MPI_SUM, MPI_COMM_WORLD);
        break;
    case CHORUS_BROADCAST:
        MPI_Bcast(run->buffer, count, type, 0, MPI_COMM_WORLD);
        break;
    case CHORUS_ALLGATHER:
        MPI_Allgatherv(run->buffer, run->counts[run->rank], type, run->gather_out, run->counts,
                       run->displacements, type, MPI_COMM_WORLD);
        break;
    case CHORUS_REDUCESCATTER:
        MPI_Reduce_scatter(run->buffer, run->gather_out, run->counts, type, MPI_SUM,
                           MPI_COMM_WORLD);
        break;
    case CHORUS_ALLTOALL:
        /* Every block the same size: counts[r] elements at displacements[r], both ways. */
        MPI_Alltoallv(run->buffer, run->counts, run->displacements, type, run->gather_out,
                      run->counts, run->displacements, type, MPI_COMM_WORLD);
        break;
    }
}

/* One operation through `path`, on what the caller put in the buffer. */
static void run_once(const struct run *run, enum measure_path path)
{
    if (path == MEASURE_CHORUS)
        run_chorus(run, NULL);
    else
        run_mpi(run);
}

/* Runs the operation once on data every rank can check (check.c) and counts wrong elements.
 * The data is made and checked in host memory `work`, copied to and from the buffer where that
 * is device memory. */
static long check(const struct run *run, enum measure_path path)
{
    const struct measure_sweep *sweep = run->sweep;
    int rank = run->rank, size = run->size;
    size_t count = run->count, element = chorus_dtype_size(sweep->dtype), bytes = count * element;
    unsigned char *work = sweep->device ? malloc(bytes ? bytes : 1) : run->buffer;
    long wrong = 0;
    if (sweep->collective == CHORUS_ALLREDUCE) {
        measure_check_fill(work, count, sweep->dtype, 17, rank, size);
        if (sweep->device)
            buffer_copy(sweep, run->buffer, work, bytes);
        run_once(run, path);
        if (sweep->device)
            buffer_copy(sweep, work, run->buffer, bytes);
        wrong = measure_check_sum(work, 0, count, sweep->dtype, size, 17);
    } else if (sweep->collective == CHORUS_REDUCESCATTER) {
        measure_check_fill(work, count, sweep->dtype, 20, rank, size);
        if (sweep->device)
            buffer_copy(sweep, run->buffer, work, bytes);
        size_t first = block_start(count, (size_t)size, (size_t)rank);
        size_t length = block_length(count, (size_t)size, (size_t)rank);
        if (path == MEASURE_CHORUS) {
            chorus_tensor tensor = measured_tensor(sweep, run->buffer, count), scattered = {0};
            if (chorus_reducescatter("bench.check", &tensor, CHORUS_SUM, &scattered) !=
                    CHORUS_OK ||
                scattered.shape[0] != (int64_t)length)
                wrong = (long)length + 1;
            else
                buffer_copy(sweep, run->gather_out, scattered.data, length * element);
            if (scattered.data != NULL)
                buffer_free(sweep, scattered.data);
        } else {
            run_mpi(run);
        }
        if (wrong == 0)
            wrong = measure_check_sum(run->gather_out, first, length, sweep->dtype, size, 20);
    } else if (sweep->collective == CHORUS_ALLTOALL) {
        /* Block k of this rank's input goes to rank k: bytes from (seed 40 + k, this rank). */
        size_t block = (count / (size_t)size) * element;
        for (int k = 0; k < size; k++)
            measure_check_fill_bytes(work + (size_t)k * block, block, 40 + (uint64_t)k, rank);
        if (sweep->device)
            buffer_copy(sweep, run->buffer, work, block * (size_t)size);
        if (path == MEASURE_CHORUS) {
            chorus_tensor tensor = measured_tensor(sweep, run->buffer, count), exchanged = {0};
            if (chorus_alltoall("bench.check", &tensor, NULL, &exchanged, NULL) != CHORUS_OK)
                wrong = (long)(block * (size_t)size) + 1;
            else
                buffer_copy(sweep, run->gather_out, exchanged.data, block * (size_t)size);
            if (exchanged.data != NULL)
                buffer_free(sweep, exchanged.data);
        } else {
            run_mpi(run);
        }
        for (int r = 0; r < size && wrong == 0; r++)
            wrong += measure_check_bytes((unsigned char *)run->gather_out + (size_t)r * block,
                                         block, 40 + (uint64_t)rank, r);
    } else if (sweep->collective == CHORUS_BROADCAST) {
        if (rank == 0)
            measure_check_fill_bytes(work, bytes, 18, 0);
        else
            memset(work, 0, bytes);
        if (sweep->device)
            buffer_copy(sweep, run->buffer, work, bytes);
        run_once(run, path);
        if (sweep->device)
            buffer_copy(sweep, work, run->buffer, bytes);
        wrong = measure_check_bytes(work, bytes, 18, 0);
    } else {
        size_t block = (count / (size_t)size) * element;
        measure_check_fill_bytes(work, block, 19, rank);
        if (sweep->device)
            buffer_copy(sweep, run->buffer, work, block);
        if (path == MEASURE_CHORUS) {
            chorus_tensor tensor = measured_tensor(sweep, run->buffer, count / (size_t)size);
            chorus_tensor gathered = {0};
            if (chorus_allgather("bench.check", &tensor, &gathered) != CHORUS_OK) {
                wrong = (long)(block * (size_t)size) + 1;
            } else {
                buffer_copy(sweep, run->gather_out, gathered.data, block * (size_t)size);
                buffer_free(sweep, gathered.data);
            }
        } else {
            run_mpi(run);
        }
        for (int r = 0; r < size && wrong == 0; r++)
            wrong += measure_check_bytes((char *)run->gather_out + (size_t)r * block, block, 19,
                                         r);
    }
    if (sweep->device)
        free(work);
    return wrong;
}

/* Average seconds per operation over `iterations`, the maximum over ranks. */
static double time_operation(const struct run *run, enum measure_path path, int iterations)
{
    int warmup = run->sweep->warmup > iterations / 10 ? run->sweep->warmup : iterations / 10;
    for (int i = 0; i < warmup; i++) {
        if (path == MEASURE_CHORUS)
            run_chorus(run, &(chorus_tensor){0});
        else
            run_mpi(run);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    double start = measure_now();
    for (int i = 0; i < iterations; i++) {
        if (path == MEASURE_CHORUS) {
            chorus_tensor gathered = {0};
            if (run_chorus(run, &gathered) != CHORUS_OK) {
                fprintf(stderr, "rank %d: %s\n", run->rank, chorus_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        } else {
            run_mpi(run);
        }
    }
    double elapsed = (measure_now() - start) / iterations, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

size_t measure_sweep_count(const struct measure_sweep *sweep, size_t bytes)
{
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t count = bytes / chorus_dtype_size(sweep->dtype);
    /* On a GPU, reducescatters of whole blocks per rank, as a GPU job's usually are (they go
     * straight from input to output, without padding). */
    bool blocks = sweep->collective == CHORUS_ALLGATHER || sweep->collective == CHORUS_ALLTOALL ||
                  (sweep->device && sweep->collective == CHORUS_REDUCESCATTER);
    if (blocks)
        count -= count % (size_t)size;
    if (count == 0)
        count = blocks ? (size_t)size : 1;
    return count;
}

/* Times `count` elements (sweep->iterations times, else as many as make about 0.4 GB of
 * traffic), then checks one more operation's result. */
double measure_sweep_size(const struct measure_sweep *sweep, enum measure_path path,
                          size_t count, long *wrong)
{
    struct run run = {.sweep = sweep, .count = count};
    MPI_Comm_rank(MPI_COMM_WORLD, &run.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &run.size);
    size_t bytes = count * chorus_dtype_size(sweep->dtype);
    run.counts = calloc((size_t)run.size, sizeof *run.counts);
    run.displacements = calloc((size_t)run.size, sizeof *run.displacements);
    for (int r = 0; r < run.size; r++) {
        run.counts[r] = sweep->collective == CHORUS_REDUCESCATTER
                            ? (int)block_length(count, (size_t)run.size, (size_t)r)
                            : (int)(count / (size_t)run.size);
        run.displacements[r] = r * run.counts[r];
    }
    run.buffer = buffer_alloc(sweep, bytes);
    if (run.buffer == NULL) {
        fprintf(stderr, "rank %d: cannot allocate %zu bytes of %s%s\n", run.rank, bytes,
                sweep->device ? "memory on CUDA device " : "host memory",
                sweep->device ? "(is one visible to this rank?)" : "");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    run.gather_out = calloc(1, bytes ? bytes : 1);
    int iterations = sweep->iterations;
    if (iterations <= 0) {
        double target = 4e8;
        iterations = (int)(target / (double)(bytes + 4096));
        iterations = iterations < 5 ? 5 : iterations > 2000 ? 2000 : iterations;
    }
    double seconds = time_operation(&run, path, iterations);
    long mine = check(&run, path);
    MPI_Allreduce(&mine, wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    buffer_free(sweep, run.buffer);
    free(run.gather_out);
    free(run.counts);
    free(run.displacements);
    return seconds;
}

bool measure_parse_size(const char *text, size_t *bytes)
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
