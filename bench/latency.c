/*
 * latency.c — chorus-bench --latency: what one small allreduce (and a barrier) costs on each
 * path a C program takes, against plain MPI in the same run: MPI_Allreduce, chorus's ordered
 * path (CHORUS_OP_ORDERED: submit, wait, free), and its negotiated path with a name seen before
 * (chorus_allreduce, blocking). Rounds alternate between MPI, with chorus shut down (nothing of
 * chorus's runs beside it), and chorus, initialized afresh; each cell is the median over the
 * rounds of the slowest rank's mean time per operation. Every round checks one result of each
 * path. Beside the table: the round trip of a cache line between two ranks of a host, the floor
 * of any collective between them.
 */
#include "bench.h"

#include "measure.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum latency_path { PATH_MPI, PATH_ORDERED, PATH_NEGOTIATED, PATH_COUNT };

static const char *const path_names[PATH_COUNT] = {"MPI", "ordered", "negotiated"};

/* Operations per measurement: small sizes take many, so that the clock's resolution and one
 * slow iteration do not matter. */
static int iterations_for(const struct options *o, size_t bytes)
{
    if (o->sweep.iterations > 0)
        return o->sweep.iterations;
    return bytes <= 4096 ? 4000 : bytes <= 65536 ? 1000 : 200;
}

static double seconds(void)
{
    return MPI_Wtime();
}

static chorus_tensor floats(float *data, size_t count)
{
    return (chorus_tensor){.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1,
                           .shape = {(int64_t)count}};
}

/* One allreduce of `count` floats in place through `path`; false when chorus failed. */
static bool allreduce_once(enum latency_path path, float *buffer, size_t count)
{
    if (path == PATH_MPI)
        return MPI_Allreduce(MPI_IN_PLACE, buffer, (int)count, MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD) == MPI_SUCCESS;
    chorus_tensor tensor = floats(buffer, count);
    /* A name per size, as a training loop names each tensor: a name's cached description is
     * never replaced (response_cache.h), so one name of changing shapes would be negotiated
     * through rank 0 every time. */
    char name[32];
    snprintf(name, sizeof name, "latency.%zu", count);
    if (path == PATH_NEGOTIATED)
        return chorus_allreduce(name, &tensor, NULL, CHORUS_SUM) == CHORUS_OK;
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = name;
    args.input = tensor;
    args.flags = CHORUS_OP_ORDERED;
    chorus_handle *handle = NULL;
    chorus_status status = chorus_submit(&args, &handle);
    if (status == CHORUS_OK)
        status = chorus_wait(handle);
    chorus_handle_free(handle);
    return status == CHORUS_OK;
}

static bool barrier_once(enum latency_path path)
{
    if (path == PATH_MPI)
        return MPI_Barrier(MPI_COMM_WORLD) == MPI_SUCCESS;
    return chorus_barrier() == CHORUS_OK;
}

/* The slowest rank's mean seconds per operation over `iterations`, after a warm-up; a negative
 * count of wrong elements of one checked run (summed over ranks) in *wrong. `count` 0: the
 * barrier. */
static double measure(enum latency_path path, float *buffer, size_t count, int iterations,
                      int warmup, long *wrong)
{
    bool ok = true;
    warmup = warmup > iterations / 10 ? warmup : iterations / 10; /* caches and branches warm */
    for (int i = 0; i < warmup; i++)
        ok = ok && (count == 0 ? barrier_once(path) : allreduce_once(path, buffer, count));
    MPI_Barrier(MPI_COMM_WORLD);
    double started = seconds();
    for (int i = 0; i < iterations; i++)
        ok = ok && (count == 0 ? barrier_once(path) : allreduce_once(path, buffer, count));
    double mine = (seconds() - started) / iterations, slowest = 0;
    long bad = ok ? 0 : 1;
    if (count > 0) {
        measure_check_fill(buffer, count, CHORUS_FLOAT32, 7, bench_rank, bench_size);
        bad += allreduce_once(path, buffer, count)
                   ? measure_check_sum(buffer, 0, count, CHORUS_FLOAT32, bench_size, 7)
                   : (long)count;
    }
    MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    *wrong += bad;
    return slowest;
}

/* Prints one row: the three paths' medians, with chorus's against MPI's time. */
static void print_row(size_t bytes, size_t count, double *times[PATH_COUNT], int rounds,
                      long wrong)
{
    double bus = bench_size > 1 ? 2.0 * (bench_size - 1) / bench_size : 1;
    double mpi = measure_median(times[PATH_MPI], rounds);
    printf("%12zu %12zu %8s %6s", bytes, count, count ? "float32" : "none",
           count ? "sum" : "none");
    for (int p = 0; p < PATH_COUNT; p++) {
        double t = measure_median(times[p], rounds);
        double algbw = t > 0 ? (double)bytes / t / 1e9 : 0;
        printf("  %10.2f %8.2f %8.2f", t * 1e6, algbw, algbw * bus);
        if (p != PATH_MPI)
            printf(" %6.2f", mpi > 0 ? t / mpi : 0);
    }
    printf(" %6ld\n", wrong);
}

