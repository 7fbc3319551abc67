/*
 * tune_settings.h — chorus-tune's settings rows (tune_settings.c).
 */
#ifndef CHORUS_TUNE_SETTINGS_H
#define CHORUS_TUNE_SETTINGS_H

#include "measure.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* This process's rank and the job's size in MPI_COMM_WORLD (tune.c sets them). */
extern int tune_rank, tune_size;

/* Measures the staging areas' count and size (where ranks share hosts: `local_ranks` per host,
 * `hosts` of them) at the `sizes` of the sweep from 256 KiB and on a step, and the fusion
 * threshold on bursts of small tensors,
 * each value against the default in `rounds` interleaved rounds, as `sweep` runs each size
 * (its collective aside: allreduces); rank 0 prints the comparisons and writes a `setting` row
 * to `file` (may be NULL) for each setting where a value won. false when a result was wrong.
 * Call with chorus shut down. */
bool tune_settings(const struct measure_sweep *sweep, const size_t *sizes, int size_count,
                   int rounds, int local_ranks, int hosts, FILE *file);

#endif
