/*
 * mpi_compression.c — float32 allreduces sent as fp16 and bf16 (per call, and by the
 * CHORUS_COMPRESSION default), fused and alone, against a double-precision reference, within
 * the precision chorus.h states: (ranks + 1) * 2^-11 (fp16) or 2^-8 (bf16) of the sum of
 * magnitudes. Also: ranks that disagree on the compression get CHORUS_ERR_MISMATCH, and other
 * dtypes are never compressed (exact results).
 */
#include "../common/reference.h"
#include "mpi_test.h"

#include <math.h>

static void check_compressed(chorus_compression compression, size_t count, chorus_op op,
                             const char *name)
{
    float *data = malloc(count * sizeof *data + 4);
    for (size_t i = 0; i < count; i++) /* values with more bits than 16-bit formats keep */
        data[i] = (float)((double)(test_random(3, (uint64_t)test_rank, i) % 2000001) / 1e6 - 1.0);
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = name;
    args.input = (chorus_tensor){.data = data, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                 .shape = {(int64_t)count}};
    args.op = op;
    args.compression = compression;
    expect_completes(&args);
    /* CHORUS_COMPRESSION=bf16 is this test's default. */
    bool bf16 = compression == CHORUS_COMPRESSION_BF16 || compression == CHORUS_COMPRESSION_DEFAULT;
    double bits = bf16 ? 8 : 11;
    double subnormal = bf16 ? 0 : (test_size + 1) * 0x1p-25;
    long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        double sum = 0, magnitude = 0;
        for (int r = 0; r < test_size; r++) {
            double value = (double)(test_random(3, (uint64_t)r, i) % 2000001) / 1e6 - 1.0;
            sum += value;
            magnitude += fabs(value);
        }
        double expected = op == CHORUS_AVERAGE ? sum / test_size : sum;
        double bound = ((test_size + 1) * ldexp(1.0, -(int)bits) * magnitude + subnormal) /
                       (op == CHORUS_AVERAGE ? test_size : 1);
        if (fabs(data[i] - expected) > bound) {
            if (wrong++ == 0)
                EXPECT(0, "%s: element %zu: %g, expected %g within %g", name, i, (double)data[i],
                       expected, bound);
        }
    }
    EXPECT(wrong == 0, "%s: %ld elements outside the stated precision", name, wrong);
    free(data);
}

int main(int argc, char **argv)
{
    test_start(&argc, &argv, 120);
    setenv("CHORUS_COMPRESSION", "bf16", 1);
    test_init_chorus();
    test_step = "compressed allreduce";
    check_compressed(CHORUS_COMPRESSION_FP16, 100003, CHORUS_SUM, "fp16.large");
    check_compressed(CHORUS_COMPRESSION_BF16, 100003, CHORUS_AVERAGE, "bf16.large");
    check_compressed(CHORUS_COMPRESSION_DEFAULT, 1021, CHORUS_SUM, "default.bf16");
    check_compressed(CHORUS_COMPRESSION_FP16, 7, CHORUS_AVERAGE, "fp16.small");

    test_step = "fused compressed allreduces";
    enum { MEMBERS = 6 };
    float values[MEMBERS][33];
    chorus_handle *handles[MEMBERS];
    for (int m = 0; m < MEMBERS; m++) {
        for (int i = 0; i < 33; i++)
            values[m][i] = 0.5f * (float)(test_rank + 1) + (float)i;
        chorus_op_args args = CHORUS_OP_ARGS_INIT;
        char name[32];
        snprintf(name, sizeof name, "fused.%d", m);
        args.name = name;
        args.input = (chorus_tensor){.data = values[m], .dtype = CHORUS_FLOAT32, .ndims = 1,
                                     .shape = {33}};
        args.compression = CHORUS_COMPRESSION_FP16;
        EXPECT_STATUS(chorus_submit(&args, &handles[m]), CHORUS_OK);
    }
    for (int m = 0; m < MEMBERS; m++) {
        EXPECT_STATUS(chorus_wait(handles[m]), CHORUS_OK);
        chorus_handle_free(handles[m]);
        for (int i = 0; i < 33; i++) {
            double expected = 0.25 * test_size * (test_size + 1) + (double)i * test_size;
            EXPECT(fabs(values[m][i] - expected) <= (test_size + 1) * expected * 0x1p-11,
                   "fused.%d[%d] = %g, expected %g", m, i, (double)values[m][i], expected);
        }
    }

    test_step = "other dtypes are exact";
    double exact[5] = {1e10 + 1, 2, 3, 4, 5};
    chorus_op_args args = CHORUS_OP_ARGS_INIT;
    args.name = "double.not.compressed";
    args.input = (chorus_tensor){.data = exact, .dtype = CHORUS_FLOAT64, .ndims = 1, .shape = {5}};
    args.compression = CHORUS_COMPRESSION_BF16;
    expect_completes(&args);
    EXPECT(exact[0] == (1e10 + 1) * test_size, "float64 was compressed: %.17g", exact[0]);

    if (test_size > 1) {
        test_step = "compression mismatch";
        float value = 1;
        args.name = "disagree";
        args.input = (chorus_tensor){.data = &value, .dtype = CHORUS_FLOAT32, .ndims = 1,
                                     .shape = {1}};
        args.compression = test_rank == 0 ? CHORUS_COMPRESSION_NONE : CHORUS_COMPRESSION_FP16;
        chorus_handle *handle = NULL;
        EXPECT_STATUS(chorus_submit(&args, &handle), CHORUS_OK);
        EXPECT_STATUS(chorus_wait(handle), CHORUS_ERR_MISMATCH);
        EXPECT(strstr(chorus_handle_error(handle), "compression mismatch") != NULL, "message: %s",
               chorus_handle_error(handle));
        chorus_handle_free(handle);
    }
    EXPECT_STATUS(chorus_shutdown(), CHORUS_OK);
    return test_finish("mpi_compression");
}
