/*
 * autotune.h — chorus-bench --autotune: chorus with CHORUS_AUTOTUNE=on against its defaults, on
 * any kind of training step (step.c's plain one, overlap.c's behind compute).
 */
#ifndef CHORUS_BENCH_AUTOTUNE_H
#define CHORUS_BENCH_AUTOTUNE_H

#include "bench.h"

struct autotune_step {
    double (*run)(void *state);      /* one step through chorus: the slowest rank's seconds */
    void (*restarted)(void *state);  /* after each chorus_init (NULL: nothing to do) */
    void *state;
};

/* Runs the rounds (chorus initialized or not; shut down at the end) and prints the table and a
 * summary line on rank 0. */
void autotune_benchmark(const struct autotune_step *step, int steps, const char *title);

#endif
