/*
 * mpi_stress.c — 200 tensors of mixed dtypes and sizes, submitted by every rank in its own
 * random order from 4 threads, three times over (names are reused once completed). Every
 * result is checked against the reference.
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <pthread.h>

enum { TENSORS = 200, THREADS = 4, ROUNDS = 3 };

struct tensor_case {
    char name[48];
    chorus_dtype dtype;
    chorus_op op;
    size_t count;
    void *data;
    chorus_handle *handle;
};

static struct tensor_case cases[TENSORS];
static int order[TENSORS];
static int current_round;

static void *submitter(void *argument)
{
    int thread = (int)(intptr_t)argument;
    for (int k = thread; k < TENSORS; k += THREADS) {
        struct tensor_case *c = &cases[order[k]];
        chorus_tensor tensor = {.data = c->data, .dtype = c->dtype, .ndims = 1,
                                .shape = {(int64_t)c->count}};
        chorus_status status = chorus_allreduce_async(c->name, &tensor, NULL, c->op, &c->handle);
        EXPECT(status == CHORUS_OK, "%s: %s", c->name, chorus_last_error());
    }
    return NULL;
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 240);
    test_init_chorus();
    const chorus_dtype dtypes[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_INT32, CHORUS_BFLOAT16,
                                   CHORUS_FLOAT16, CHORUS_INT64, CHORUS_UINT8};
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MAX};
    for (current_round = 0; current_round < ROUNDS; current_round++) {
        for (int i = 0; i < TENSORS; i++) {
            struct tensor_case *c = &cases[i];
            snprintf(c->name, sizeof c->name, "grad.%d", i);
            uint64_t shape_random = test_random(7, 0, (uint64_t)i);
            c->dtype = dtypes[shape_random % 7];
            c->op = ops[(shape_random >> 8) % 3];
            c->count = (shape_random >> 16) % 5 == 0 ? (shape_random >> 24) % 300000
                                                      : (shape_random >> 24) % 3000;
            c->data = malloc(c->count * chorus_dtype_size(c->dtype) + 1);
            reference_fill(c->data, c->count, c->dtype, c->op, 1000 + (uint64_t)i, test_rank);
            order[i] = i;
        }
        /* This rank's own order: a Fisher-Yates shuffle seeded by rank and round. */
        for (int i = TENSORS - 1; i > 0; i--) {
            int j = (int)(test_random(99 + (uint64_t)current_round, (uint64_t)test_rank,
                                      (uint64_t)i) % (uint64_t)(i + 1));
            int swap = order[i];
            order[i] = order[j];
            order[j] = swap;
        }
        test_step = "submitting";
        pthread_t threads[THREADS];
        for (int t = 0; t < THREADS; t++)
            pthread_create(&threads[t], NULL, submitter, (void *)(intptr_t)t);
        for (int t = 0; t < THREADS; t++)
            pthread_join(threads[t], NULL);
        test_step = "checking";
        for (int i = 0; i < TENSORS; i++) {
            struct tensor_case *c = &cases[i];
            if (c->handle == NULL)
                continue;
            chorus_status status = chorus_wait(c->handle);
            EXPECT(status == CHORUS_OK, "%s: %s", c->name, chorus_handle_error(c->handle));
            char why[256];
            EXPECT(reference_check_allreduce(c->data, c->count, c->dtype, c->op, test_size, NULL,
                                             1000 + (uint64_t)i, 1, 1, why, sizeof why) < 0,
                   "round %d, %s (%s %s, %zu): %s", current_round, c->name,
                   chorus_dtype_name(c->dtype), chorus_op_name(c->op), c->count, why);
            chorus_handle_free(c->handle);
            c->handle = NULL;
            free(c->data);
        }
    }
    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_stress");
}
