/*
 * mpi_join.c — uneven data: rank r has r + 1 batches, then joins. Until every rank has joined,
 * the remaining ranks' allreduces go on with joined ranks contributing nothing: averages divide
 * by the ranks that contributed, and min/max ignore joined ranks. After the join completes,
 * every rank takes part again. Then barriers: no rank leaves one before the last arrives.
 */
#include "mpi_test.h"

#include <time.h>

/* Rank r arrives 30 ms after rank r-1; every rank must leave after the last one arrived. */
static void barriers(void)
{
    for (int round = 0; round < 3; round++) {
        test_step = "barrier";
        nanosleep(&(struct timespec){.tv_nsec = 30L * 1000 * 1000 * test_rank}, NULL);
        double times[2] = {test_seconds(), 0};
        EXPECT_STATUS(chorus_barrier(), CHORUS_OK);
        times[1] = -test_seconds();
        double extremes[2];
        MPI_Allreduce(times, extremes, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        EXPECT(-extremes[1] >= extremes[0],
               "a rank left barrier %d %.3f ms before the last arrived", round,
               (extremes[0] + extremes[1]) * 1e3);
    }
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    test_init_chorus();
    int batches = test_rank + 1;
    for (int b = 0; b < batches; b++) {
        test_step = "training";
        double values[3] = {test_rank + 1.0, test_rank + 1.0, test_rank + 1.0};
        double minimum = test_rank + 1.0;
        chorus_tensor tensor = {.data = values, .dtype = CHORUS_FLOAT64, .ndims = 1,
                                .shape = {3}};
        chorus_tensor smallest = {.data = &minimum, .dtype = CHORUS_FLOAT64, .ndims = 0};
        char name[32], min_name[32];
        snprintf(name, sizeof name, "grad.%d", b);
        snprintf(min_name, sizeof min_name, "min.%d", b);
        /* Submitted together with grad.b, so the two fuse: a joined rank stands in for both. */
        double bias[2] = {test_rank + 1.0, test_rank + 1.0};
        chorus_tensor bias_tensor = {.data = bias, .dtype = CHORUS_FLOAT64, .ndims = 1,
                                     .shape = {2}};
        char bias_name[32];
        snprintf(bias_name, sizeof bias_name, "bias.%d", b);
        chorus_handle *bias_handle = NULL;
        EXPECT_STATUS(chorus_allreduce_async(bias_name, &bias_tensor, NULL, CHORUS_AVERAGE,
                                             &bias_handle),
                      CHORUS_OK);
        EXPECT_STATUS(chorus_allreduce(name, &tensor, NULL, CHORUS_AVERAGE), CHORUS_OK);
        EXPECT_STATUS(chorus_wait(bias_handle), CHORUS_OK);
        chorus_handle_free(bias_handle);
        EXPECT_STATUS(chorus_allreduce(min_name, &smallest, NULL, CHORUS_MIN), CHORUS_OK);
        /* Ranks b .. size-1 still have batch b. */
        double sum = 0;
        for (int r = b; r < test_size; r++)
            sum += r + 1.0;
        double expected = sum / (test_size - b);
        EXPECT(values[0] == expected && values[2] == expected,
               "batch %d: average %g, expected %g", b, values[0], expected);
        EXPECT(bias[0] == expected && bias[1] == expected, "batch %d: fused average %g, expected %g",
               b, bias[0], expected);
        EXPECT(minimum == b + 1.0, "batch %d: min %g, expected %d", b, minimum, b + 1);
    }
    test_step = "join";
    EXPECT(chorus_last_joined_rank() == -1, "a last joined rank before any join");
    EXPECT_STATUS(chorus_join(), CHORUS_OK);
    /* The rank with the most batches joins last. */
    EXPECT(chorus_last_joined_rank() == test_size - 1, "last joined rank %d, not %d",
           chorus_last_joined_rank(), test_size - 1);
    test_step = "after join";
    float one = 1;
    chorus_tensor tensor = {.data = &one, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {1}};
    EXPECT_STATUS(chorus_allreduce("after.join", &tensor, NULL, CHORUS_SUM), CHORUS_OK);
    EXPECT(one == (float)test_size, "after join: %g", (double)one);
    barriers();
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_join");
}
