/*
 * bench.h — what the modes of chorus-bench share: the parsed options, this process's rank and
 * the job's size, and the helpers every mode uses. Each mode is a file: sweep.c (the
 * nccl-tests-style sweep against plain MPI), cycle.c (negotiation cost), step.c (a training
 * step of a real model's gradients), overlap.c (gradients behind compute), link.c (what the
 * network between hosts delivers) and latency.c (small collectives on each path against MPI);
 * options.c parses the command line for all of them. What they measure with (one size of a
 * sweep, checked data, workloads, the clock) is the measuring library chorus-tune uses too
 * (measure/measure.h).
 */
#ifndef CHORUS_BENCH_H
#define CHORUS_BENCH_H

#include "measure.h"

#include <chorus.h>
#include <stdbool.h>
#include <stddef.h>

struct options {
    struct measure_sweep sweep; /* -c, -d, -n (0: chosen per size), -w, --device, --ordered */
    size_t min_bytes, max_bytes;
    double factor;
    const char *csv;
    int cycle_tensors; /* --cycle N: time steps of N small allreduces instead of sizes */
    const char *workload; /* --workload resnet50|bert|FILE: a training step's gradients */
    int steps;
    bool link;    /* --link: what the network between the first two hosts delivers to MPI */
    bool overlap; /* --overlap: the workload's gradients trickle in behind compute */
    bool latency; /* --latency: small allreduces and a barrier on each path, against MPI */
    int rounds;   /* --rounds N: interleaved rounds of --latency (0: 5) */
    bool max_bytes_given; /* -e was given */
    double ratios[8];
    int ratio_count;
    const char *compare;       /* --compare PARAMS: a second chorus configuration */
    const char *step_timeline; /* --step-timeline FILE */
    bool autotune; /* --autotune: with --workload, CHORUS_AUTOTUNE=on against the defaults */
    bool world;    /* --world: the sweep's chorus on a world over UCX (measure_init_world) */
};

/* This process's rank and the job's size in MPI_COMM_WORLD. */
extern int bench_rank, bench_size;

#define ARRAY_SIZE(array) (sizeof(array) / sizeof((array)[0]))

/* Parses the command line into `o` (defaults already set). Returns -1 to go on, else the exit
 * status (0 for --help, 2 for a mistake, which it names on rank 0). */
int parse_options(int argc, char **argv, struct options *o);

/* machine.c: a STREAM-like copy's bandwidth in GB/s, and the round trip of a cache line
 * between the first two ranks of rank 0's host in ns (0 when rank 0 is alone there). */
double copy_bandwidth(void);
double cache_line_round_trip(void);

/* The modes. Each returns the process's exit status (non-zero when a result was wrong). */
int sweep_benchmark(const struct options *o);
void cycle_benchmark(int tensors, chorus_collective collective);
/* With `timeline` (or NULL), `steps` more steps of the default configuration go to it. */
void workload_benchmark(const char *workload, int steps, chorus_collective collective,
                        const char *timeline);
/* step.c: --workload MODEL --autotune, on the plain step. */
void workload_autotune(const char *workload, int steps);
void link_benchmark(void);
/* latency.c: --latency (it initializes and shuts chorus down itself, round by round). */
int latency_benchmark(const struct options *o);

#endif
