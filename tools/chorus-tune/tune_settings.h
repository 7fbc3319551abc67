/*
 * tune_settings.h — chorus-tune's settings rows (tune_settings.c).
 */
#ifndef CHORUS_BENCH_TUNE_SETTINGS_H
#define CHORUS_BENCH_TUNE_SETTINGS_H

#include "bench.h"

#include <stdio.h>

/* Measures the staging areas' count and size (where ranks share hosts: `local_ranks` per host,
 * `hosts` of them) at the `sizes` of the sweep from 256 KiB and on a step, and the fusion
 * threshold on bursts of small tensors,
 * each value against the default in `rounds` interleaved rounds, with o's iterations; rank 0
 * prints the comparisons and writes a `setting` row to `file` (may be NULL) for each setting
 * where a value won. false when a result was wrong. Call with chorus shut down. */
bool tune_settings(const struct options *o, const size_t *sizes, int size_count, int rounds,
                   int local_ranks, int hosts, FILE *file);

#endif
