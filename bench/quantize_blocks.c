/*
 * quantize_blocks.c — what the block size of the INT8/INT4 quantization (lib/compression)
 * trades: the error against the bytes on the wire, and the kernels' speed. Built by
 * bench/quantize-blocks once per block size (the size is a constant of quantize.h); it prints
 * one line per bit width and rounding: block, bits, rounding, wire bytes per value, RMS error over the data's RMS,
 * largest error over the value's block range, and encode and decode throughput in GB/s of
 * float32.
 *
 * The data stands in for gradients: Student-t values (3 degrees of freedom: heavy tails) whose
 * scale changes every 4096 values over four decades, as tensors' and layers' gradients do.
 */
#include "kernel_bench.h"
#include "quantize.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { COUNT = 1 << 22, ROUNDS = 5 };

int main(void)
{
    float *values = malloc(COUNT * sizeof *values), *decoded = malloc(COUNT * sizeof *decoded);
    unsigned char *quantized = malloc(quantize_bytes(COUNT, 8));
    double scale = 1;
    for (size_t i = 0; i < COUNT; i++) {
        if (i % 4096 == 0)
            scale = pow(10, -4 * uniform());
        double chi = 0;
        for (int k = 0; k < 3; k++) {
            double n = normal();
            chi += n * n;
        }
        values[i] = (float)(scale * normal() / sqrt(chi / 3));
    }
    for (int run = 0; run < 4; run++) {
        unsigned bits = run < 2 ? 8 : 4;
        enum quantize_rounding rounding = run % 2 ? QUANTIZE_STOCHASTIC : QUANTIZE_NEAREST;
        struct quantize_scheme scheme = {.bits = bits, .rounding = rounding, .stream = 1};
        double encode = INFINITY, decode = INFINITY;
        for (int round = 0; round < ROUNDS; round++) {
            double started = seconds();
            quantize_encode(quantized, values, COUNT, &scheme, 0);
            double encoded = seconds();
            quantize_decode(decoded, quantized, COUNT, bits);
            encode = fmin(encode, encoded - started);
            decode = fmin(decode, seconds() - encoded);
        }
        double squares = 0, errors = 0, worst = 0;
        for (size_t start = 0; start < COUNT; start += QUANTIZE_BLOCK_VALUES) {
            double low = INFINITY, high = -INFINITY;
            for (size_t i = start; i < start + QUANTIZE_BLOCK_VALUES; i++) {
                low = fmin(low, values[i]);
                high = fmax(high, values[i]);
            }
            for (size_t i = start; i < start + QUANTIZE_BLOCK_VALUES; i++) {
                double error = (double)decoded[i] - values[i];
                squares += (double)values[i] * values[i];
                errors += error * error;
                if (high > low)
                    worst = fmax(worst, fabs(error) / (high - low));
            }
        }
        double gigabytes = COUNT * sizeof(float) / 1e9;
        printf("block %4zu  %u bits  %-10s  %.4f B/value  rms error %.5f  worst %.5f of the "
               "range  encode %.2f GB/s  decode %.2f GB/s\n",
               QUANTIZE_BLOCK_VALUES, bits, rounding ? "stochastic" : "nearest", (double)quantize_bytes(COUNT, bits) / COUNT,
               sqrt(errors / squares), worst, gigabytes / encode, gigabytes / decode);
    }
    free(values);
    free(decoded);
    free(quantized);
    return 0;
}
