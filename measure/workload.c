/*
 * workload.c — a real model's gradients and one training step of them through chorus, the
 * host buffers the measurements use, a clock and medians (measure.h).
 */
#include "measure.h"

#include <chorus.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

bool measure_shared_heap;

const char *measure_program = "chorus-bench";

void *measure_host_alloc(size_t bytes, bool shared)
{
    void *buffer = NULL;
    if (shared) {
        if (chorus_mem_alloc(bytes, &buffer) != CHORUS_OK) {
            fprintf(stderr, "%s: %s\n", measure_program, chorus_last_error());
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        return buffer;
    }
    buffer = calloc(1, bytes ? bytes : 1);
    if (buffer == NULL)
        MPI_Abort(MPI_COMM_WORLD, 2);
    return buffer;
}

void measure_host_free(void *buffer)
{
    if (chorus_mem_free(buffer) != CHORUS_OK) /* not from the shared heap */
        free(buffer);
}

double measure_chorus_step(struct measure_gradient *gradients, size_t count,
                           chorus_handle **handles, chorus_collective collective, chorus_op op)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double start = measure_now();
    for (size_t i = count; i-- > 0;) {
        chorus_tensor tensor = {.data = gradients[i].data, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                .shape = {(int64_t)gradients[i].count}};
        chorus_status submitted =
            collective == CHORUS_BROADCAST
                ? chorus_broadcast_async(gradients[i].name, &tensor, 0, &handles[i])
                : chorus_allreduce_async(gradients[i].name, &tensor, NULL, op, &handles[i]);
        if (submitted != CHORUS_OK) {
            fprintf(stderr, "rank %d: %s\n", chorus_rank(), chorus_last_error());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
    }
    for (size_t i = 0; i < count; i++) {
        if (chorus_wait(handles[i]) != CHORUS_OK) {
            fprintf(stderr, "rank %d: %s\n", chorus_rank(), chorus_handle_error(handles[i]));
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        chorus_handle_free(handles[i]);
    }
    double elapsed = measure_now() - start, slowest = 0;
    MPI_Allreduce(&elapsed, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

double measure_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int measure_compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double measure_median(double *values, int count)
{
    qsort(values, (size_t)count, sizeof *values, measure_compare_doubles);
    return count % 2 ? values[count / 2] : (values[count / 2 - 1] + values[count / 2]) / 2;
}

void measure_restart_chorus(const char *parameters)
{
    chorus_shutdown();
    chorus_init_options options = CHORUS_INIT_OPTIONS_INIT;
    options.parameters = parameters;
    if (chorus_init(&options) != CHORUS_OK) {
        fprintf(stderr, "chorus_init: %s\n", chorus_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

struct measure_gradient *measure_load_gradients(const char *workload, int rank, size_t *count,
                                                size_t *total)
{
    char path[1024];
    FILE *file = measure_gradient_list_open(workload, path, sizeof path);
    if (file == NULL) {
        if (rank == 0)
            fprintf(stderr, "%s: cannot find the gradient list of \"%s\"\n", measure_program,
                    workload);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t capacity = 256;
    struct measure_gradient *gradients = calloc(capacity, sizeof *gradients);
    char line[512];
    *count = *total = 0;
    while (fgets(line, sizeof line, file) != NULL) {
        unsigned long long elements = 0;
        char name[128];
        if (line[0] == '#' || sscanf(line, "%llu %127s", &elements, name) != 2)
            continue;
        if (*count == capacity)
            gradients = realloc(gradients, (capacity *= 2) * sizeof *gradients);
        struct measure_gradient *g = &gradients[(*count)++];
        snprintf(g->name, sizeof g->name, "%s", name);
        g->count = (size_t)elements;
        g->data = measure_host_alloc(g->count * sizeof(float) + 4, measure_shared_heap);
        for (size_t i = 0; i < g->count; i++)
            g->data[i] = 1.0f;
        *total += g->count;
    }
    fclose(file);
    if (rank == 0)
        printf("# workload %s: %zu tensors, %zu float32 elements (%.1f MB), from %s\n", workload,
               *count, *total, (double)*total * 4 / 1e6, path);
    return gradients;
}

void measure_free_gradients(struct measure_gradient *gradients, size_t count)
{
    for (size_t i = 0; i < count; i++)
        measure_host_free(gradients[i].data);
    free(gradients);
}
