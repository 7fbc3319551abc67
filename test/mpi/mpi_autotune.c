/*
 * mpi_autotune.c — a training loop under CHORUS_AUTOTUNE (test/check_autotune.sh sets it and
 * reads what every rank logged): each step submits the same named tensors in backward order,
 * of sizes on both sides of every candidate fusion limit (1 element to 1.2 MB) and of three
 * dtypes, and from 3 ranks also an allreduce in a process set of all ranks but the last, then
 * waits for them all. Every result of every step is checked against the reference computed from
 * every rank's input (fresh inputs each step), so a trial whose settings differed between ranks,
 * fusing differently, fails here.
 *
 *   mpi_autotune STEPS          the loop (names repeat every step)
 *   mpi_autotune --fresh-names  tensors whose names never repeat: no steps to tune on
 */
#include "../common/reference.h"
#include "mpi_test.h"

#define TENSORS 10

static const int64_t counts[TENSORS] = {1, 7, 3000, 4099, 10007, 20011, 65537, 70001,
                                        150001, 300007};
static const chorus_dtype dtypes[3] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_INT32};

static void *buffers[TENSORS + 1];
static chorus_handle *handles[TENSORS + 1];

static void run_step(int step, int set, int set_size, bool fresh_names)
{
    char name[64];
    for (int t = TENSORS; t-- > 0;) {
        chorus_dtype dtype = dtypes[t % 3];
        reference_fill(buffers[t], (size_t)counts[t], dtype, CHORUS_SUM,
                       (uint64_t)(step * 100 + t), test_rank);
        if (fresh_names)
            snprintf(name, sizeof name, "step%d.grad%d", step, t);
        else
            snprintf(name, sizeof name, "grad%d", t);
        chorus_tensor tensor = {.data = buffers[t], .dtype = dtype, .ndims = 1,
                                .shape = {counts[t]}};
        EXPECT_STATUS(chorus_allreduce_async(name, &tensor, NULL, CHORUS_SUM, &handles[t]),
                      CHORUS_OK);
    }
    bool in_set = set > 0 && test_rank < set_size;
    if (in_set) {
        reference_fill(buffers[TENSORS], 5003, CHORUS_FLOAT32, CHORUS_SUM,
                       (uint64_t)(step * 100 + 99), test_rank);
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        args.name = "set.grad";
        args.input = floats(buffers[TENSORS], 5003);
        args.process_set = set;
        EXPECT_STATUS(chorus_submit(&args, &handles[TENSORS]), CHORUS_OK);
    }
    char why[256];
    for (int t = 0; t < TENSORS; t++) {
        EXPECT_STATUS(chorus_wait(handles[t]), CHORUS_OK);
        chorus_handle_free(handles[t]);
        long wrong = reference_check_allreduce(buffers[t], (size_t)counts[t], dtypes[t % 3],
                                               CHORUS_SUM, test_size, NULL,
                                               (uint64_t)(step * 100 + t), 1.0, 1.0, why,
                                               sizeof why);
        EXPECT(wrong < 0, "step %d, tensor %d (%lld elements): %s", step, t,
               (long long)counts[t], why);
    }
    if (in_set) {
        EXPECT_STATUS(chorus_wait(handles[TENSORS]), CHORUS_OK);
        chorus_handle_free(handles[TENSORS]);
        long wrong = reference_check_allreduce(buffers[TENSORS], 5003, CHORUS_FLOAT32,
                                               CHORUS_SUM, set_size, NULL,
                                               (uint64_t)(step * 100 + 99), 1.0, 1.0, why,
                                               sizeof why);
        EXPECT(wrong < 0, "step %d, the process set's tensor: %s", step, why);
    }
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 240);
    bool fresh_names = argc > 1 && strcmp(argv[1], "--fresh-names") == 0;
    int steps = fresh_names ? 2100 : (argc > 1 ? atoi(argv[1]) : 60);
    test_init_chorus();
    for (int t = 0; t <= TENSORS; t++)
        buffers[t] = malloc((size_t)(t < TENSORS ? counts[t] : 5003) * sizeof(double));
    int set = 0, set_size = test_size - 1;
    if (test_size >= 3) {
        int ranks[16];
        for (int r = 0; r < set_size; r++)
            ranks[r] = r;
        EXPECT_STATUS(chorus_process_set_add(ranks, set_size, &set), CHORUS_OK);
    }
    test_step = "training";
    for (int step = 0; step < steps; step++)
        run_step(step, set, set_size, fresh_names);
    test_step = "shutdown";
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    for (int t = 0; t <= TENSORS; t++)
        free(buffers[t]);
    return test_finish(fresh_names ? "autotune (fresh names)" : "autotune");
}
