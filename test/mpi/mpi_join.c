/*
 * mpi_join.c — uneven data: rank r has r + 1 batches, then joins. Until every rank has joined,
 * the remaining ranks' allreduces go on with joined ranks contributing nothing: averages divide
 * by the ranks that contributed, and min/max ignore joined ranks. After the join completes,
 * every rank takes part again.
 */
#include "mpi_test.h"

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
    EXPECT_STATUS(chorus_join(), CHORUS_OK);
    test_step = "after join";
    float one = 1;
    chorus_tensor tensor = {.data = &one, .dtype = CHORUS_FLOAT32, .ndims = 1, .shape = {1}};
    EXPECT_STATUS(chorus_allreduce("after.join", &tensor, NULL, CHORUS_SUM), CHORUS_OK);
    EXPECT(one == (float)test_size, "after join: %g", (double)one);
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_join");
}
