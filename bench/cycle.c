/*
 * cycle.c — chorus-bench --cycle N: the cost of a training step of N tiny tensors, submitted at
 * once and waited for. They fuse into one small collective, so the step's time is mostly
 * negotiation.
 */
#include "bench.h"

#include "measure.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

void cycle_benchmark(int tensors, chorus_collective collective)
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
        double start = measure_now();
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
                fprintf(stderr, "rank %d: %s\n", bench_rank, chorus_last_error());
                MPI_Abort(MPI_COMM_WORLD, 1);
            }
        }
        for (int t = 0; t < tensors; t++) {
            chorus_wait(handles[t]);
            chorus_handle_free(handles[t]);
        }
        double elapsed = measure_now() - start, slowest = 0;
        MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (step >= WARMUP)
            times[step - WARMUP] = slowest;
    }
    qsort(times, STEPS, sizeof *times, measure_compare_doubles);
    if (bench_rank == 0)
        printf("cycle: np=%d tensors=%d%s median_step_us=%.1f p10_us=%.1f p90_us=%.1f\n", bench_size,
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