int latency_benchmark(const struct options *o)
{
    size_t sizes[64];
    int size_count = 0;
    for (double b = (double)o->min_bytes; b <= (double)o->max_bytes && size_count < 63;
         b *= o->factor)
        sizes[size_count++] = ((size_t)b + 3) / 4 * 4;
    int rounds = o->rounds > 0 ? o->rounds : 5;
    int rows = size_count + 1; /* the barrier last */
    double *times = calloc((size_t)rows * PATH_COUNT * (size_t)rounds, sizeof *times);
    long *wrong = calloc((size_t)rows, sizeof *wrong);
    float *buffer = malloc(o->max_bytes + 4);
    if (times == NULL || wrong == NULL || buffer == NULL) {
        fprintf(stderr, "chorus-bench: out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    memset(buffer, 0, o->max_bytes + 4);
    double round_trip = cache_line_round_trip();
#define CELL(row, path, round) times[((size_t)(row) * PATH_COUNT + (path)) * (size_t)rounds + (round)]
    for (int round = 0; round < rounds; round++) {
        /* MPI alone: chorus is shut down (its thread gone) while MPI is measured. */
        for (int s = 0; s < rows; s++) {
            size_t count = s < size_count ? sizes[s] / 4 : 0;
            int iterations = iterations_for(o, count * 4);
            CELL(s, PATH_MPI, round) =
                measure(PATH_MPI, buffer, count, iterations, o->sweep.warmup, &wrong[s]);
        }
        if (chorus_init(NULL) != CHORUS_OK) {
            fprintf(stderr, "chorus_init: %s\n", chorus_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int path = PATH_ORDERED; path < PATH_COUNT; path++) {
            for (int s = 0; s < rows; s++) {
                size_t count = s < size_count ? sizes[s] / 4 : 0;
                int iterations = iterations_for(o, count * 4);
                /* The barrier is negotiated (chorus_barrier); its ordered cell repeats it. */
                CELL(s, path, round) = measure((enum latency_path)path, buffer, count, iterations,
                                               o->sweep.warmup, &wrong[s]);
            }
        }
        chorus_shutdown();
    }
    if (bench_rank == 0) {
        printf("# chorus-bench --latency, %d ranks, %d rounds (MPI with chorus shut down, then "
               "chorus), medians of the slowest rank's mean; t/MPI: chorus's time over "
               "MPI's\n",
               bench_size, rounds);
        printf("# cache-line round trip between local ranks 0 and 1: %.0f ns (the floor)\n",
               round_trip);
        printf("#%11s %12s %8s %6s", "size (B)", "count", "type", "redop");
        for (int p = 0; p < PATH_COUNT; p++)
            printf("  %10s %8s %8s%s", path_names[p], "algbw", "busbw", p ? "  t/MPI" : "");
        printf(" %6s\n", "#wrong");
        printf("#%11s %12s %8s %6s", "", "", "", "");
        for (int p = 0; p < PATH_COUNT; p++)
            printf("  %10s %8s %8s%s", "time (us)", "GB/s", "GB/s", p ? "       " : "");
        printf("\n");
        long total_wrong = 0;
        for (int s = 0; s < rows; s++) {
            double *row[PATH_COUNT];
            for (int p = 0; p < PATH_COUNT; p++)
                row[p] = &CELL(s, p, 0);
            if (s == size_count)
                printf("# barrier: MPI_Barrier against chorus_barrier (negotiated, in both "
                       "chorus columns)\n");
            print_row(s < size_count ? sizes[s] : 0, s < size_count ? sizes[s] / 4 : 0, row,
                      rounds, wrong[s]);
            total_wrong += wrong[s];
        }
        double *first[PATH_COUNT];
        for (int p = 0; p < PATH_COUNT; p++)
            first[p] = &CELL(0, p, 0);
        printf("summary: latency np=%d ordered_%zuB_us=%.2f negotiated_%zuB_us=%.2f "
               "mpi_%zuB_us=%.2f wrong=%ld\n",
               bench_size, sizes[0], measure_median(first[PATH_ORDERED], rounds) * 1e6, sizes[0],
               measure_median(first[PATH_NEGOTIATED], rounds) * 1e6, sizes[0],
               measure_median(first[PATH_MPI], rounds) * 1e6, total_wrong);
    }
#undef CELL
    long any_wrong = 0;
    for (int s = 0; s < rows; s++)
        any_wrong += wrong[s];
    free(times);
    free(wrong);
    free(buffer);
    return any_wrong == 0 ? 0 : 1;
}
