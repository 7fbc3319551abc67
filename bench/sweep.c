/*
 * sweep.c — chorus-bench's sweep: every size from -b to -e through chorus (submit, wait), then,
 * after chorus_shutdown, through plain MPI (MPI_Allreduce, MPI_Bcast, MPI_Allgatherv,
 * MPI_Reduce_scatter, MPI_Alltoallv), as nccl-tests prints it: size, count, type, redop, time,
 * algbw, busbw, #wrong, and the ratio of the busbws. Results are checked, not only timed. With
 * --device cuda the buffers are on the local rank's GPU (no MPI column: MPI reads host memory).
 * Each size is measured by measure/collective.c, which chorus-tune's measurements share.
 */
#include "bench.h"

#include <math.h>
#include <stdio.h>

/* One size of a sweep: index MEASURE_CHORUS, then MEASURE_MPI. */
struct sweep_row {
    size_t count, bytes;
    double time[2];
    long wrong[2];
};

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

int sweep_benchmark(const struct options *o)
{
    const struct measure_sweep *sweep = &o->sweep;
    double memory_bandwidth = copy_bandwidth();
    double round_trip = cache_line_round_trip();
    FILE *csv = bench_rank == 0 && o->csv ? fopen(o->csv, "w") : NULL;
    if (csv)
        fprintf(csv, "collective,np,bytes,count,chorus_us,chorus_busbw,mpi_us,mpi_busbw,ratio\n");
    size_t element = chorus_dtype_size(sweep->dtype);
    const char *collective = chorus_collective_name(sweep->collective);
    if (bench_rank == 0 && sweep->device) {
        printf("# chorus-bench %s, %d ranks, dtype %s, buffers on the GPU (NCCL)\n", collective,
               bench_size, chorus_dtype_name(sweep->dtype));
#ifdef CHORUS_BENCH_EMULATED
        printf("# EMULATED GPU: the CUDA runtime and NCCL are chorus's test emulation; these "
               "times prove nothing about GPU speed\n");
#endif
        printf("#%11s %12s %8s %6s  %10s %8s %8s %6s\n", "size (B)", "count", "type", "redop",
               "time (us)", "algbw", "busbw", "#wrong");
    } else if (bench_rank == 0) {
        printf("# chorus-bench %s, %d ranks, dtype %s; memory copy bandwidth %.2f GB/s; cache-line "
               "round trip between local ranks 0 and 1 %.0f ns\n",
               collective, bench_size, chorus_dtype_name(sweep->dtype), memory_bandwidth,
               round_trip);
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
        size_t count = measure_sweep_count(sweep, bytes);
        rows[row_count++] = (struct sweep_row){.count = count, .bytes = count * element};
        if (count * element >= o->max_bytes)
            break;
    }
    /* On a GPU there is no MPI baseline here: MPI reads host memory. */
    for (int pass = MEASURE_CHORUS; pass <= (sweep->device ? MEASURE_CHORUS : MEASURE_MPI);
         pass++) {
        if (pass == MEASURE_MPI)
            chorus_shutdown();
        for (size_t i = 0; i < row_count; i++) {
            struct sweep_row *row = &rows[i];
            row->time[pass] = measure_sweep_size(sweep, (enum measure_path)pass, row->count,
                                                 &row->wrong[pass]);
        }
    }
    if (sweep->device)
        chorus_shutdown();
    double min_ratio = INFINITY, ratio_64 = NAN, latency_8 = NAN;
    for (size_t i = 0; i < row_count; i++) {
        const struct sweep_row *row = &rows[i];
        double chorus_algbw = (double)row->bytes / row->time[0] / 1e9;
        double mpi_algbw = (double)row->bytes / row->time[1] / 1e9;
        double chorus_busbw = chorus_algbw * bus_factor(sweep->collective);
        double mpi_busbw = mpi_algbw * bus_factor(sweep->collective);
        double ratio = chorus_busbw / mpi_busbw;
        if (row->bytes >= ((size_t)256 << 10) && ratio < min_ratio)
            min_ratio = ratio;
        if (row->bytes == ((size_t)64 << 20))
            ratio_64 = ratio;
        if (isnan(latency_8) && row->bytes <= 8)
            latency_8 = row->time[0] * 1e6;
        if (bench_rank == 0 && sweep->device) {
            printf(" %11zu %12zu %8s %6s  %10.1f %8.2f %8.2f %6ld\n", row->bytes, row->count,
                   chorus_dtype_name(sweep->dtype), redop_name(sweep->collective),
                   row->time[0] * 1e6, chorus_algbw, chorus_busbw, row->wrong[0]);
        } else if (bench_rank == 0) {
            printf(" %11zu %12zu %8s %6s  %10.1f %8.2f %8.2f %6ld  %10.1f %8.2f %8.2f %6ld  %6.2f\n",
                   row->bytes, row->count, chorus_dtype_name(sweep->dtype),
                   redop_name(sweep->collective), row->time[0] * 1e6,
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
    if (bench_rank == 0 && sweep->device)
        printf("summary: %s np=%d device=cuda latency_8B_us=%.1f wrong=%ld\n", collective, bench_size,
               latency_8, wrong);
    else if (bench_rank == 0)
        printf("summary: %s np=%d min_ratio=%.2f ratio_at_64MiB=%.2f latency_8B_us=%.1f\n",
               collective, bench_size, min_ratio, ratio_64, latency_8);
    /* Wrong results fail the run, whatever the times. */
    return wrong == 0 ? 0 : 1;
}
