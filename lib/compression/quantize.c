/*
 * quantize.c — see quantize.h. The block's code choice is computed in double, so that the
 * only float32 roundings are the header's (the scale rounded up, so that the codes span the
 * block) and the decoded value's.
 */
#include "quantize.h"

#include <float.h>
#include <math.h>
#include <string.h>

struct block_header {
    float offset;
    float scale;
};

static size_t block_count(size_t count)
{
    return (count + QUANTIZE_BLOCK_VALUES - 1) / QUANTIZE_BLOCK_VALUES;
}

size_t quantize_bytes(size_t count, unsigned bits)
{
    size_t code_bytes = bits == 4 ? (count + 1) / 2 : count;
    return block_count(count) * sizeof(struct block_header) + code_bytes;
}

/* The position-th output of splitmix64 seeded with `state` (Steele, Lea and Flood 2014). */
static uint64_t quantize_splitmix(uint64_t state, uint64_t position)
{
    uint64_t z = state + (position + 1) * UINT64_C(0x9E3779B97F4A7C15);
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

uint64_t quantize_stream(uint64_t seed, uint64_t a, uint64_t b)
{
    return quantize_splitmix(quantize_splitmix(seed, a), b);
}

static unsigned char *quantize_codes(void *buffer, size_t count)
{
    return (unsigned char *)buffer + block_count(count) * sizeof(struct block_header);
}

/* The block's header: a nan offset and scale when it holds a nan or an infinity. */
static struct block_header quantize_header(const float *values, size_t count, unsigned levels)
{
    float low = values[0], high = values[0], probe = 0.0f;
    for (size_t i = 0; i < count; i++) {
        float x = values[i];
        low = x < low ? x : low;
        high = x > high ? x : high;
        probe += x * 0.0f; /* nan once any value is nan or infinite */
    }
    if (probe != 0.0f || !isfinite(low) || !isfinite(high))
        return (struct block_header){.offset = NAN, .scale = NAN};
    double exact = ((double)high - (double)low) / levels;
    float scale = (float)exact;
    if ((double)scale < exact) /* rounded down: the top code would fall short of the maximum */
        scale = nextafterf(scale, INFINITY);
    return (struct block_header){.offset = low, .scale = scale};
}

/* The codes of one block, nearest or stochastic, before packing. */
static void quantize_block_codes(unsigned char *codes, const float *values, size_t count,
                                 struct block_header header, unsigned levels,
                                 const struct quantize_scheme *scheme, uint64_t first_position)
{
    if (!(header.scale > 0.0f)) { /* equal values (scale 0) or a non-finite block (nan) */
        memset(codes, 0, count);
        return;
    }
    double inverse = 1.0 / header.scale, offset = header.offset;
    if (scheme->rounding == QUANTIZE_NEAREST) {
        for (size_t i = 0; i < count; i++) {
            double code = ((double)values[i] - offset) * inverse + 0.5;
            codes[i] = (unsigned char)(code < levels ? code : levels);
        }
        return;
    }
    for (size_t i = 0; i < count; i++) {
        double exact = ((double)values[i] - offset) * inverse;
        double below = floor(exact);
        double uniform =
            (double)(quantize_splitmix(scheme->stream, first_position + i) >> 11) * 0x1p-53;
        double code = below + (uniform < exact - below ? 1.0 : 0.0);
        codes[i] = (unsigned char)(code < levels ? code : levels);
    }
}

/* Block `start / QUANTIZE_BLOCK_VALUES` of `out` (count values in all) from block_values
 * (`length` of them): its header and packed codes. Leaves the codes, unpacked, in `codes`, and
 * returns the header. */
static struct block_header quantize_encode_block(void *out, size_t count, size_t start,
                                                 const float *block_values, size_t length,
                                                 const struct quantize_scheme *scheme,
                                                 uint64_t first_position, unsigned char *codes)
{
    unsigned levels = (1u << scheme->bits) - 1;
    struct block_header *headers = out;
    unsigned char *packed = quantize_codes(out, count);
    struct block_header header = quantize_header(block_values, length, levels);
    memcpy(&headers[start / QUANTIZE_BLOCK_VALUES], &header, sizeof header);
    quantize_block_codes(codes, block_values, length, header, levels, scheme, first_position);
    if (scheme->bits == 8) {
        memcpy(packed + start, codes, length);
        return header;
    }
    /* Blocks hold an even number of values, so a block starts on a byte. */
    unsigned char *pairs = packed + start / 2;
    for (size_t i = 0; i + 1 < length; i += 2)
        pairs[i / 2] = (unsigned char)(codes[i] | codes[i + 1] << 4);
    if (length % 2 != 0)
        pairs[length / 2] = codes[length - 1];
    return header;
}

static size_t quantize_block_length(size_t count, size_t start)
{
    return count - start < QUANTIZE_BLOCK_VALUES ? count - start : QUANTIZE_BLOCK_VALUES;
}

void quantize_encode(void *restrict out, const float *restrict values, size_t count,
                     const struct quantize_scheme *scheme, uint64_t first_position)
{
    unsigned char codes[QUANTIZE_BLOCK_VALUES];
    for (size_t start = 0; start < count; start += QUANTIZE_BLOCK_VALUES)
        quantize_encode_block(out, count, start, values + start,
                              quantize_block_length(count, start), scheme,
                              first_position + start, codes);
}

void quantize_block_header(const void *in, size_t block, float *offset, float *scale)
{
    struct block_header header;
    memcpy(&header, (const struct block_header *)in + block, sizeof header);
    *offset = header.offset;
    *scale = header.scale;
}

static unsigned quantize_code_at(const unsigned char *codes, size_t i, unsigned bits)
{
    return bits == 8 ? codes[i] : (codes[i / 2] >> (4 * (i % 2))) & 0xFu;
}

/* One decoded value: every rank decodes through this one expression, for the same bits. */
static float quantize_decoded(float offset, float scale, unsigned code)
{
    return offset + (float)code * scale;
}

/* Block `block` of `in` (count values in all), decoded into block_values. */
static void quantize_decode_block(float *block_values, const void *in, size_t count,
                                  size_t block, unsigned bits)
{
    const unsigned char *codes = quantize_codes((void *)in, count);
    size_t start = block * QUANTIZE_BLOCK_VALUES;
    size_t end = count - start < QUANTIZE_BLOCK_VALUES ? count : start + QUANTIZE_BLOCK_VALUES;
    float offset, scale;
    quantize_block_header(in, block, &offset, &scale);
    for (size_t i = start; i < end; i++)
        block_values[i - start] = quantize_decoded(offset, scale, quantize_code_at(codes, i, bits));
}

void quantize_decode(float *restrict values, const void *restrict in, size_t count,
                     unsigned bits)
{
    for (size_t block = 0; block < block_count(count); block++)
        quantize_decode_block(values + block * QUANTIZE_BLOCK_VALUES, in, count, block, bits);
}

/* compensated[i] = values[i] + residual[i]. Every block but a last short one takes the loop of
 * a constant trip count, which the compiler vectorizes at -O2 (as it does not a variable one). */
static void quantize_compensate(float *restrict compensated, const float *restrict values,
                                const float *restrict residual, size_t length)
{
    if (length == QUANTIZE_BLOCK_VALUES)
        for (size_t i = 0; i < QUANTIZE_BLOCK_VALUES; i++)
            compensated[i] = values[i] + residual[i];
    else
        for (size_t i = 0; i < length; i++)
            compensated[i] = values[i] + residual[i];
}

/* The residual after quantizing `compensated` to `decoded`: what that dropped where finite, else
 * (a block holding a nan or an infinity decodes to nan throughout) the residual as it was. */
static float quantize_dropped(float compensated, float decoded, float residual)
{
    float dropped = compensated - decoded;
    return fabsf(dropped) <= FLT_MAX ? dropped : residual;
}

/* residual[i] = quantize_dropped of block `header`'s codes, vectorized as quantize_compensate.
 * The decoded value is the one every decoder computes from the block's bytes. */
static void quantize_keep_dropped(float *restrict residual, const float *restrict compensated,
                                  const unsigned char *restrict codes, struct block_header header,
                                  size_t length)
{
    if (length == QUANTIZE_BLOCK_VALUES)
        for (size_t i = 0; i < QUANTIZE_BLOCK_VALUES; i++)
            residual[i] = quantize_dropped(
                compensated[i], quantize_decoded(header.offset, header.scale, codes[i]),
                residual[i]);
    else
        for (size_t i = 0; i < length; i++)
            residual[i] = quantize_dropped(
                compensated[i], quantize_decoded(header.offset, header.scale, codes[i]),
                residual[i]);
}

void quantize_encode_compensated(void *restrict out, const float *restrict values,
                                 float *restrict residual, size_t count,
                                 const struct quantize_scheme *scheme, uint64_t first_position)
{
    unsigned char codes[QUANTIZE_BLOCK_VALUES];
    float compensated[QUANTIZE_BLOCK_VALUES];
    for (size_t start = 0; start < count; start += QUANTIZE_BLOCK_VALUES) {
        size_t length = quantize_block_length(count, start);
        quantize_compensate(compensated, values + start, residual + start, length);
        struct block_header header = quantize_encode_block(
            out, count, start, compensated, length, scheme, first_position + start, codes);
        quantize_keep_dropped(residual + start, compensated, codes, header, length);
    }
}

void quantize_decode_add(double *restrict sums, const void *restrict in, size_t count,
                         unsigned bits)
{
    float decoded[QUANTIZE_BLOCK_VALUES];
    for (size_t start = 0; start < count; start += QUANTIZE_BLOCK_VALUES) {
        quantize_decode_block(decoded, in, count, start / QUANTIZE_BLOCK_VALUES, bits);
        size_t length = count - start < QUANTIZE_BLOCK_VALUES ? count - start
                                                              : QUANTIZE_BLOCK_VALUES;
        for (size_t i = 0; i < length; i++)
            sums[start + i] += decoded[i];
    }
}
