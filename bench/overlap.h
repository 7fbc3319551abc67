/*
 * overlap.h — chorus-bench --workload MODEL --overlap: a training step as backward produces it.
 * Each gradient becomes ready after compute time proportional to its size, is submitted at once,
 * and the step waits for all of them at its end; chorus against MPI_Allreduce and
 * MPI_Iallreduce per tensor in the same run, reported as exposed communication (step time minus
 * compute-only time).
 */
#ifndef CHORUS_BENCH_OVERLAP_H
#define CHORUS_BENCH_OVERLAP_H

struct overlap_options {
    const char *workload;
    int steps;              /* timed steps per variant and compute ratio */
    const double *ratios;   /* compute time as multiples of the communication time */
    int ratio_count;
    const char *compare;    /* a second chorus configuration ("NAME=value;..."), or NULL */
    const char *timeline;   /* write one step per ratio to this timeline file, or NULL */
};

/* Runs the measurement and prints its tables on rank 0; returns the number of wrong results
 * (chorus's averages are checked after every step). */
long overlap_benchmark(const struct overlap_options *options, int rank, int size);
/* --overlap --autotune: CHORUS_AUTOTUNE=on against the defaults on this step (autotune.h), per
 * compute ratio; returns the number of wrong averages. */
long overlap_autotune(const struct overlap_options *options, int rank, int size);

#endif
