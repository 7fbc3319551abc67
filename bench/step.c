/*
 * step.c — chorus-bench --workload MODEL: a training step of a real model's gradients
 * (measure.h loads them), every tensor submitted in reverse order as backward produces them,
 * against MPI per tensor and MPI on one packed buffer; with -c broadcast every tensor is
 * broadcast from rank 0 instead, as broadcast_parameters does.
 */
#include "bench.h"

#include "autotune.h"
#include "measure.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a workload step does with every tensor: allreduce it (a training step's gradients) or
 * broadcast it from rank 0 (broadcast_parameters at start-up or after restoring a checkpoint). */
static chorus_collective workload_collective = CHORUS_ALLREDUCE;

/* One step through chorus, as this workload's collective. */
static double chorus_step(struct measure_gradient *gradients, size_t count, chorus_handle **handles)
{
    return measure_chorus_step(gradients, count, handles, workload_collective, CHORUS_AVERAGE);
}

static double mpi_per_tensor_step(struct measure_gradient *gradients, size_t count)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = measure_now();
    for (size_t i = count; i-- > 0;) {
        if (workload_collective == CHORUS_BROADCAST)
            MPI_Bcast(gradients[i].data, (int)gradients[i].count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        else
            MPI_Allreduce(MPI_IN_PLACE, gradients[i].data, (int)gradients[i].count, MPI_FLOAT,
                          MPI_SUM, MPI_COMM_WORLD);
    }
    double elapsed = measure_now() - start, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static double mpi_fused_step(float *packed, size_t total)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = measure_now();
    if (workload_collective == CHORUS_BROADCAST)
        MPI_Bcast(packed, (int)total, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else
        MPI_Allreduce(MPI_IN_PLACE, packed, (int)total, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double elapsed = measure_now() - start, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

/* Median step time of `run` (0: chorus, 1: MPI per tensor, 2: MPI fused) in milliseconds. */
static double time_steps(int run, int steps, struct measure_gradient *gradients, size_t count,
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
    double result = measure_median(times, steps) * 1e3;
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

void workload_benchmark(const char *workload, int steps, chorus_collective collective,
                        const char *timeline)
{
    workload_collective = collective;
    size_t count = 0, total = 0;
    struct measure_gradient *gradients =
        measure_load_gradients(workload, bench_rank, &count, &total);
    chorus_handle **handles = calloc(count, sizeof *handles);
    float *packed = malloc(total * sizeof(float));
    memset(packed, 0, total * sizeof(float));
    double bandwidth = copy_bandwidth();
    double round_trip = cache_line_round_trip();
    double fused = time_steps(0, steps, gradients, count, packed, total, handles);
    if (timeline != NULL) {
        /* Rank 0's view of the default configuration's steps, for bench/timeline-phases. */
        if (chorus_start_timeline(timeline) != CHORUS_OK) {
            fprintf(stderr, "chorus-bench: %s\n", chorus_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int s = 0; s < steps; s++)
            chorus_step(gradients, count, handles);
        chorus_stop_timeline();
    }
    measure_restart_chorus("CHORUS_FUSION_THRESHOLD=0");
    double unfused = time_steps(0, steps, gradients, count, packed, total, handles);
    /* The baselines run without chorus's background thread polling MPI beside them. */
    chorus_shutdown();
    double per_tensor = time_steps(1, steps, gradients, count, packed, total, handles);
    double ideal = time_steps(2, steps, gradients, count, packed, total, handles);
    /* The floor: an allreduce must at least read every gradient and write it back. */
    double floor_ms = (double)total * 4 / (bandwidth * 1e9) * 1e3;
    if (bench_rank == 0) {
        printf("# %d ranks, median of %d steps after 3 warm-up steps; memory copy bandwidth "
               "%.2f GB/s; cache-line round trip between local ranks 0 and 1 %.0f ns\n",
               bench_size, steps, bandwidth, round_trip);
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
               workload_collective == CHORUS_BROADCAST ? " broadcast" : "", bench_size, fused,
               per_tensor, ideal);
    }
    measure_free_gradients(gradients, count);
    free(handles);
    free(packed);
}

struct plain_step {
    struct measure_gradient *gradients;
    size_t count;
    chorus_handle **handles;
};

static double run_plain_step(void *state)
{
    struct plain_step *step = state;
    return chorus_step(step->gradients, step->count, step->handles);
}

void workload_autotune(const char *workload, int steps)
{
    size_t count = 0, total = 0;
    struct plain_step plain = {
        .gradients = measure_load_gradients(workload, bench_rank, &count, &total)};
    plain.count = count;
    plain.handles = calloc(count, sizeof *plain.handles);
    struct autotune_step step = {.run = run_plain_step, .state = &plain};
    char title[160];
    snprintf(title, sizeof title, "workload=%s", workload);
    autotune_benchmark(&step, steps, title);
    measure_free_gradients(plain.gradients, count);
    free(plain.handles);
}
