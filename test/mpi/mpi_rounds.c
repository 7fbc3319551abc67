/*
 * mpi_rounds.c — negotiation by ready rounds (CHORUS_NEGOTIATION=rounds) under mpirun, through
 * its steady state, where tensors seen before travel as bits: steps of allreduces and broadcasts
 * checked against the reference; a mismatch, a stall and a shutdown met there, reported on every
 * rank and naming the ranks; and the bit path working again after each.
 */
#include "../common/reference.h"
#include "mpi_test.h"

enum { TENSORS = 40 };

static const chorus_dtype dtypes[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_INT32};

static size_t tensor_count(int index)
{
    const size_t counts[] = {0, 1, 2, 3, 5, 7, 13, 31, 101, 1021, 4099, 65537};
    return counts[index % 12];
}

/* One step: every tensor, submitted in an order of this rank's own, then checked. */
static void step(int number)
{
    void *data[TENSORS];
    chorus_handle *handles[TENSORS];
    int order[TENSORS];
    for (int i = 0; i < TENSORS; i++)
        order[i] = i;
    for (int i = TENSORS - 1; i > 0; i--) {
        int other = (int)(test_random(99, (uint64_t)test_rank, (uint64_t)(number * TENSORS + i)) %
                          (uint64_t)(i + 1));
        int kept = order[i];
        order[i] = order[other];
        order[other] = kept;
    }
    for (int k = 0; k < TENSORS; k++) {
        int i = order[k];
        chorus_dtype dtype = dtypes[i % 3];
        size_t count = tensor_count(i);
        char name[32];
        snprintf(name, sizeof name, "grad.%d", i);
        data[i] = malloc(count * chorus_dtype_size(dtype) + 1);
        chorus_tensor tensor = {
            .data = data[i], .dtype = dtype, .ndims = 1, .shape = {(int64_t)count}};
        if (i % 5 == 4) { /* a broadcast from a rank that changes with the tensor */
            reference_fill_bytes(data[i], count * chorus_dtype_size(dtype),
                                 (uint64_t)(number * 1000 + i), test_rank);
            EXPECT_STATUS(chorus_broadcast_async(name, &tensor, i % test_size, &handles[i]),
                          CHORUS_OK);
        } else {
            reference_fill(data[i], count, dtype, CHORUS_SUM, (uint64_t)(number * 1000 + i),
                           test_rank);
            EXPECT_STATUS(chorus_allreduce_async(name, &tensor, NULL, CHORUS_SUM, &handles[i]),
                          CHORUS_OK);
        }
    }
    for (int i = 0; i < TENSORS; i++) {
        EXPECT_STATUS(chorus_wait(handles[i]), CHORUS_OK);
        chorus_handle_free(handles[i]);
        chorus_dtype dtype = dtypes[i % 3];
        size_t count = tensor_count(i);
        uint64_t seed = (uint64_t)(number * 1000 + i);
        char why[256] = "";
        long wrong = i % 5 == 4
                         ? reference_check_bytes(data[i], count * chorus_dtype_size(dtype), seed,
                                                 i % test_size)
                         : reference_check_allreduce(data[i], count, dtype, CHORUS_SUM, test_size,
                                                     NULL, seed, 1, 1, why, sizeof why);
        EXPECT(wrong < 0, "step %d grad.%d: element %ld wrong %s", number, i, wrong, why);
        free(data[i]);
    }
}

/* Allreduces submitted one at a time and waited for (a scalar per step, say): on one host each
 * rides with the round that decides it (rounds.c), reduced from the round's slots; larger ones,
 * and those the small-slots algorithm does not take, run as before. Every op and scale, dtypes
 * of 1 to 8 bytes, counts from 0 to past CHORUS_SMALL_LIMIT (64K, the payload beside a round),
 * in place and out of place, each name three times (the first negotiated in full, the others
 * as bits), against the reference. */
static void lone_allreduces(void)
{
    const chorus_op ops[] = {CHORUS_SUM, CHORUS_AVERAGE, CHORUS_MIN, CHORUS_MAX, CHORUS_PRODUCT};
    const chorus_dtype lone_dtypes[] = {CHORUS_FLOAT32, CHORUS_FLOAT64, CHORUS_INT32,
                                        CHORUS_INT64, CHORUS_FLOAT16, CHORUS_UINT8};
    const size_t counts[] = {0, 1, 2, 7, 8, 9, 13, 1021, 8191, 16384, 16385};
    int number = 0;
    for (size_t o = 0; o < (sizeof ops / sizeof ops[0]); o++)
        for (size_t d = 0; d < (sizeof lone_dtypes / sizeof lone_dtypes[0]); d++)
            for (size_t c = 0; c < (sizeof counts / sizeof counts[0]); c++, number++) {
                chorus_op op = ops[o];
                chorus_dtype dtype = lone_dtypes[d];
                size_t count = counts[c];
                /* Products of many elements leave every range: a few elements for them. */
                if (op == CHORUS_PRODUCT && count > 13)
                    continue;
                bool floating = dtype == CHORUS_FLOAT32 || dtype == CHORUS_FLOAT64;
                bool scaled = floating && op == CHORUS_SUM && number % 2 == 0;
                bool in_place = number % 3 != 0;
                char name[48];
                snprintf(name, sizeof name, "lone.%d", number);
                size_t bytes = count * chorus_dtype_size(dtype);
                unsigned char *input = malloc(bytes + 1);
                unsigned char *output = malloc(bytes + 1);
                for (int repeat = 0; repeat < 3; repeat++) {
                    uint64_t seed = (uint64_t)(number * 10 + repeat);
                    reference_fill(input, count, dtype, op, seed, test_rank);
                    chorus_op_args args = CHORUS_OP_ARGS_INIT;
                    args.name = name;
                    args.input = (chorus_tensor){.data = input, .dtype = dtype, .ndims = 1,
                                                 .shape = {(int64_t)count}};
                    args.output = in_place ? NULL : output;
                    args.op = op;
                    args.prescale_factor = scaled ? 0.5 : 1.0;
                    args.postscale_factor = scaled ? 4.0 : 1.0;
                    chorus_handle *handle = NULL;
                    EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
                    EXPECT_STATUS(chorus_wait(handle), CHORUS_OK);
                    chorus_handle_free(handle);
                    char why[256] = "";
                    long wrong = reference_check_allreduce(
                        in_place ? input : output, count, dtype, op, test_size, NULL, seed,
                        args.prescale_factor, args.postscale_factor, why, sizeof why);
                    EXPECT(wrong < 0, "%s (%s, %zu elements, %s, %s, time %d): element %ld wrong %s",
                           name, chorus_dtype_name(dtype), count, chorus_op_name(op),
                           in_place ? "in place" : "out of place", repeat, wrong, why);
                }
                free(input);
                free(output);
            }
}

