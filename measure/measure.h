/*
 * measure.h — the measuring that chorus-bench (bench/) and chorus-tune (tools/chorus-tune/)
 * share, as a static library of its own (measure/meson.build): one collective at one size
 * through chorus or plain MPI, timed and then checked (collective.c, with check.c's inputs and
 * counts of wrong elements); a real model's gradients and one training step of them through
 * chorus (workload.c, gradient_list.c); host buffers, a clock and medians. It runs in a program
 * that has called MPI_Init_thread, on the job's MPI_COMM_WORLD, and knows nothing of either
 * program's options: each passes what it measures in its own words.
 */
#ifndef CHORUS_MEASURE_H
#define CHORUS_MEASURE_H

#include <chorus.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* --- One collective at one size (collective.c) --- */

/* What every size of a sweep runs: chorus-bench's -c, -d, -n, -w, --device and --ordered,
 * chorus-tune's candidates. */
struct measure_sweep {
    chorus_collective collective;
    chorus_dtype dtype;
    int iterations; /* timed operations per size; 0: as many as make about 0.4 GB of traffic */
    int warmup;     /* untimed operations first (at least a tenth of the iterations) */
    bool device;    /* buffers on the local rank's GPU, through NCCL (chorus built with CUDA) */
    bool ordered;   /* chorus's operations in call order (CHORUS_OP_ORDERED) */
};

/* What a measurement runs the collective through. */
enum measure_path { MEASURE_CHORUS, MEASURE_MPI };

/* The element count a sweep measures for a size of `bytes`: whole blocks per rank where the
 * collective (or the GPU's reducescatter) moves blocks, and at least one element or block. */
size_t measure_sweep_count(const struct measure_sweep *sweep, size_t bytes);

/* Times `count` elements of sweep's collective through `path` (chorus initialized for
 * MEASURE_CHORUS), then checks one more operation's result; `wrong` gets the wrong elements
 * summed over ranks. Seconds per operation, the slowest rank's. Every rank calls it. */
double measure_sweep_size(const struct measure_sweep *sweep, enum measure_path path,
                          size_t count, long *wrong);

/* A size with an optional K, M or G suffix (powers of 1024): "64K", "1.5M". */
bool measure_parse_size(const char *text, size_t *bytes);

/* --- Checked data (check.c) --- */

/* Rank `rank`'s input for a sum among `nranks`: small whole numbers from (seed, rank, index),
 * whose sums are exact in `dtype`. */
void measure_check_fill(void *buffer, size_t count, chorus_dtype dtype, uint64_t seed, int rank,
                        int nranks);
/* Wrong elements in `result`, which holds elements first .. first + count - 1 of the sum of
 * every rank's measure_check_fill input with `seed`. */
long measure_check_sum(const void *result, size_t first, size_t count, chorus_dtype dtype,
                       int nranks, uint64_t seed);

/* Bytes from (seed, rank, index), and the count of bytes of `buffer` that differ from them. */
void measure_check_fill_bytes(void *buffer, size_t bytes, uint64_t seed, int rank);
long measure_check_bytes(const void *buffer, size_t bytes, uint64_t seed, int rank);

/* --- Workloads (workload.c, gradient_list.c) --- */

struct measure_gradient {
    char name[128];
    size_t count; /* float32 elements */
    float *data;
};

/* Opens the gradient list of `workload` (the team's shared/data: one gradient a line,
 * "ELEMENTS NAME DIMxDIMx..."): a file, or a model name ("resnet50", "bert") looked up in
 * $CHORUS_DATA_DIR, ./shared/data, ../shared/data, and from the program's own directory (a
 * build tree's build/bench/ or build/tools/...) the shared/data beside the source tree. The
 * path found goes to `path`; NULL when there is none. */
FILE *measure_gradient_list_open(const char *workload, char *path, size_t path_size);

/* The gradients of `workload` (as measure_gradient_list_open finds it), in forward order, every
 * element 1.0; aborts the job when there is no such list. Rank 0 prints what it loaded. */
struct measure_gradient *measure_load_gradients(const char *workload, int rank, size_t *count,
                                                size_t *total);
void measure_free_gradients(struct measure_gradient *gradients, size_t count);

/* One step through chorus: every tensor of `gradients` submitted in reverse order (as backward
 * produces them), allreduced with `op` or, with `collective` CHORUS_BROADCAST, broadcast from
 * rank 0; then all waited for. `handles` has room for `count`; an error aborts the job.
 * Seconds, the slowest rank's. */
double measure_chorus_step(struct measure_gradient *gradients, size_t count,
                           chorus_handle **handles, chorus_collective collective, chorus_op op);

/* chorus_shutdown, then chorus_init with `parameters` ("NAME=value;..." or NULL); aborts the
 * job when init fails. */
void measure_restart_chorus(const char *parameters);

/* --- Host buffers, clock, medians (workload.c) --- */

/* chorus-bench --shared-heap: the measured host buffers and the workloads' gradients come from
 * chorus_mem_alloc, so that allreduces on one host reduce them in place. */
extern bool measure_shared_heap;
/* Zeroed host memory for a measured buffer, from the shared heap (`shared`) or from calloc;
 * aborts the job when there is none. measure_host_free frees either. */
void *measure_host_alloc(size_t bytes, bool shared);
void measure_host_free(void *buffer);

/* The program's name for the library's messages: "chorus-bench" unless its main sets another. */
extern const char *measure_program;

/* Starts chorus on a world over UCX instead of on MPI (world.c): chorus_init_world with the
 * ranks' addresses handed round over MPI_COMM_WORLD; the ranks on `hosts` made-up hosts (rank %
 * hosts), or on this machine's where `hosts` is 0. The world is closed as the process ends.
 * Returns as chorus_init_world. */
chorus_status measure_init_world(int hosts);
/* The same for world `number` (chorus_world_open's; each world once), this process taking rank
 * `as_rank` (every rank of MPI_COMM_WORLD a different one): as an elastic job's survivors form
 * their next world after chorus_shutdown. The host a process is on stays the one its rank in
 * MPI_COMM_WORLD gave it. */
chorus_status measure_join_world(int number, int hosts, int as_rank);

double measure_now(void); /* CLOCK_MONOTONIC seconds, the clock chorus_timeline_mark takes */
int measure_compare_doubles(const void *a, const void *b); /* for qsort */
/* Sorts `values`; with an even count, the mean of the middle two. */
double measure_median(double *values, int count);

#endif
