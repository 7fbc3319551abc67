/*
 * workload.h — what chorus-bench's training-step measurements share: the gradient list of a real
 * model, a clock, medians, and restarting chorus with other parameters.
 */
#ifndef CHORUS_BENCH_WORKLOAD_H
#define CHORUS_BENCH_WORKLOAD_H

#include <chorus.h>
#include <stdbool.h>
#include <stddef.h>

struct gradient {
    char name[128];
    size_t count; /* float32 elements */
    float *data;
};

/* The gradients of `workload` (resnet50, bert, or a file of "elements name" lines), in forward
 * order, every element 1.0; aborts the job when there is no such list. Rank 0 prints what it
 * loaded. */
struct gradient *load_gradients(const char *workload, int rank, size_t *count, size_t *total);
void free_gradients(struct gradient *gradients, size_t count);

/* --shared-heap: the measured host buffers and the workloads' gradients come from
 * chorus_mem_alloc, so that allreduces on one host reduce them in place. */
extern bool bench_shared_heap;
/* Zeroed host memory for a measured buffer, from the shared heap (`shared`) or from calloc;
 * aborts the job when there is none. bench_host_free frees either. */
void *bench_host_alloc(size_t bytes, bool shared);
void bench_host_free(void *buffer);

/* One step through chorus: every tensor of `gradients` submitted in reverse order (as backward
 * produces them), allreduced with `op` or, with `collective` CHORUS_BROADCAST, broadcast from
 * rank 0; then all waited for. `handles` has room for `count`; an error aborts the job.
 * Seconds, the slowest rank's. */
double workload_chorus_step(struct gradient *gradients, size_t count, chorus_handle **handles,
                            chorus_collective collective, chorus_op op);

double now(void); /* CLOCK_MONOTONIC seconds, the clock chorus_timeline_mark takes */
int compare_doubles(const void *a, const void *b);
double median(double *values, int count); /* sorts `values` */

/* chorus_shutdown, then chorus_init with `parameters` ("NAME=value;..." or NULL); aborts the
 * job when init fails. */
void restart_chorus(const char *parameters);

#endif