/* grad.3 (float32, 3 elements, cached) from every rank, the last with another dtype. */
static void mismatch_in_the_steady_state(void)
{
    float values[3] = {1, 2, 3};
    double other[3] = {1, 2, 3};
    bool odd = test_rank == test_size - 1 && test_size > 1;
    chorus_tensor tensor = {.data = odd ? (void *)other : (void *)values,
                            .dtype = odd ? CHORUS_FLOAT64 : CHORUS_FLOAT32,
                            .ndims = 1,
                            .shape = {3}};
    chorus_handle *handle = NULL;
    EXPECT_STATUS(chorus_allreduce_async("grad.3", &tensor, NULL, CHORUS_SUM, &handle), CHORUS_OK);
    chorus_status status = chorus_wait(handle);
    if (test_size == 1) {
        EXPECT_STATUS(status, CHORUS_OK);
    } else {
        EXPECT_STATUS(status, CHORUS_ERR_MISMATCH);
        char expected[64];
        snprintf(expected, sizeof expected, "rank %d float64", test_size - 1);
        const char *message = chorus_handle_error(handle);
        EXPECT(strstr(message, expected) != NULL && strstr(message, "grad.3") != NULL,
               "message: %s", message);
        EXPECT(test_same_on_all_ranks(message), "the ranks got different messages: %s", message);
    }
    chorus_handle_free(handle);
}

/* grad.7 (float64, 31 elements, cached) from every rank but the last:
 * CHORUS_STALL_SHUTDOWN_SECONDS fails it, naming the last rank. */
static void stall_in_the_steady_state(void)
{
    if (test_size == 1)
        return;
    if (test_rank != test_size - 1) {
        double values[31] = {0};
        chorus_tensor tensor = {.data = values, .dtype = CHORUS_FLOAT64, .ndims = 1, .shape = {31}};
        chorus_handle *handle = NULL;
        EXPECT_STATUS(chorus_allreduce_async("grad.7", &tensor, NULL, CHORUS_SUM, &handle),
                      CHORUS_OK);
        EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_STALLED);
        char expected[64];
        snprintf(expected, sizeof expected, "not by rank %d", test_size - 1);
        EXPECT(strstr(chorus_handle_error(handle), expected) != NULL, "message: %s",
               chorus_handle_error(handle));
        chorus_handle_free(handle);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* Rank 0 sent its verdict on grad.7 to the last rank too, which had not submitted it; had
     * that rank not taken it in yet, it would take it as the verdict on its next grad.7 (step 5):
     * a collective after it, whose answer comes after the verdict, lets every rank take it. */
    float one = 1;
    EXPECT_STATUS(chorus_allreduce("after the stall",
                                   &(chorus_tensor){.data = &one, .dtype = CHORUS_FLOAT32}, NULL,
                                   CHORUS_SUM),
                  CHORUS_OK);
    EXPECT(one == (float)test_size, "after the stall: %g", one);
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 300);
    chorus_init_options options = CHORUS_INIT_OPTIONS_INIT;
    options.parameters = "CHORUS_NEGOTIATION=rounds;CHORUS_STALL_SHUTDOWN_SECONDS=3";
    if (chorus_init(&options) != CHORUS_OK) {
        fprintf(stderr, "rank %d: chorus_init: %s\n", test_rank, chorus_last_error());
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    test_step = "warm-up and steady steps";
    for (int s = 0; s < 4; s++)
        step(s);
    test_step = "lone allreduces, each riding with its round";
    lone_allreduces();
    test_step = "a mismatch in the steady state";
    mismatch_in_the_steady_state();
    step(4);
    test_step = "a stall in the steady state";
    stall_in_the_steady_state();
    step(5);
    test_step = "shutdown with a tensor waiting as a bit";
    float values[13] = {0};
    chorus_tensor tensor = floats(values, 13);
    chorus_handle *handle = NULL;
    if (test_rank == 0 && test_size > 1) /* grad.6 (float32, 13) is cached: it waits as a bit */
        EXPECT_STATUS(chorus_allreduce_async("grad.6", &tensor, NULL, CHORUS_SUM, &handle),
                      CHORUS_OK);
    MPI_Barrier(MPI_COMM_WORLD);
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    if (handle != NULL) {
        EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_SHUTDOWN);
        chorus_handle_free(handle);
    }
    return test_finish("mpi_rounds");
}
